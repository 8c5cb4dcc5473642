"""A trial's process freezes the heap its setup built (workbench.trial.trainable.SetupHeap):
full collections then scan only what the trial allocates since, and cycles made after the
freeze are still collected. A rebuild (a PBT exploit in a reused actor) keeps the heap frozen
until its turn comes (every 32nd), then collects the old algorithms' cycles all at once.
tests/integration/test_diagnosis_integration.py shows the freeze's effect (a 0.2 s collection
inside one 0.13 s iteration flipped its verdict)."""

from __future__ import annotations

import gc

from workbench.trial.trainable import SetupHeap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycles(count: int) -> list[_Node]:
    nodes = []
    for _ in range(count):
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        nodes.append(a)
    return nodes


def test_the_setup_heap_is_frozen_and_later_cycles_are_still_collected() -> None:
    heap = SetupHeap()
    try:
        before = [_Node() for _ in range(1000)]
        heap.freeze()
        assert gc.get_freeze_count() >= len(before)
        _cycles(1)
        assert gc.collect() >= 2  # the cycle made after the freeze
    finally:
        heap.release()
    assert gc.get_freeze_count() == 0


def test_a_rebuild_keeps_the_heap_frozen_until_its_turn_to_collect() -> None:
    heap = SetupHeap(rebuilds_per_thaw=3)
    try:
        old_algorithm = _cycles(100)  # built, then frozen with the setup heap
        heap.freeze()
        baseline = gc.get_freeze_count()
        del old_algorithm  # the rebuild drops it: frozen garbage now
        # Two rebuilds keep the heap frozen: nothing of it is collected.
        for _ in range(2):
            assert heap.thaw() is False
            assert gc.get_freeze_count() >= baseline - 1  # the list alone, freed by its count
            new_algorithm = _cycles(10)
            heap.freeze()  # after the rebuild: the new objects only
            assert gc.collect() == 0  # the old cycles are out of the collector's sight
        # The third gives the heap back, and the freeze after it collects the old cycles.
        assert heap.thaw() is True
        assert gc.get_freeze_count() == 0 and heap.kept == 0
        assert gc.collect() >= 200  # the first algorithm's 100 cycles of 2
        heap.freeze()
        assert heap.thaw() is False
        del new_algorithm
    finally:
        heap.release()
    assert gc.get_freeze_count() == 0
