"""A trial's process freezes the heap its setup built (workbench.trial.trainable): full
collections then scan only what the trial allocates since, and cycles made after the freeze
are still collected. tests/integration/test_diagnosis_integration.py shows the effect (a
0.2 s collection inside one 0.13 s iteration flipped its verdict)."""

from __future__ import annotations

import gc

from workbench.trial.trainable import freeze_setup_heap, thaw_setup_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> None:
    a, b = _Node(), _Node()
    a.other, b.other = b, a


def test_the_setup_heap_is_frozen_and_later_cycles_are_still_collected() -> None:
    try:
        before = [_Node() for _ in range(1000)]
        freeze_setup_heap()
        assert gc.get_freeze_count() >= len(before)
        _cycle()
        assert gc.collect() >= 2  # the cycle made after the freeze
    finally:
        thaw_setup_heap()
    assert gc.get_freeze_count() == 0
