"""Change-log segments under injected I/O faults (issue 14): a failed append leaves the log
as it was, the same records append once the disk works, the flusher survives."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

import raftlog.segments
from raftlog.health import Health, State
from raftlog.segments import ChangeLogBrokenError, SegmentConfig, SegmentLog
from tests.harness import wait_until

SMALL = SegmentConfig(segment_max_bytes=400, index_every_bytes=100, fsync_policy="never")

Rec = tuple[int, int, bytes]


def records(first: int, n: int, size: int = 40) -> list[Rec]:
    return [(o, 0, f"{o}:".encode().ljust(size, b".")) for o in range(first, first + n)]


def read(log: SegmentLog) -> list[Rec]:
    return [(r.offset, r.sub, r.payload) for r in log.read_from(0)]


class _FullAfter:
    """``_write_all`` that writes ``budget`` bytes in all, then fails with ENOSPC (a real
    partial write first, as a full disk does)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.real = raftlog.segments._write_all

    def __call__(self, f: object, data: bytes) -> None:
        take = min(self.budget, len(data))
        if take:
            self.real(f, data[:take])  # type: ignore[arg-type]
            self.budget -= take
        if take < len(data):
            raise OSError(errno.ENOSPC, "No space left on device")


def test_write_failing_at_every_byte_of_a_batch_leaves_the_log_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch spans a roll (400-byte segments) and index entries: wherever the disk
    fills, the log holds exactly what it held before, and the same batch appends after."""
    before, batch = records(1, 5), records(6, 12)
    probe = _FullAfter(10**9)
    with monkeypatch.context() as m:
        m.setattr(raftlog.segments, "_write_all", probe)
        with SegmentLog.open(tmp_path / "probe", SMALL) as log:
            log.append_many(before)
            used = 10**9 - probe.budget
            log.append_many(batch)
            total = 10**9 - probe.budget - used
    assert total > 400
    for cut in range(total):
        d = tmp_path / f"cut{cut}"
        log = SegmentLog.open(d, SMALL)
        log.append_many(before)
        with monkeypatch.context() as m:
            m.setattr(raftlog.segments, "_write_all", _FullAfter(cut))
            with pytest.raises(OSError, match="No space"):
                log.append_many(batch)
        assert log.last_offset == 5
        assert read(log) == before
        log.append_many(batch)  # the apply thread's retry
        log.close()
        with SegmentLog.open(d, SMALL) as reopened:
            assert read(reopened) == before + batch, cut


def test_a_failed_roll_leaves_no_segment_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SegmentLog.open(tmp_path, SMALL)
    log.append_many(records(1, 8))
    names = sorted(p.name for p in tmp_path.iterdir())

    def no_descriptors(directory: Path) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    with monkeypatch.context() as m:
        m.setattr(raftlog.segments, "fsync_dir", no_descriptors)
        with pytest.raises(OSError, match="Too many open files"):
            log.append_many(records(9, 8))
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    log.append_many(records(9, 8))
    assert read(log) == records(1, 16)
    log.close()


def test_background_fdatasync_failure_is_retried_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flusher no longer dies: it reports NOSPACE, retries, and clears it."""
    real = raftlog.segments.fdatasync
    failing = threading.Event()
    failing.set()

    def fdatasync(fd: int) -> None:
        if failing.is_set():
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(raftlog.segments, "fdatasync", fdatasync)
    health = Health()
    log = SegmentLog.open(tmp_path, SegmentConfig(fsync_policy="batch", fsync_interval_ms=1))
    log.health = health
    log.append_many(records(1, 3))
    wait_until(lambda: health.state == State.NOSPACE, 10, "the flusher reports NOSPACE")
    assert health.refuses_writes
    assert log.flushed_offset == 0
    log.append_many(records(4, 2))  # appends still work meanwhile
    failing.clear()
    wait_until(lambda: log.flushed_offset == 5, 10, "the flusher's retry syncs everything")
    wait_until(lambda: health.state == State.OK, 10, "the fault clears")
    log.close()


def test_a_roll_back_that_fails_stops_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the file cannot even be cut back, the log refuses everything with an error that is
    not an OSError (the node must stop, not retry)."""
    log = SegmentLog.open(tmp_path, SMALL)
    log.append_many(records(1, 2))

    def eio(*args: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(raftlog.segments, "_write_all", _FullAfter(3))
        m.setattr(os, "ftruncate", eio)
        with pytest.raises(ChangeLogBrokenError, match="could not be rolled back"):
            log.append_many(records(3, 1))
    with pytest.raises(ChangeLogBrokenError):
        log.append_many(records(3, 1))
    assert not issubclass(ChangeLogBrokenError, OSError)
    log.close()
