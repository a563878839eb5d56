"""raftlog.native.wal: the native engine's fsynced Raft log (records, torn tails, corruption,
failed writes and rewrites)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from raftlog.native import wal as raft_wal
from raftlog.native.messages import KIND_NORMAL, LogEntry
from raftlog.native.wal import RaftWal, WalCorruptError, entry_record


def entries(first: int, last: int, term: int = 1) -> list[LogEntry]:
    return [LogEntry(i, term, KIND_NORMAL, b"data%d" % i) for i in range(first, last + 1)]


def only_file(directory: Path) -> Path:
    (path,) = directory.glob("wal-*")
    return path


def written(directory: Path, *batches: list[LogEntry]) -> Path:
    """A log holding these batches, one sync each; its file."""
    wal, _ = RaftWal.open(directory)
    for batch in batches:
        wal.append(batch)
        wal.sync()
    wal.close()
    return only_file(directory)


class FailingFile:
    """Test-only stand-in for the WAL's file: write() takes ``budget`` more bytes, then ENOSPC
    (a short write first, as the kernel does)."""

    def __init__(self, real: Any, budget: int) -> None:
        self.real, self.budget = real, budget

    def write(self, b: memoryview) -> int:
        if self.budget <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n: int = self.real.write(b[: self.budget])
        self.budget -= n
        return n

    def fileno(self) -> int:
        return int(self.real.fileno())

    def close(self) -> None:
        self.real.close()


def fail(err: int) -> Any:
    def failing(*_: object) -> None:
        raise OSError(err, os.strerror(err))

    return failing


# ------------------------------------------------------------------ records


def test_append_sync_reopen(tmp_path: Path) -> None:
    wal, state = RaftWal.open(tmp_path)
    assert state.entries == [] and state.term == 0
    wal.append(entries(1, 5), hard=(3, "n1:1"), commit=4)
    wal.sync()
    wal.append([], truncate_from=4)
    wal.append(entries(4, 6, term=4), hard=(4, ""))
    wal.sync()
    wal.close()
    _, state = RaftWal.open(tmp_path)
    assert (state.term, state.vote, state.commit) == (4, "", 4)
    assert state.entries == entries(1, 3) + entries(4, 6, term=4)


def test_a_lower_index_replaces_the_tail_without_a_truncate_record(tmp_path: Path) -> None:
    wal, _ = RaftWal.open(tmp_path)
    wal.append(entries(1, 5))
    wal.append(entries(3, 3, term=2))
    wal.sync()
    wal.close()
    assert RaftWal.open(tmp_path)[1].entries == entries(1, 2) + entries(3, 3, term=2)


# ------------------------------------------------------------------ torn tails


@pytest.mark.parametrize("cut", [1, 5, 9, 20])
def test_a_torn_tail_is_cut_off(tmp_path: Path, cut: int) -> None:
    path = written(tmp_path, entries(1, 3))
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    wal, state = RaftWal.open(tmp_path)
    assert state.entries == entries(1, 2)
    assert path.stat().st_size == len(data) - len(entry_record(entries(3, 3)[0]))
    wal.append(entries(3, 4))
    wal.sync()
    wal.close()
    assert RaftWal.open(tmp_path)[1].entries == entries(1, 4)


@pytest.mark.parametrize("at", [0, 4, 8, 20, -1])
def test_a_bad_byte_in_the_last_record_is_a_torn_tail(tmp_path: Path, at: int) -> None:
    path = written(tmp_path, entries(1, 3))
    data = bytearray(path.read_bytes())
    last = len(data) - len(entry_record(entries(3, 3)[0]))
    data[last + at if at >= 0 else at] ^= 0x40  # length, checksum or payload of the last one
    path.write_bytes(bytes(data))
    assert RaftWal.open(tmp_path)[1].entries == entries(1, 2)


@pytest.mark.parametrize("zeros", [1, 7, 8, 100, 4096])
def test_a_zero_filled_tail_is_a_torn_tail(tmp_path: Path, zeros: int) -> None:
    path = written(tmp_path, entries(1, 3))
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(bytes(zeros))
    assert RaftWal.open(tmp_path)[1].entries == entries(1, 3)
    assert path.stat().st_size == size


def test_a_torn_record_followed_by_zeros_is_a_torn_tail(tmp_path: Path) -> None:
    path = written(tmp_path, entries(1, 3))
    data = path.read_bytes()
    path.write_bytes(data[:-10] + bytes(5000))  # the page of the end never reached the disk
    assert RaftWal.open(tmp_path)[1].entries == entries(1, 2)


# ------------------------------------------------------------------ corruption


def test_a_flipped_byte_in_the_middle_of_the_newest_file_is_corruption(tmp_path: Path) -> None:
    """The issue's full-disk run: a bad record with synced records after it stops the node,
    naming file and byte and how to recover; before, everything after it was cut off."""
    path = written(tmp_path, entries(1, 3), entries(4, 6))
    data = bytearray(path.read_bytes())
    second = len(entry_record(entries(1, 1)[0]))
    data[second + 12] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(WalCorruptError) as err:
        RaftWal.open(tmp_path)
    assert err.value.path == path and err.value.position == second
    message = str(err.value)
    assert f"{path}: corrupt Raft log at byte {second}: checksum mismatch" in message
    assert "rejoin from the other members" in message and "Recovering a member" in message
    assert path.read_bytes() == bytes(data)  # nothing cut off


@pytest.mark.parametrize("length", [0, 3, 2**31])
def test_a_bad_length_before_the_tail_is_corruption(tmp_path: Path, length: int) -> None:
    path = written(tmp_path, entries(1, 3))
    data = bytearray(path.read_bytes())
    data[0:4] = length.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(WalCorruptError, match=r"at byte 0: .*a valid record follows at byte"):
        RaftWal.open(tmp_path)


def test_zeros_in_the_middle_are_corruption(tmp_path: Path) -> None:
    path = written(tmp_path, entries(1, 3))
    data = bytearray(path.read_bytes())
    first = len(entry_record(entries(1, 1)[0]))
    data[first : first + 12] = bytes(12)
    path.write_bytes(bytes(data))
    with pytest.raises(WalCorruptError, match=f"at byte {first}: zero length"):
        RaftWal.open(tmp_path)


def test_a_record_with_a_good_checksum_and_bad_contents_is_corruption(tmp_path: Path) -> None:
    path = written(tmp_path, entries(1, 2))
    with open(path, "ab") as f:
        f.write(raft_wal._frame(b"X"))
    with pytest.raises(WalCorruptError, match=r"unknown record type b'X'"):
        RaftWal.open(tmp_path)
    path.write_bytes(path.read_bytes()[:-9] + raft_wal._frame(b"E123"))
    with pytest.raises(WalCorruptError, match="a b'E' record of the wrong size 4"):
        RaftWal.open(tmp_path)


# ------------------------------------------------------------------ rewrites and old files


def test_a_file_left_by_an_interrupted_rewrite_is_superseded(tmp_path: Path) -> None:
    """Each file holds the whole state: an older one (even a corrupt one) and a .tmp are what a
    crash inside rewrite() left; they are removed, never read (was: read first, and an older
    file with fewer entries than a snapshot made the newest look out of order)."""
    wal, _ = RaftWal.open(tmp_path)
    wal.append(entries(1, 3), hard=(1, ""))
    wal.sync()
    first = only_file(tmp_path)
    old = first.read_bytes()
    wal.rewrite(2, "", 1000, [])  # a snapshot at 1000 installed
    wal.append(entries(1001, 1002, term=2))
    wal.sync()
    wal.close()
    newest = only_file(tmp_path)
    bad = bytearray(old)
    bad[12] ^= 0xFF
    first.write_bytes(bytes(bad))  # the crash came between the rename and the unlink
    newest.with_suffix(".tmp").write_bytes(b"half a rewrite")
    _, state = RaftWal.open(tmp_path)
    assert (state.term, state.commit) == (2, 1000)
    assert state.entries == entries(1001, 1002, term=2)
    assert sorted(tmp_path.iterdir()) == [newest]


def test_rewrite_keeps_pending_records_out_and_the_new_file_appendable(tmp_path: Path) -> None:
    wal, _ = RaftWal.open(tmp_path)
    wal.append(entries(1, 5), hard=(1, "a"))
    wal.sync()
    wal.rewrite(1, "a", 3, entries(3, 5))
    wal.append(entries(6, 7))
    wal.sync()
    wal.close()
    _, state = RaftWal.open(tmp_path)
    assert (state.vote, state.commit, state.entries) == ("a", 3, entries(3, 7))


@pytest.mark.parametrize("step", ["open", "write", "fsync", "replace"])
def test_a_failed_rewrite_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    wal, _ = RaftWal.open(tmp_path)
    wal.append(entries(1, 3), hard=(1, ""))
    wal.sync()
    wal.append(entries(4, 4))  # pending: kept, and synced into the old file afterwards
    before = only_file(tmp_path)
    with monkeypatch.context() as m:
        if step == "write":
            real_open = open
            m.setattr("builtins.open", lambda *a, **k: FailingFile(real_open(*a, **k), 7))
        else:
            name = {"open": "open", "fsync": "fsync", "replace": "replace"}[step]
            m.setattr(os, name, fail(errno.ENOSPC))
        with pytest.raises(OSError):
            wal.rewrite(1, "", 3, entries(3, 3))
    assert sorted(tmp_path.iterdir()) == [before]
    wal.sync()
    wal.close()
    assert RaftWal.open(tmp_path)[1].entries == entries(1, 4)


def test_a_failed_directory_sync_after_rewrite_is_retried_before_anything_is_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal, _ = RaftWal.open(tmp_path)
    wal.append(entries(1, 3), hard=(1, ""))
    wal.sync()
    with monkeypatch.context() as m:
        m.setattr(raft_wal, "_fsync_dir", fail(errno.EIO))
        wal.rewrite(1, "", 3, entries(3, 3))  # in place: does not raise
        assert wal.needs_repair
        assert len(list(tmp_path.glob("wal-*.log"))) == 2  # the old file stays meanwhile
        wal.append(entries(4, 4))
        with pytest.raises(OSError):
            wal.sync()
    wal.sync()
    assert not wal.needs_repair
    wal.close()
    _, state = RaftWal.open(tmp_path)
    assert state.entries == entries(3, 4)
    assert len(list(tmp_path.glob("wal-*.log"))) == 1


# ------------------------------------------------------------------ failed syncs


@pytest.mark.parametrize("budget", [0, 1, 8, 30, 45])
def test_a_failed_write_leaves_the_file_as_it_was_and_the_batch_pending(
    tmp_path: Path, budget: int
) -> None:
    """The issue's ENOSPC: before, half a record stayed in the file, the rest of the batch was
    dropped, and the next batch went after the half record."""
    path = written(tmp_path, entries(1, 2))
    acknowledged = path.read_bytes()
    wal, _ = RaftWal.open(tmp_path)
    wal._file = FailingFile(wal._file, budget)  # type: ignore[assignment]
    wal.append(entries(3, 4))
    with pytest.raises(OSError, match="No space"):
        wal.sync()
    assert path.read_bytes() == acknowledged
    assert not wal.needs_repair
    wal.append(entries(5, 5))  # goes after the pending batch
    wal._file.budget = 10**6  # type: ignore[attr-defined]
    wal.sync()
    wal.close()
    assert RaftWal.open(tmp_path)[1].entries == entries(1, 5)


def test_a_failed_fdatasync_cuts_back_and_the_retry_writes_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = written(tmp_path, entries(1, 2))
    acknowledged = path.read_bytes()
    wal, _ = RaftWal.open(tmp_path)
    wal.append(entries(3, 4))
    with monkeypatch.context() as m:
        m.setattr(raft_wal, "_fdatasync", fail(errno.EIO))
        with pytest.raises(OSError):
            wal.sync()
    assert path.read_bytes() == acknowledged
    wal.sync()
    assert path.read_bytes() == acknowledged + b"".join(map(entry_record, entries(3, 4)))
    wal.close()


def test_a_dropped_failed_batch_is_written_once_when_the_caller_appends_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine keeps unstable entries itself: after a failed sync it drops the WAL's copy
    and appends them again, so the retry writes each record once, even when the cut back
    had failed too."""
    path = written(tmp_path, entries(1, 2))
    acknowledged = path.read_bytes()
    wal, _ = RaftWal.open(tmp_path)
    wal._file = FailingFile(wal._file, 20)  # type: ignore[assignment]
    wal.append(entries(3, 4))
    with monkeypatch.context() as m:
        m.setattr(raft_wal, "_ftruncate", fail(errno.EIO))
        with pytest.raises(OSError, match="No space"):
            wal.sync()
    wal.drop_pending()
    assert wal.needs_repair
    wal._file.budget = 10**6  # type: ignore[attr-defined]
    wal.append(entries(3, 4))
    wal.sync()
    assert path.read_bytes() == acknowledged + b"".join(map(entry_record, entries(3, 4)))
    wal.close()


