"""What the node's disk tells the core: writes made durable or refused, logs restored at
start, and the oldest segments given up to retention.

How this works: a ``Persisted`` moves a stream's durable head and mark (its votes and acks may
move on); a ``PersistFailed`` stops the node acknowledging (publishes get ``storage``, votes
wait) and rewinds the stream's log cursor so the write is made again; a ``Restored`` rebuilds
a stream from its own log before any other event. ``NodeCore`` is this class plus the rest.
"""

from __future__ import annotations

from relay.core.events import Notice, Persisted, PersistFailed, Restored, Retained
from relay.core.parts import NodeParts


class LogEvents(NodeParts):
    def _on_persisted(self, event: Persisted) -> None:
        state = self.streams.get(event.stream)
        if state is not None:
            state.persisted(event.generation, event.seq, event.mark)
            self._touch(event.stream)
        if self.storage_error:
            self._effects.append(Notice("storage", "the disk takes writes again"))
            self.storage_error = ""

    def _on_persist_failed(self, event: PersistFailed) -> None:
        """Stop acknowledging: the votes wait for a ``Persisted`` that this write will not
        bring, publishes are refused, and the write is made again (``LogCursor.failed``)."""
        state = self.streams.get(event.stream)
        if state is not None:
            state.log.failed(event.sync, state.timeline)
        self.storage_error = event.why

    def _on_restored(self, event: Restored) -> None:
        if event.stream in self.streams:
            self._effects.append(Notice("restore", f"{event.stream}: already running; ignored"))
            return
        state = self._stream(event.stream)
        if state is None:
            why = "this node no longer replicates it or holds too many streams"
            self._effects.append(Notice("restore", f"{event.stream}: not restored: {why}"))
            return
        state.restore(
            event.base_seq,
            event.base_digest,
            event.txs,
            event.digests,
            event.verified_seq,
            event.dedup_keys,
        )
        state.log.base_seq = event.log_base
        self.origin.clock.observe(state.timeline.head_seq)
        self.stream_set.restored(event.stream)  # its first ack is paced

    def _on_retained(self, event: Retained) -> None:
        state = self.streams.get(event.stream)
        if state is not None:
            state.log.base_seq = max(state.log.base_seq, event.base_seq)
