"""raftlog.ReplicatedLog under injected faults (issue 14): an OSError writing the change log
stalls apply (degraded, retried) instead of killing it; writes are refused while out of
space; a bug on the apply path calls ``on_fatal`` once instead of leaving a half-dead node."""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import raftlog.log.snapshot_duties
import raftlog.segments
from raftlog import Entry, InMemoryEngine, NoSpaceError, ReplicatedLog, SegmentConfig, SegmentLog
from raftlog.health import State
from tests.unit.raftlog.log.test_replicated_log import DictMachine


class _Disk:
    """``segments._write_all`` that fails with ``errno`` while ``failing`` is set."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.failing = threading.Event()
        self.attempts = 0
        self.real = raftlog.segments._write_all

    def __call__(self, f: object, data: bytes) -> None:
        if self.failing.is_set():
            self.attempts += 1
            raise OSError(self.code, "injected")
        self.real(f, data)  # type: ignore[arg-type]


def make(
    tmp_path: Path, apply_on_loop: bool, sm: DictMachine | None = None
) -> tuple[ReplicatedLog, DictMachine, list[str]]:
    sm = sm or DictMachine()
    segments = SegmentLog.open(tmp_path / "log", SegmentConfig(fsync_policy="never"))
    fatal: list[str] = []
    rlog = ReplicatedLog(
        InMemoryEngine(), sm, segments, "n0", apply_on_loop=apply_on_loop, on_fatal=fatal.append
    )
    return rlog, sm, fatal


async def until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not cond():
            await asyncio.sleep(0.005)


def records(tmp_path: Path) -> list[tuple[int, int]]:
    """The change log's keys, read back from disk after the log stopped."""
    with SegmentLog.open(tmp_path / "log", SegmentConfig(fsync_policy="never")) as segments:
        return [(r.offset, r.sub) for r in segments.read_from(0)]


@pytest.mark.parametrize("apply_on_loop", [False, True], ids=["apply-thread", "inline"])
def test_a_full_change_log_stalls_apply_refuses_writes_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, apply_on_loop: bool
) -> None:
    disk = _Disk(errno.ENOSPC)
    monkeypatch.setattr(raftlog.segments, "_write_all", disk)
    rlog, sm, fatal = make(tmp_path, apply_on_loop)

    async def main() -> None:
        rlog.start()
        await rlog.propose([Entry("set", b"a", b"1")], 5)
        disk.failing.set()
        b = asyncio.ensure_future(rlog.propose([Entry("set", b"b", b"2")], 10))
        await until(lambda: rlog.health.state == State.NOSPACE)
        await until(lambda: disk.attempts >= 3)  # retried with backoff, still failing
        assert not b.done() and b"b" not in sm.data  # not published before it is on disk
        with pytest.raises(NoSpaceError, match="database space exceeded"):
            await rlog.propose([Entry("set", b"c", b"3")], 5)
        disk.failing.clear()
        applied = await b
        assert applied.offset == 2 and sm.data[b"b"] == b"2"
        assert rlog.health.state == State.OK
        await rlog.propose([Entry("set", b"c", b"3")], 5)  # writes accepted again

    try:
        asyncio.run(main())
    finally:
        rlog.stop()
    assert records(tmp_path) == [(1, 0), (2, 0), (3, 0)]  # each once: nothing half-written
    assert fatal == []


