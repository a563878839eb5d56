"""makedirs_durable: each directory it makes is fsynced into its parent, top down (a
power cut otherwise may drop the new directory with every synced file under it; the
lazy filesystem of tests/faults/test_power_cut.py found the Raft log's directory lost)."""

from __future__ import annotations

from pathlib import Path

import pytest

import snapshots._writer as writer
from snapshots import makedirs_durable


def test_each_new_directory_is_synced_into_its_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    monkeypatch.setattr(writer, "fsync_dir", synced.append)
    (tmp_path / "a").mkdir()
    makedirs_durable(tmp_path / "a" / "b" / "c")
    assert (tmp_path / "a" / "b" / "c").is_dir()
    assert synced == [tmp_path / "a", tmp_path / "a" / "b"]
    synced.clear()
    makedirs_durable(tmp_path / "a" / "b")  # there already: nothing to sync
    assert synced == []


def test_a_file_in_the_way_raises_as_mkdir_does(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(FileExistsError):
        makedirs_durable(tmp_path / "f")
    with pytest.raises(NotADirectoryError):
        makedirs_durable(tmp_path / "f" / "d")
