"""A compacted stream in the simulator: keyed updates and tombstones published to it, each
node's real compactor run on its simulated disk, and a checker of what a reader from the
earliest gets.

How this works: in the seeds that draw one, stream ``a.kv`` is compacted (``cleanup =
"compact"``, small segments, a drawn tombstone retention) and a producer publishes updates of a
few keys to it, some of them tombstones. Every ``COMPACT_MS`` each running node's compactor
takes a pass (at once: ``InlineCompactions``), bounded as a node's is by its groups' commits,
its verified mark and its dedup window, and its core hears where the log now chains from; the
nodes crash, lose power and restart under it as in any seed. Once the cluster is quiet, each
replica's log is read from the start through the real read path, every kept record checked on
its own, and it must give, for each key, the newest value of the verified timeline (the
reference), never an older value of a key whose newest update is a tombstone, and no tombstone
that a pass should have dropped (past its retention, in a sealed segment within the bound, on
a node that has run a few passes since). A replica whose log started over from a peer's
snapshot holds none of what came before it (a compacted range is not sent to a peer): its keys
are checked from there on.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from relay.core.flake import make_seq, seq_unix_ms
from relay.core.messages import Tx, fold_tx
from relay.core.node import NodeCore
from relay.core.routing import GROUP_SUFFIX
from relay.runtime.group_lag import compaction_bounds
from relay.shell import Shell
from relay.sim.checker import InvariantChecker, InvariantViolation
from relay.sim.clients import Publish, SimClients
from relay.sim.plan import COMPACTED_DEDUP_MS
from relay.storage.settings import StorageSettings
from relay.storage.stream_log import StreamLog

STREAM = "a.kv"
KEYS = 6
COMPACT_MS = 200  # how often each node's compactor takes a pass
SEGMENT_BYTES = 4096
PASSES_SINCE = 3  # a node that ran this many passes since a tombstone expired has dropped it


class SimCompaction:
    def __init__(self, rng: random.Random, publish_window: tuple[int, int]) -> None:
        self.rng = rng
        self.retention_ms = rng.choice([100, 300, 800])
        first, last = publish_window
        self.times = sorted(rng.randint(first, last) for _ in range(rng.randint(20, 120)))
        self.sent = 0
        self.next_pass: dict[int, int] = {}  # node -> when its compactor runs next
        self.started: dict[int, int] = {}  # node -> the sim ms its current process started
        # node -> the bounds its core gave its last passes (what a quorum's logs held, ...)
        self.bounds: dict[int, deque[int]] = {}
        self.passes = 0

    def settled(self, shells: dict[int, Shell], wall_ms: Callable[[int], int]) -> bool:
        """Whether every replica's compactor has had time to take the whole stream: its
        clock is past the head's time by the dedup window, the tombstones' retention and a few
        passes (seqs may run ahead of a node's clock: another's was ahead)."""
        lag = COMPACTED_DEDUP_MS + self.retention_ms + (PASSES_SINCE + 2) * COMPACT_MS
        for n, shell in shells.items():
            log = shell.disk.store.logs.get(STREAM)
            if log is not None and wall_ms(n) - lag < seq_unix_ms(log.head_seq):
                return False
        return not self.times

    def storage(self, base: StorageSettings) -> Callable[[str], StorageSettings]:
        compacted = replace(
            base,
            cleanup="compact",
            delete_retention_ms=self.retention_ms,
            segment_bytes=SEGMENT_BYTES,
        )
        return lambda stream: compacted if stream == STREAM else base

    def publish(self, now_ms: int, clients: SimClients) -> None:
        while self.times and self.times[0] <= now_ms:
            self.times.pop(0)
            self.sent += 1
            key = b"k%d" % self.rng.randrange(KEYS)
            payload = b"" if self.rng.random() < 0.15 else b"v%d" % self.sent
            pub = Publish(STREAM, "kv", self.sent, payload, headers=(), key=key)
            clients.send(now_ms, pub)

    def started_node(self, n: int, now_ms: int) -> None:
        self.started[n] = now_ms
        self.next_pass[n] = now_ms + COMPACT_MS
        self.bounds[n] = deque(maxlen=PASSES_SINCE + 1)

    def tick(self, n: int, now_ms: int, wall_ms: int, shell: Shell, core: NodeCore) -> None:
        """Node ``n``'s compactor, if its time came: a pass installed and started."""
        if self.next_pass.get(n, now_ms + 1) > now_ms:
            return
        self.next_pass[n] = now_ms + COMPACT_MS
        groups = {name for name in core.streams if GROUP_SUFFIX in name}
        bounds = compaction_bounds(core, groups)
        self.bounds[n].append(bounds.get(STREAM, 0))
        shell.pending += shell.disk.compact(wall_ms, bounds)
        self.passes += 1

    def check(
        self,
        checker: InvariantChecker,
        nodes: dict[int, NodeCore],
        shells: dict[int, Shell],
        now_ms: int,
        wall_ms: Callable[[int], int],
    ) -> None:
        ref = checker.references.get(STREAM)
        if ref is None or ref.txs is None:
            return
        newest: dict[bytes, Tx] = {}
        for tx in ref.txs:
            if tx.key is not None:
                newest[tx.key] = tx
        for n, shell in shells.items():
            log = shell.disk.store.logs.get(STREAM)
            if log is None or not nodes[n].replicates(STREAM):
                continue
            self._check_replica(n, log, newest, now_ms - self.started[n], wall_ms(n))

    def _check_replica(
        self, n: int, log: StreamLog, newest: dict[bytes, Tx], ran_ms: int, wall_ms: int
    ) -> None:
        where = f"compaction: node {n}'s log of {STREAM!r}"
        held: dict[bytes, Tx] = {}
        after = log.base_seq  # a log started over from a peer's snapshot holds nothing before
        while True:
            found = log.read(after, 1 << 63, 1000, 1 << 62)
            if found is None and after >= log.head_seq:
                break
            if found is None:
                raise InvariantViolation(f"{where} no longer holds seq {after}")
            chain = found.prev
            for i, (tx, digest) in enumerate(found.records):
                prev = found.prevs[i] if found.through else chain
                if fold_tx(prev, tx) != digest:
                    raise InvariantViolation(f"{where}: seq {tx.seq} does not fold to its digest")
                chain = digest
                if tx.key is not None:
                    held[tx.key] = tx
            end = max([after, found.through, *(tx.seq for tx, _ in found.records)])
            if end == after:
                break
            after = end
        upto = min(log.mark, log.head_seq)
        for key, tx in newest.items():
            if not log.base_seq < tx.seq <= upto:
                continue  # not in this replica's verified log yet, or before its snapshot
            got = held.get(key)
            if got is not None:  # a log links past skipped copies (``DedupIndex.as_logged``)
                got = got._replace(prev=tx.prev)
            if tx.payload and got != tx:
                raise InvariantViolation(
                    f"{where}: key {key!r} reads as {got and got.seq}, not its newest value "
                    f"(seq {tx.seq})"
                )
            if not tx.payload and got is not None and got != tx:
                raise InvariantViolation(
                    f"{where}: key {key!r} was deleted (tombstone at seq {tx.seq}) but reads "
                    f"as seq {got.seq}"
                )
        # what the passes of the last while could take: sealed segments within their bound
        then = wall_ms - PASSES_SINCE * COMPACT_MS
        given = self.bounds[n]
        core_bound = given[0] if len(given) == given.maxlen else 0
        bound = min(log.mark, make_seq(then - COMPACTED_DEDUP_MS, 0), core_bound)
        heads = [s.head_seq for s in log.segments if s.sealed and s.head_seq <= bound]
        reach = heads[-1] if heads else 0
        for tx in held.values():
            expired = seq_unix_ms(tx.seq) + self.retention_ms < then
            settled = ran_ms > (PASSES_SINCE + 1) * COMPACT_MS
            if not tx.payload and expired and settled and tx.seq <= reach:
                raise InvariantViolation(
                    f"{where}: the tombstone of {tx.key!r} at seq {tx.seq} is past its "
                    f"retention ({self.retention_ms} ms) and still read"
                )
