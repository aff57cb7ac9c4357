"""The jobs of a work group that wait: ready ones in claim order, delayed ones by time.

How this works: a job ready at once goes to the FIFO of its priority, eight bytes (its seq) in
an array, since such jobs come in seq order and a seq's time orders them. A job with a
not-before time waits in the delayed heap until the group's clock reaches it, and then, like a
job that comes back after a nak or an expired lease, in the *due* heap of its priority, by its
order time. A claim takes, for each priority from the most urgent, the better of the FIFO's
first job and the due heap's first, passing over jobs whose resource is busy (they keep their
place). A job taken from inside a FIFO, or replaced by a newer job for its resource, is marked
gone and dropped when reached, so nothing moves inside an array. Only the fold changes this
index (reads such as ``peek`` change nothing), so its size in bytes, which bounds how many jobs
a group takes in, is the same on every replica.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice

from relay.core.flake import seq_unix_ms

FIFO_ENTRY_BYTES = 8
HEAP_ENTRY_BYTES = 120  # a tuple of three ints in a heap
GONE_BYTES = 70  # a seq in a set
KEYED_BYTES = 150  # a key's entry in a dict, beyond the key
GONE_DROP_LEAST = 4096  # gone markers held before the queues are ever rebuilt without them

DueEntry = tuple[int, int, int]  # (order ms, seq, not before)
FIFO, DUE, DELAYED = "fifo", "due", "delayed"


@dataclass(frozen=True, slots=True)
class Waiting:
    """A job that waits, as a claim hands it out."""

    seq: int
    priority: int
    not_before: int  # 0: ready at once
    key: bytes | None
    order_ms: int  # where it sits in its priority


class Fifo:
    """One priority's jobs ready at once, in seq order."""

    __slots__ = ("head", "seqs")

    def __init__(self) -> None:
        self.seqs = array("q")
        self.head = 0

    def __len__(self) -> int:
        return len(self.seqs) - self.head

    def entries(self) -> Iterator[int]:
        seqs = self.seqs
        return (seqs[i] for i in range(self.head, len(seqs)))


