"""write_snapshot syncs a big snapshot in steps (snapshots._writer._SyncingWriter), so
one final fsync never holds the file system's journal while the node's change log waits."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from unittest import mock

from snapshots import SnapshotMeta, read_snapshot, write_snapshot

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
