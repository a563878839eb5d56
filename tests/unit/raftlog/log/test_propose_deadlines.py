"""Proposal deadlines: one periodic sweep instead of a timer per request
(raftlog/deadlines.py), and ReplicatedLog.propose's timeout through it."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from raftlog import Entry, InMemoryEngine, ReplicatedLog, SegmentConfig, SegmentLog
from raftlog.deadlines import DeadlineSweep
from raftlog.errors import UnknownOutcomeError
from tests.unit.raftlog.log.test_replicated_log import DictMachine


class SilentEngine(InMemoryEngine):
    """Accepts every proposal and never commits it (a leader cut off from its majority)."""

    def propose(self, data: bytes, callback: Any) -> None:
        callback(1, None)


def test_a_proposal_never_committed_times_out_on_time_and_forgets_its_waiter(
    tmp_path: Path,
) -> None:
    segments = SegmentLog.open(tmp_path / "log", SegmentConfig(fsync_policy="never"))
    rlog = ReplicatedLog(SilentEngine(), DictMachine(), segments, "n0")
    rlog.start()

    async def main() -> float:
        started = time.monotonic()
        with pytest.raises(UnknownOutcomeError, match=r"not applied within 0\.2s"):
            await rlog.propose([Entry("set", b"k", b"v")], 0.2)
        return time.monotonic() - started

    try:
        for _ in range(2):  # a second event loop gets its own sweep
            elapsed = asyncio.run(main())
            assert 0.2 <= elapsed < 1.5
            assert len(rlog._group_commit._wait) == 0
    finally:
        rlog.stop()


def test_the_sweep_expires_only_pending_futures_in_deadline_order_then_stops() -> None:
    expired: list[tuple[Any, float]] = []

    def on_expire(key: Any, fut: asyncio.Future[Any], timeout_s: float) -> None:
        expired.append((key, timeout_s))
        fut.set_result(None)

    sweep = DeadlineSweep(on_expire, every_s=0.01)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        futs = {name: loop.create_future() for name in ("slow", "fast", "answered")}
        sweep.add(loop, 0.3, "slow", futs["slow"])
        sweep.add(loop, 0.05, "fast", futs["fast"])
        sweep.add(loop, 0.05, "answered", futs["answered"])
        futs["answered"].set_result("applied")  # answered in time: never expired
        await asyncio.wait_for(futs["fast"], 1)
        assert expired == [("fast", 0.05)] and not futs["slow"].done()
        await asyncio.wait_for(futs["slow"], 1)
        assert expired == [("fast", 0.05), ("slow", 0.3)]
        assert len(sweep) == 0
        assert sweep._timer is None  # the sweep that expired the last one did not re-arm

    asyncio.run(main())


def test_an_answered_future_is_not_kept_alive_until_its_deadline() -> None:
    sweep = DeadlineSweep(lambda key, fut, timeout_s: None, every_s=10)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        sweep.add(loop, 60, "k", fut)
        fut.set_result(bytearray(1 << 20))  # a big answer
        ref = weakref.ref(fut)
        del fut
        gc.collect()
        assert ref() is None and len(sweep) == 1  # freed; its deadline entry is skipped later

    asyncio.run(main())
