"""write_snapshot syncs a big snapshot in steps (snapshots._writer._SyncingWriter), so
one final fsync never holds the file system's journal while the node's change log waits."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from unittest import mock

from snapshots import SnapshotMeta, _writer, read_snapshot, write_snapshot

META = SnapshotMeta(cluster_id="c", last_offset=5, last_term=1, created_ms=1)


def test_a_big_snapshot_is_synced_every_8_mib(tmp_path: Path) -> None:
    records = [("kv", b"k%06d" % i, b"v" * 1000) for i in range(20_000)]  # ~20 MB
    path = tmp_path / "s.snap"
    ours: list[int] = []  # the patch is os's: a thread another test left running syncs too
    me, real = threading.get_ident(), os.fdatasync

    def fdatasync(fd: int) -> None:
        if threading.get_ident() == me:
            ours.append(fd)
        real(fd)

    with mock.patch("snapshots._writer.os.fdatasync", wraps=fdatasync):
        info = write_snapshot(path, META, records, one_pass=True)
    assert len(ours) == info.size_bytes // (8 * 1024 * 1024)  # then one fsync
    assert read_snapshot(path).records == records


def test_a_small_snapshot_is_synced_once(tmp_path: Path) -> None:
    with mock.patch("snapshots._writer.os.fdatasync") as fdatasync:
        write_snapshot(tmp_path / "s.snap", META, [("kv", b"a", b"1")])
    fdatasync.assert_not_called()


def test_background_writeback_sends_each_step_to_disk_without_waiting(tmp_path: Path) -> None:
    """A seeding's write: each 8 MiB step is started (Linux's sync_file_range, by range, in
    order) and not waited for; the file is the same and is synced once at the end."""
    records = [("kv", b"k%06d" % i, b"v" * 1000) for i in range(20_000)]  # ~20 MB
    started: list[tuple[int, int]] = []
    real_starter = _writer._writeback_starter

    def starter() -> object:
        start = real_starter()

        def record(fd: int, offset: int, nbytes: int) -> bool:
            started.append((offset, nbytes))
            return start(fd, offset, nbytes) if start is not None else False

        return record

    path = tmp_path / "s.snap"
    with (
        mock.patch.object(_writer, "_writeback_starter", starter),
        mock.patch("snapshots._writer.os.fdatasync") as fdatasync,
    ):
        info = write_snapshot(path, META, records, one_pass=True, background_writeback=True)
    steps = info.size_bytes // (8 * 1024 * 1024)
    assert len(started) == steps >= 2
    assert [offset for offset, _ in started] == [
        sum(n for _, n in started[:i]) for i in range(steps)
    ]
    if sys.platform.startswith("linux"):
        fdatasync.assert_not_called()  # (elsewhere each step waits, as without the flag)
    assert read_snapshot(path).records == records
    plain = tmp_path / "plain.snap"
    write_snapshot(plain, META, records, one_pass=True)
    assert plain.read_bytes() == path.read_bytes()
