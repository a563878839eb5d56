"""raftlog.log.gc_paused: restore builds millions of objects without the cyclic collector
scanning them, and optionally freezes them out of it afterwards."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from raftlog.log import gc_paused


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()  # an earlier test may have installed a snapshot (which freezes)
    yield
    gc.unfreeze()


def test_paused_inside_and_restored_after() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # the previous setting, not "on"
    finally:
        gc.enable()


def test_freeze_moves_what_was_built_out_of_the_generations() -> None:
    with gc_paused(freeze=True):
        built = [[i] for i in range(10_000)]
    assert gc.get_freeze_count() >= len(built) and gc.isenabled()


def test_an_error_inside_freezes_nothing() -> None:
    with pytest.raises(RuntimeError), gc_paused(freeze=True):
        raise RuntimeError("restore failed")
    assert gc.get_freeze_count() == 0 and gc.isenabled()