class WaitingJobs:
    def __init__(self) -> None:
        self.fifos: dict[int, Fifo] = {}
        self.due: dict[int, list[DueEntry]] = {}
        self.delayed: list[tuple[int, int, int]] = []  # (not before, seq, priority)
        self.keys: dict[int, bytes] = {}  # seq -> key, of waiting jobs that have one
        self.where: dict[int, tuple[str, int]] = {}  # seq -> (FIFO, DUE or DELAYED, priority)
        self.fifo_gone: set[int] = set()  # seqs inside a FIFO that left it
        self.heap_gone: set[int] = set()  # seqs in a heap that were replaced
        self.count_by_priority: dict[int, int] = {}
        self.delayed_by_priority: dict[int, int] = {}
        self.clock_ms = 0
        self.key_bytes = 0

    def __len__(self) -> int:
        return sum(self.count_by_priority.values())

    def size_bytes(self) -> int:
        """What the index holds, by the same count on every replica."""
        fifo = sum(len(f) for f in self.fifos.values())
        heaps = len(self.delayed) + sum(len(d) for d in self.due.values())
        gone = len(self.fifo_gone) + len(self.heap_gone)
        held = fifo * FIFO_ENTRY_BYTES + heaps * HEAP_ENTRY_BYTES + gone * GONE_BYTES
        return held + self.key_bytes

    def delayed_count(self) -> int:
        return sum(self.delayed_by_priority.values())

    def add(self, job: Waiting) -> None:
        """A job starts to wait: new, or back after a delivery (then at its order time)."""
        p = job.priority
        _bump(self.count_by_priority, p, 1)
        fifo = self.fifos.get(p)
        at_once = job.not_before == 0 and job.order_ms == seq_unix_ms(job.seq)
        if job.not_before > self.clock_ms:
            heapq.heappush(self.delayed, (job.not_before, job.seq, p))
            _bump(self.delayed_by_priority, p, 1)
            where = DELAYED
        elif at_once and (fifo is None or not len(fifo) or fifo.seqs[-1] < job.seq):
            self.fifos.setdefault(p, Fifo()).seqs.append(job.seq)
            where = FIFO
        else:
            heapq.heappush(self.due.setdefault(p, []), (job.order_ms, job.seq, job.not_before))
            where = DUE
        if job.key is not None:
            self.keys[job.seq] = job.key
            self.where[job.seq] = (where, p)
            self.key_bytes += KEYED_BYTES + len(job.key)

    def replace(self, seq: int) -> None:
        """A waiting job with a key leaves unclaimed: a newer job for its resource replaced
        it."""
        where, priority = self.where[seq]
        if where == DELAYED:
            _bump(self.delayed_by_priority, priority, -1)
        (self.fifo_gone if where == FIFO else self.heap_gone).add(seq)
        self._left(seq, priority)
        self._drop_gone()

    def _drop_gone(self) -> None:
        """Once gone markers are most of what the queues hold (coalescing replaces a job of a
        busy resource at every update), rebuild the queues without them: amortized, each
        entry is copied at most once per marker that joined it, and every replica does it at
        the same point, so sizes stay the same everywhere."""
        gone = len(self.fifo_gone) + len(self.heap_gone)
        if gone < GONE_DROP_LEAST or 2 * gone < len(self) + gone:
            return
        for p, fifo in list(self.fifos.items()):
            kept = array("q", (s for s in fifo.entries() if s not in self.fifo_gone))
            fifo.seqs, fifo.head = kept, 0
            if not kept:
                del self.fifos[p]
        self.fifo_gone.clear()
        heap_gone = self.heap_gone
        self.delayed = [e for e in self.delayed if e[1] not in heap_gone]
        heapq.heapify(self.delayed)
        for p, due in list(self.due.items()):
            left = [e for e in due if e[1] not in heap_gone]
            heapq.heapify(left)
            if left:
                self.due[p] = left
            else:
                del self.due[p]
        heap_gone.clear()

    def _left(self, seq: int, priority: int) -> None:
        _bump(self.count_by_priority, priority, -1)
        key = self.keys.pop(seq, None)
        if key is not None:
            del self.where[seq]
            self.key_bytes -= KEYED_BYTES + len(key)

    def advance(self, now_ms: int) -> None:
        """The group's clock reached ``now_ms``: delayed jobs up to it become due."""
        self.clock_ms = max(self.clock_ms, now_ms)
        while self.delayed and self.delayed[0][0] <= self.clock_ms:
            nb, seq, p = heapq.heappop(self.delayed)
            if seq in self.heap_gone:
                self.heap_gone.discard(seq)
                continue
            _bump(self.delayed_by_priority, p, -1)
            heapq.heappush(self.due.setdefault(p, []), (nb, seq, nb))
            if seq in self.where:
                self.where[seq] = (DUE, p)

    def take(self, count: int, busy: Callable[[bytes], bool] | None) -> list[Waiting]:
        """Up to ``count`` ready jobs in claim order. With ``busy`` (resources exclusive), a
        job whose key it names, or whose key a job taken before in this call has, is passed
        over."""
        taken: list[Waiting] = []
        taken_keys: set[bytes] = set()

        def passed(key: bytes) -> bool:
            return busy is not None and (key in taken_keys or busy(key))

        for p in sorted(self.count_by_priority):
            while len(taken) < count:
                job = self._take_one(p, passed)
                if job is None:
                    break
                taken.append(job)
                if job.key is not None:
                    taken_keys.add(job.key)
        return taken

    def _take_one(self, p: int, busy: Callable[[bytes], bool]) -> Waiting | None:
        fifo = self.fifos.get(p)
        index = self._fifo_first(fifo, busy)
        due = self.due.get(p)
        head = self._due_first(due, busy) if due else None
        if index < 0 and head is None:
            return None
        if index >= 0 and fifo is not None:
            seq = fifo.seqs[index]
            if head is None or (seq_unix_ms(seq), seq) < head[:2]:
                if index == fifo.head:
                    fifo.head += 1
                    self._compact(p, fifo)
                else:
                    self.fifo_gone.add(seq)
                    self._drop_gone()
                job = Waiting(seq, p, 0, self.keys.get(seq), seq_unix_ms(seq))
                self._left(seq, p)
                return job
        assert due is not None and head is not None
        if due[0] == head:
            heapq.heappop(due)
        else:  # passed over busy resources
            due.remove(head)
            heapq.heapify(due)
        if not due:
            del self.due[p]
        order, seq, nb = head
        job = Waiting(seq, p, nb, self.keys.get(seq), order)
        self._left(seq, p)
        return job

    def _compact(self, p: int, fifo: Fifo) -> None:
        if not len(fifo):
            del self.fifos[p]
        elif fifo.head > 4096 and fifo.head * 2 > len(fifo.seqs):
            del fifo.seqs[: fifo.head]
            fifo.head = 0

    def _fifo_first(self, fifo: Fifo | None, busy: Callable[[bytes], bool]) -> int:
        """The index of the FIFO's first job neither gone nor busy (-1: none); gone jobs at its
        head are dropped."""
        if fifo is None:
            return -1
        seqs = fifo.seqs
        while fifo.head < len(seqs) and seqs[fifo.head] in self.fifo_gone:
            self.fifo_gone.discard(seqs[fifo.head])
            fifo.head += 1
        for i in range(fifo.head, len(seqs)):
            seq = seqs[i]
            if seq not in self.fifo_gone and not self._busy(seq, busy):
                return i
        return -1

    def _due_first(self, due: list[DueEntry], busy: Callable[[bytes], bool]) -> DueEntry | None:
        """The due heap's first entry whose key is not busy; replaced entries are dropped."""
        while due and due[0][1] in self.heap_gone:
            self.heap_gone.discard(heapq.heappop(due)[1])
        if due and not self._busy(due[0][1], busy):
            return due[0]
        free = [e for e in due if e[1] not in self.heap_gone and not self._busy(e[1], busy)]
        return min(free) if free else None

    def _busy(self, seq: int, busy: Callable[[bytes], bool]) -> bool:
        key = self.keys.get(seq)
        return key is not None and busy(key)

    def peek(self, count: int) -> list[Waiting]:
        """The next ``count`` ready jobs in claim order, resources aside; changes nothing."""
        found: list[Waiting] = []
        for p in sorted(self.count_by_priority):
            fifo = self.fifos.get(p)
            wanted = count - len(found)
            firsts = (s for s in (fifo.entries() if fifo else ()) if s not in self.fifo_gone)
            ready: list[DueEntry] = [(seq_unix_ms(s), s, 0) for s in islice(firsts, wanted)]
            due = (e for e in self.due.get(p, ()) if e[1] not in self.heap_gone)
            ready += heapq.nsmallest(wanted, due)
            for order, seq, nb in sorted(ready)[:wanted]:
                found.append(Waiting(seq, p, nb, self.keys.get(seq), order))
            if len(found) >= count:
                break
        return found

    def oldest_ready_ms(self) -> int:
        """The earliest order time among ready jobs (0: none); changes nothing."""
        firsts: list[int] = []
        for fifo in self.fifos.values():
            first = next((s for s in fifo.entries() if s not in self.fifo_gone), 0)
            if first:
                firsts.append(seq_unix_ms(first))
        for due in self.due.values():
            if due and due[0][1] not in self.heap_gone:  # the heap's least, unless replaced
                firsts.append(due[0][0])
            else:
                firsts += [min((e for e in due if e[1] not in self.heap_gone), default=(0,))[0]]
        return min((f for f in firsts if f), default=0)

    def next_ready_ms(self) -> int:
        """When the earliest delayed job becomes ready (0: none delayed); changes nothing."""
        return min((e[0] for e in self.delayed if e[1] not in self.heap_gone), default=0)


def _bump(counts: dict[int, int], key: int, by: int) -> None:
    left = counts.get(key, 0) + by
    if left:
        counts[key] = left
    else:
        counts.pop(key, None)