def test_an_io_error_stalls_inline_apply_and_later_commits_queue_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EIO does not refuse writes: what commits meanwhile waits behind the stalled group
    (the apply thread takes it over from the loop) and lands in order."""
    disk = _Disk(errno.EIO)
    monkeypatch.setattr(raftlog.segments, "_write_all", disk)
    rlog, sm, fatal = make(tmp_path, apply_on_loop=True)

    async def main() -> None:
        rlog.start()
        disk.failing.set()
        first = asyncio.ensure_future(rlog.propose([Entry("set", b"a", b"1")], 10))
        await until(lambda: rlog.health.state == State.IO_ERROR)
        assert not rlog.health.refuses_writes
        second = asyncio.ensure_future(rlog.propose([Entry("set", b"a", b"2")], 10))
        await until(lambda: disk.attempts >= 2)
        assert not first.done() and not second.done()
        disk.failing.clear()
        assert [(await first).offset, (await second).offset] == [1, 2]
        assert sm.data[b"a"] == b"2"
        assert rlog.health.state == State.OK

    try:
        asyncio.run(main())
    finally:
        rlog.stop()
    assert records(tmp_path) == [(1, 0), (2, 0)]
    assert fatal == []


class _BrokenPublish(DictMachine):
    def publish(self) -> None:
        raise RuntimeError("a bug in publish")


@pytest.mark.parametrize("apply_on_loop", [False, True], ids=["apply-thread", "inline"])
def test_a_bug_on_the_apply_path_calls_on_fatal_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, apply_on_loop: bool
) -> None:
    rlog, _, fatal = make(tmp_path, apply_on_loop, _BrokenPublish())

    async def main() -> None:
        rlog.start()
        proposals = [
            asyncio.ensure_future(rlog.propose([Entry("set", key, b"1")], 1))
            for key in (b"a", b"b")
        ]
        await until(lambda: bool(fatal))
        for p in proposals:
            p.cancel()
        await asyncio.sleep(0)  # the second item arrives: nothing more is reported

    with caplog.at_level(logging.ERROR, logger="raftlog.log"):
        try:
            asyncio.run(main())
        finally:
            rlog.stop()
    assert len(fatal) == 1 and "RuntimeError: a bug in publish" in fatal[0], fatal
    critical = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(critical) == 1 and critical[0].exc_info is not None  # once, with its traceback


class _Captured:
    last_offset = 0
    last_term = 0

    def records(self) -> list[tuple[str, bytes, bytes]]:
        return []


class _CapturingMachine(DictMachine):
    def capture(self) -> _Captured:
        captured = _Captured()
        captured.last_offset = self.last_offset
        return captured


class _FullSnapshotDisk:
    """A SnapshotSink whose writes fail with ENOSPC while ``failing`` is set."""

    def __init__(self) -> None:
        self.failing = True
        self.writes = 0

    def write(self, captured: object, raft_index: int, engine_meta: bytes) -> str:
        self.writes += 1
        if self.failing:
            raise OSError(errno.ENOSPC, "No space left on device")
        return "snap"

    def publish(self, path: str) -> None:
        pass

    def retention_offset(self) -> int:
        return 0


def test_a_snapshot_without_space_fails_quietly_and_is_tried_again_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The node goes on (writes are not refused for a snapshot), a WARNING without a
    traceback, no new attempt for SNAPSHOT_RETRY_S (here 0.5 s), and a later success clears it."""
    rlog, _, fatal = make(tmp_path, apply_on_loop=False, sm=_CapturingMachine())
    sink = _FullSnapshotDisk()
    rlog.enable_snapshots(sink, 0)  # type: ignore[arg-type]
    monkeypatch.setattr(raftlog.log.snapshot_duties, "SNAPSHOT_RETRY_S", 0.5)

    async def main() -> None:
        rlog.start()
        snaps = rlog._snapshots
        assert snaps is not None
        await rlog.propose([Entry("set", b"a", b"1")], 5)
        snaps.take(1, b"{}")
        await until(lambda: rlog.health.state == State.NOSPACE)
        await until(lambda: snaps._state == "failed")
        assert snaps.state() == "failed" and not rlog.health.refuses_writes
        await rlog.propose([Entry("set", b"b", b"2")], 5)  # writes go on
        snaps.take(2, b"{}")  # too soon: refused at once, nothing written
        assert snaps.state() == "failed" and sink.writes == 1
        sink.failing = False
        await until(lambda: time.monotonic() >= snaps._retry_at)
        snaps.take(2, b"{}")
        await until(lambda: snaps._state == "done")
        assert rlog.health.state == State.OK and sink.writes == 2

    with caplog.at_level(logging.INFO, logger="raftlog"):
        try:
            asyncio.run(main())
        finally:
            rlog.stop()
    assert not any(r.exc_info for r in caplog.records)
    assert fatal == []