def test_when_the_cut_back_fails_nothing_is_written_until_it_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = written(tmp_path, entries(1, 2))
    acknowledged = path.read_bytes()
    wal, _ = RaftWal.open(tmp_path)
    wal._file = FailingFile(wal._file, 20)  # type: ignore[assignment]
    wal.append(entries(3, 4))
    with monkeypatch.context() as m:
        m.setattr(raft_wal, "_ftruncate", fail(errno.EIO))
        with pytest.raises(OSError, match="No space"):
            wal.sync()
        assert wal.needs_repair
        assert path.read_bytes() == acknowledged + entry_record(entries(3, 3)[0])[:20]
        wal._file.budget = 10**6  # type: ignore[attr-defined]
        with pytest.raises(OSError, match="Input/output error"):
            wal.sync()  # the cut is retried first, and nothing is written after half a record
        assert path.read_bytes() == acknowledged + entry_record(entries(3, 3)[0])[:20]
    wal.sync()
    assert not wal.needs_repair
    wal.close()
    assert RaftWal.open(tmp_path)[1].entries == entries(1, 4)


def test_a_crash_while_the_cut_back_fails_loads_the_acknowledged_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written(tmp_path, entries(1, 2))
    wal, _ = RaftWal.open(tmp_path)
    wal._file = FailingFile(wal._file, 50)  # type: ignore[assignment]
    wal.append(entries(3, 5))
    monkeypatch.setattr(raft_wal, "_ftruncate", fail(errno.EIO))
    with pytest.raises(OSError):
        wal.sync()
    wal.close()  # the process dies with entry 3 and part of 4 in the file
    assert RaftWal.open(tmp_path)[1].entries == entries(1, 3)
