"""What the node's disk tells the core: writes made durable or refused, logs restored at
start, and the oldest segments given up to retention.

How this works: a ``Persisted`` moves a stream's durable head and mark (its votes and acks may
move on); a ``PersistFailed`` stops the node acknowledging (publishes get ``storage``, votes
wait) and rewinds the stream's log cursor so the write is made again; a ``Restored`` rebuilds
a stream from its own log before any other event. ``LogEvents`` owns what the disk refused
last, until a write succeeds.
"""

from __future__ import annotations

from relay.core.events import Effect, Notice, Persisted, PersistFailed, Restored, Retained
from relay.core.origin import Origin
from relay.core.peers import Peers
from relay.core.streams import StreamSet

LogEvent = Persisted | PersistFailed | Restored | Retained


class LogEvents:
    def __init__(self, origin: Origin, peers: Peers, stream_set: StreamSet) -> None:
        self.origin = origin
        self.peers = peers
        self.stream_set = stream_set
        self.storage_error = ""  # what the disk refused last, until a write succeeds

    def take(self, out: list[Effect], event: LogEvent) -> None:
        if isinstance(event, Persisted):
            self._on_persisted(out, event)
        elif isinstance(event, PersistFailed):
            self._on_persist_failed(event)
        elif isinstance(event, Restored):
            self._on_restored(out, event)
        else:
            state = self.stream_set.by_name.get(event.stream)
            if state is not None:
                state.log_starts_after(event.base_seq, event.chained_seq)

    def _on_persisted(self, out: list[Effect], event: Persisted) -> None:
        state = self.stream_set.by_name.get(event.stream)
        if state is not None:
            state.persisted(event.generation, event.seq, event.mark)
            self.stream_set.touch(event.stream)
        if self.storage_error:
            out.append(Notice("storage", "the disk takes writes again"))
            self.storage_error = ""

    def _on_persist_failed(self, event: PersistFailed) -> None:
        """Stop acknowledging: the votes wait for a ``Persisted`` that this write will not
        bring, publishes are refused, and the write is made again (``LogCursor.failed``)."""
        state = self.stream_set.by_name.get(event.stream)
        if state is not None:
            state.persist_failed(event.sync)
        self.storage_error = event.why

    def _on_restored(self, out: list[Effect], event: Restored) -> None:
        if event.stream in self.stream_set.by_name:
            out.append(Notice("restore", f"{event.stream}: already running; ignored"))
            return
        state = self.stream_set.ensure(event.stream, self.origin.epoch, self.peers.states)
        if state is None:
            why = "this node no longer replicates it or holds too many streams"
            out.append(Notice("restore", f"{event.stream}: not restored: {why}"))
            return
        state.restore(
            event.base_seq,
            event.base_digest,
            event.txs,
            event.digests,
            event.verified_seq,
            event.dedup_keys,
            event.base_count,
        )
        state.log_starts_after(event.log_base, event.log_chained)
        self.origin.clock.observe(state.timeline.head_seq)
        self.stream_set.restored(event.stream)  # its first ack is paced
