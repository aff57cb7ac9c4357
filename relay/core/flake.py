"""Flake-style 64-bit sequence numbers.

How this works: a seq is ``(ms since EPOCH_MS) << 22 | node_id << 12 | counter``. Seqs from
one node strictly increase: each new seq is the larger of "now" (counter 0) and the smallest
seq above the clock's floor that carries this node's id. The floor also rises whenever the
node *observes* a seq from another node (a hybrid logical clock), so after seeing seq ``s`` a
node never originates a seq at or below ``s``. That is what makes a node's floor a promise
other replicas can rely on: "I will never originate a seq at or below this".
"""

from __future__ import annotations

EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
NODE_BITS = 10
COUNTER_BITS = 12
NODE_ID_MAX = (1 << NODE_BITS) - 1
COUNTER_MAX = (1 << COUNTER_BITS) - 1
TIME_SHIFT = NODE_BITS + COUNTER_BITS
SEQ_MAX = (1 << 63) - 1


def make_seq(unix_ms: int, node_id: int, counter: int = 0) -> int:
    """The seq for a wall-clock time (unix ms), a node and a counter."""
    ms = max(0, unix_ms - EPOCH_MS)
    return (ms << TIME_SHIFT) | (node_id << COUNTER_BITS) | counter


def seq_unix_ms(seq: int) -> int:
    """The wall-clock time (unix ms) a seq was stamped with."""
    return (seq >> TIME_SHIFT) + EPOCH_MS


def seq_node(seq: int) -> int:
    """The id of the node that originated a seq."""
    return (seq >> COUNTER_BITS) & NODE_ID_MAX


class FlakeClock:
    """One node's seq generator; also its promise (``floor``) to the rest of the cluster."""

    __slots__ = ("floor", "node_id")

    def __init__(self, node_id: int, floor: int = 0) -> None:
        if not 0 <= node_id <= NODE_ID_MAX:
            raise ValueError(f"node id {node_id} is outside 0..{NODE_ID_MAX}")
        self.node_id = node_id
        self.floor = floor

    def next_seq(self, now_unix_ms: int) -> int:
        """A new seq, strictly above every seq this clock issued or observed."""
        now = make_seq(now_unix_ms, self.node_id)
        seq = now if now > self.floor else self._smallest_own_seq_above(self.floor)
        self.floor = seq
        return seq

    def next_seqs(self, now_unix_ms: int, count: int) -> range | list[int]:
        """``count`` new seqs in ascending order, as ``next_seq`` would give them one by one."""
        first = self.next_seq(now_unix_ms)
        if (first & COUNTER_MAX) + count - 1 <= COUNTER_MAX:  # all in one millisecond
            self.floor = first + count - 1
            return range(first, first + count)
        seqs = [first]
        for _ in range(count - 1):
            seqs.append(self._smallest_own_seq_above(seqs[-1]))
        self.floor = seqs[-1]
        return seqs

    def observe(self, seq: int) -> None:
        """Promise never to originate a seq at or below ``seq``."""
        if seq > self.floor:
            self.floor = seq

    def _smallest_own_seq_above(self, seq: int) -> int:
        ms = seq >> TIME_SHIFT
        node = (seq >> COUNTER_BITS) & NODE_ID_MAX
        counter = seq & COUNTER_MAX
        if node < self.node_id:
            return (ms << TIME_SHIFT) | (self.node_id << COUNTER_BITS)
        if node == self.node_id and counter < COUNTER_MAX:
            return seq + 1
        return ((ms + 1) << TIME_SHIFT) | (self.node_id << COUNTER_BITS)
