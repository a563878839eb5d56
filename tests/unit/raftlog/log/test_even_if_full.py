"""``ReplicatedLog.propose(..., even_if_full=True)``: while this node's disk is full its
writes are refused, except a request about that disk (metaledger's NOSPACE alarm, which the
other members commit): it is proposed, and applied here once space returns."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest

import raftlog.segments
from raftlog import Entry, NoSpaceError
from raftlog.health import State
from tests.unit.raftlog.log.test_faults import _Disk, make, until


def test_a_proposal_even_if_full_is_not_refused_and_applies_when_space_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = _Disk(errno.ENOSPC)
    monkeypatch.setattr(raftlog.segments, "_write_all", disk)
    rlog, sm, fatal = make(tmp_path, apply_on_loop=True)

    async def main() -> None:
        rlog.start()
        disk.failing.set()
        stalled = asyncio.ensure_future(rlog.propose([Entry("set", b"a", b"1")], 10))
        await until(lambda: rlog.health.state == State.NOSPACE)
        with pytest.raises(NoSpaceError):
            await rlog.propose([Entry("set", b"b", b"2")], 5)
        alarm = asyncio.ensure_future(
            rlog.propose([Entry("set", b"alarm", b"1")], 10, even_if_full=True)
        )
        await asyncio.sleep(0.05)
        assert not alarm.done()  # proposed, waiting for this node's apply
        disk.failing.clear()
        assert (await stalled).offset == 1
        assert (await alarm).offset == 2 and sm.data[b"alarm"] == b"1"

    try:
        asyncio.run(main())
    finally:
        rlog.stop()
    assert fatal == []
