"""The lazy filesystem's semantics: what a power cut keeps and what it drops.

The model (:class:`LazyTree`) is driven directly, without FUSE; the last tests go through
a real FUSE mount with ordinary file calls (skipped, with the reason, where FUSE is not
available)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults.lazyfs import LazyTree
from tests.faults.lazymount import LazyMount, fuse_unavailable


def _tree(tmp_path: Path) -> LazyTree:
    (tmp_path / "b").mkdir(exist_ok=True)
    return LazyTree(tmp_path / "b", tmp_path / "state")


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _dirs(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in sorted(root.rglob("*")) if p.is_dir()]


def test_unsynced_create_and_write_are_gone_after_a_cut(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    fd, node = t.create("f", 0o644)
    t.write(node, fd, b"hello", 0)
    os.close(fd)
    t.cut()
    assert _files(t.backing) == {}


def test_file_and_directory_fsync_keep_the_file(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    fd, node = t.create("f", 0o644)
    t.write(node, fd, b"hello", 0)
    t.fsync(node, fd)
    t.fsyncdir("")
    t.write(node, fd, b" world", 5)  # after the sync: lost
    os.close(fd)
    t.cut()
    assert _files(t.backing) == {"f": b"hello"}


def test_file_fsync_without_its_directory_loses_the_new_entry(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    fd, node = t.create("f", 0o644)
    t.write(node, fd, b"hello", 0)
    t.fsync(node, fd)
    os.close(fd)
    t.cut()
    assert _files(t.backing) == {}


def test_directory_fsync_without_the_file_keeps_it_empty(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    fd, node = t.create("f", 0o644)
    t.write(node, fd, b"hello", 0)
    t.fsyncdir("")
    os.close(fd)
    t.cut()
    assert _files(t.backing) == {"f": b""}


def test_unsynced_overwrite_and_truncate_roll_back(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    data = bytes(range(256)) * 40  # 10240 bytes, three blocks
    (tmp_path / "b" / "f").write_bytes(data)
    t = _tree(tmp_path)
    fd, node = t.open("f")
    t.write(node, fd, b"X" * 5000, 3000)
    t.truncate(node, fd, 100)
    t.write(node, fd, b"tail", 9000)
    os.close(fd)
    assert (t.backing / "f").read_bytes() != data
    t.cut()
    assert _files(t.backing) == {"f": data}


def test_rename_is_durable_only_with_the_directory_fsync(tmp_path: Path) -> None:
    """The snapshot pattern: write tmp, fsync it, rename over the old, fsync the dir."""
    (tmp_path / "b" / "d").mkdir(parents=True)
    (tmp_path / "b" / "d" / "snap").write_bytes(b"old")
    t = _tree(tmp_path)
    fd, node = t.create("d/snap.tmp", 0o644)
    t.write(node, fd, b"new", 0)
    t.fsync(node, fd)
    os.close(fd)
    t.rename("d/snap.tmp", "d/snap")
    t.cut()  # rename not synced: the old file is back, the tmp (never synced) is gone
    assert _files(t.backing) == {"d/snap": b"old"}

    fd, node = t.create("d/snap.tmp", 0o644)
    t.write(node, fd, b"new", 0)
    t.fsync(node, fd)
    os.close(fd)
    t.rename("d/snap.tmp", "d/snap")
    t.fsyncdir("d")
    t.cut()
    assert _files(t.backing) == {"d/snap": b"new"}


def test_unlink_and_rmdir_are_undone_without_a_directory_fsync(tmp_path: Path) -> None:
    (tmp_path / "b" / "d").mkdir(parents=True)
    (tmp_path / "b" / "d" / "f").write_bytes(b"kept")
    (tmp_path / "b" / "e").mkdir()
    t = _tree(tmp_path)
    t.unlink("d/f")
    t.rmdir("e")
    t.mkdir("new", 0o755)
    t.cut()
    assert _files(t.backing) == {"d/f": b"kept"}
    assert _dirs(t.backing) == ["d", "e"]
    t.unlink("d/f")
    t.fsyncdir("d")
    t.cut()
    assert _files(t.backing) == {}


def test_a_renamed_directory_carries_its_synced_files(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    t.mkdir("tmpdir", 0o755)
    fd, node = t.create("tmpdir/a", 0o644)
    t.write(node, fd, b"aa", 0)
    t.fsync(node, fd)
    os.close(fd)
    t.fsyncdir("tmpdir")
    t.rename("tmpdir", "final")
    t.fsyncdir("")
    t.cut()
    assert _files(t.backing) == {"final/a": b"aa"}


# --------------------------------------------------------------------------- through FUSE
needs_fuse = pytest.mark.skipif(fuse_unavailable() is not None, reason=str(fuse_unavailable()))


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@needs_fuse
def test_through_fuse_write_fsync_cut(tmp_path: Path) -> None:
    with LazyMount(tmp_path / "lazy") as m:
        (m.mnt / "d").mkdir()
        _fsync_path(m.mnt)
        with open(m.mnt / "d" / "synced", "wb") as f:
            f.write(b"kept")
            f.flush()
            os.fdatasync(f.fileno())
            f.write(b" and lost")
        with open(m.mnt / "d" / "unsynced", "wb") as f:
            f.write(b"lost")
        _fsync_path(m.mnt / "d")
        with open(m.mnt / "d" / "late", "wb") as f:  # entry never synced
            f.write(b"x")
            os.fsync(f.fileno())
        with open(m.mnt / "d" / "synced", "ab") as f:
            f.write(b"!")
        assert (m.mnt / "d" / "synced").read_bytes() == b"kept and lost!"
        m.cut()
        assert _files(m.mnt) == {"d/synced": b"kept", "d/unsynced": b""}
        os.replace(m.mnt / "d" / "unsynced", m.mnt / "d" / "renamed")
        _fsync_path(m.mnt / "d")
        m.cut()
        assert _files(m.mnt) == {"d/synced": b"kept", "d/renamed": b""}
    assert not any(m.mnt.iterdir())
