"""raftlog.raft_wal: the native engine's fsynced Raft log (records, torn tails, rewrites)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftlog.raft import KIND_NORMAL, LogEntry
from raftlog.raft_wal import RaftWal, WalCorruptError


def entries(first: int, last: int, term: int = 1) -> list[LogEntry]:
    return [LogEntry(i, term, KIND_NORMAL, b"data%d" % i) for i in range(first, last + 1)]


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


@pytest.mark.parametrize("cut", [1, 5, 9, 20])
def test_a_torn_tail_is_cut_off(tmp_path: Path, cut: int) -> None:
    wal, _ = RaftWal.open(tmp_path)
    wal.append(entries(1, 3))
    wal.sync()
    wal.close()
    path = next(tmp_path.glob("wal-*.log"))
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    wal, state = RaftWal.open(tmp_path)
    assert state.entries == entries(1, 2)
    wal.append(entries(3, 4))
    wal.sync()
    wal.close()
    assert RaftWal.open(tmp_path)[1].entries == entries(1, 4)


def test_corruption_before_the_newest_file_names_file_and_position(tmp_path: Path) -> None:
    wal, _ = RaftWal.open(tmp_path)
    wal.append(entries(1, 3), hard=(1, ""))
    wal.sync()
    wal.rewrite(1, "", 2, entries(3, 3))  # a second file; the first is gone
    wal.append(entries(4, 5))
    wal.sync()
    wal.close()
    files = sorted(tmp_path.glob("wal-*.log"))
    assert len(files) == 1
    assert RaftWal.open(tmp_path)[1].entries == entries(3, 5)
    # an older file with a flipped byte in its middle is a hard error
    older = tmp_path / "wal-0000000000000000.log"
    good = files[0].read_bytes()
    bad = bytearray(good)
    bad[12] ^= 0xFF
    older.write_bytes(bytes(bad))
    with pytest.raises(
        WalCorruptError, match=r"wal-0000000000000000\.log: corrupt Raft log at byte 0"
    ):
        RaftWal.open(tmp_path)
