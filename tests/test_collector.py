"""A node's collector: young collections it runs itself, survivors frozen, a full collection
only once the frozen objects outgrew their bound (relay/runtime/collector.py)."""

import gc
import weakref
from collections.abc import Iterator

import pytest

from relay.runtime.collector import YOUNG, Collector


class Node:
    """A tracked object that can be part of a cycle and be watched by a weak reference."""

    def __init__(self) -> None:
        self.other: object = None


def cycle() -> weakref.ref[Node]:
    """A garbage cycle, gone as soon as a collection finds it."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def restored() -> Iterator[None]:
    """The collector as it was, after a test that gave it a node's policy."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()
        gc.set_threshold(*thresholds)


def alive(count: int) -> list[Node]:
    return [Node() for _ in range(count)]


def test_the_node_collects_young_objects_itself_and_freezes_what_survives(restored: None) -> None:
    collector = Collector()
    assert not gc.isenabled()
    frozen = gc.get_freeze_count()
    held = alive(YOUNG // 2)
    dead = cycle()
    collector.turn()  # fewer than YOUNG: nothing runs
    assert dead() is not None and gc.get_freeze_count() == frozen
    held += alive(YOUNG // 2)
    collector.turn()
    assert dead() is None  # a cycle that died young is freed by the young collection
    assert gc.get_count()[0] == 0
    assert gc.get_freeze_count() >= frozen + YOUNG  # the survivors, never scanned again
    assert len(held) == 2 * (YOUNG // 2)


def test_frozen_cycles_are_freed_once_the_frozen_objects_outgrow_the_bound(restored: None) -> None:
    collector = Collector(slack=3 * YOUNG)
    cycles = [cycle() for _ in range(YOUNG // 2)]
    held = [ref() for ref in cycles]  # alive at the young collection: frozen with the rest
    collector.turn()
    del held
    assert all(ref() is not None for ref in cycles)  # frozen garbage: nothing frees it yet
    kept = collector.kept
    held_more: list[Node] = []
    while all(ref() is not None for ref in cycles):
        held_more += alive(YOUNG)
        collector.turn()
        # frozen: what was kept, the cycles, and these; the bound: twice kept, and the slack
        assert len(held_more) <= kept + 2 * YOUNG + 2 * YOUNG
    assert not any(ref() is not None for ref in cycles)
    assert collector.kept == gc.get_freeze_count() >= len(held_more)
