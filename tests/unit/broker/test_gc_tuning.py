"""``metaledger broker`` sets the garbage collector once it has started (``broker.cli.tune_gc``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from broker.cli import GC_THRESHOLD, tune_gc


@pytest.fixture
def restored_gc() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


@pytest.mark.usefixtures("restored_gc")
def test_tune_gc_freezes_what_exists_and_collects_young_objects_less_often() -> None:
    gc.unfreeze()
    kept = [[] for _ in range(100)]  # objects that exist at start-up
    tune_gc()
    assert gc.get_threshold() == GC_THRESHOLD
    assert GC_THRESHOLD[0] > 700  # CPython's default young threshold
    assert gc.get_freeze_count() >= len(kept)  # out of the collector's generations
    assert gc.get_count()[0] < GC_THRESHOLD[0]
