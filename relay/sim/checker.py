"""The invariants of DESIGN.md, checked over a simulated cluster after every step.

How this works: for each stream the checker keeps one reference timeline, the longest
verified prefix any replica has shown; every replica's verified prefix must be a prefix of
it (one timeline, digest agreement), the reference must ascend and chain from genesis, and
no (producer id, msg id) may appear twice in it. Acknowledged publishes are remembered and,
once the cluster is quiet, each must be in every live replica's verified timeline at the
acknowledged seq with the acknowledged digest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from relay.core.digest import fold, genesis
from relay.core.node import NodeCore


class InvariantViolation(AssertionError):
    pass


@dataclass(slots=True)
class StreamReference:
    seqs: list[int] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)
    keys: set[tuple[str, int]] = field(default_factory=set)
    last_digest: bytes = b""


@dataclass(slots=True)
class InvariantChecker:
    references: dict[str, StreamReference] = field(default_factory=dict)
    seen_upto: dict[tuple[int, str], int] = field(default_factory=dict)  # (node, stream) -> index
    last_seq_by_origin: dict[tuple[int, str], int] = field(default_factory=dict)
    acked: dict[tuple[str, str, int], tuple[int, bytes]] = field(default_factory=dict)

    def check_node(self, node: NodeCore) -> None:
        for name, state in node.streams.items():
            timeline = state.timeline
            ref = self.references.setdefault(name, StreamReference(last_digest=genesis(name)))
            key = (node.node_id, name)
            start = self.seen_upto.get(key, 0)
            # entries of this replica not yet compared, up to its verified point
            i = _index_after(timeline.seqs, ref.seqs[start - 1] if start else 0)
            pos = start
            while i < len(timeline.seqs) and timeline.seqs[i] <= timeline.verified_seq:
                seq, digest, tx = timeline.seqs[i], timeline.digests[i], timeline.txs[i]
                if pos < len(ref.seqs):
                    if ref.seqs[pos] != seq or ref.digests[pos] != digest:
                        raise InvariantViolation(
                            f"one timeline: node {node.node_id} verified {seq} at position "
                            f"{pos} of {name!r} where the reference has {ref.seqs[pos]}"
                        )
                else:
                    if ref.seqs and seq <= ref.seqs[-1]:
                        raise InvariantViolation(f"ascending seqs broken in {name!r} at {seq}")
                    expect = fold(ref.last_digest, seq, tx.origin, tx.payload)
                    if expect != digest:
                        raise InvariantViolation(f"digest chain broken in {name!r} at {seq}")
                    if tx.producer_id:
                        k = (tx.producer_id, tx.msg_id)
                        if k in ref.keys:
                            raise InvariantViolation(f"duplicate {k} verified in {name!r}")
                        ref.keys.add(k)
                    ref.seqs.append(seq)
                    ref.digests.append(digest)
                    ref.last_digest = digest
                pos += 1
                i += 1
            self.seen_upto[key] = pos

    def check_origin_seq(self, origin: int, stream: str, seq: int) -> None:
        last = self.last_seq_by_origin.get((origin, stream), 0)
        if seq <= last:
            raise InvariantViolation(f"ids: node {origin} issued {seq} after {last} in {stream!r}")
        self.last_seq_by_origin[(origin, stream)] = seq

    def check_ack(
        self, stream: str, producer_id: str, msg_id: int, seq: int, digest: bytes
    ) -> None:
        key = (stream, producer_id, msg_id)
        earlier = self.acked.get(key)
        if earlier is not None and earlier[0] != seq:
            raise InvariantViolation(
                f"idempotent retries: {key} acknowledged as {earlier[0]} and as {seq}"
            )
        self.acked[key] = (seq, digest)

    def check_no_acked_loss(self, live: list[NodeCore]) -> None:
        for (stream, pid, mid), (seq, digest) in self.acked.items():
            for node in live:
                if not node.replicates(stream):
                    continue
                state = node.streams.get(stream)
                got = state.timeline.digest_at(seq) if state else None
                verified = state.verified_seq if state else 0
                if got != digest or verified < seq:
                    raise InvariantViolation(
                        f"acknowledged loss: {stream!r} seq {seq} ({pid}, {mid}) is not verified "
                        f"on node {node.node_id} (verified {verified})"
                    )


def _index_after(seqs: list[int], seq: int) -> int:
    from bisect import bisect_right

    return bisect_right(seqs, seq)
