"""Seeding from an etcd snapshot in two processes (each reads a run of the key bucket's pages
and frames its keys' records): the same snapshot as one process writes, keys in both runs
included; a file the two runs do not take whole is read in one process (which names its
fault); a failure here stops the child and leaves nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nameserver import etcd_seed, etcd_seed_split
from nameserver.etcd_seed import seed_from_etcd
from snapshots import read_snapshot
from snapshots.etcdfmt import (
    BoltFormatError,
    EtcdImage,
    EtcdLayoutError,
    KeyRevision,
    image_to_buckets,
    read_bolt,
    revision_bytes,
    write_bolt,
    write_etcd_snapshot,
)

N = 3000


def _keys() -> list[KeyRevision]:
    keys = [
        KeyRevision(i + 2, 0, b"k/%05d" % i, b"v" * (i % 300), i + 2, i + 2, 1) for i in range(N)
    ]
    rev = N + 2
    keys += [
        KeyRevision(rev, 0, b"k/00007", tombstone=True),  # a first-run key deleted in the second
        KeyRevision(rev + 1, 0, b"k/00010", b"newer", 12, rev + 1, 2),  # and one rewritten
        KeyRevision(rev + 2, 0, b"k/02990", b"again", 2992, rev + 2, 2),  # a second-run key
        KeyRevision(rev + 3, 0, b"new/a", b"1", rev + 3, rev + 3, 1),  # a key of the second only
        KeyRevision(rev + 4, 0, b"k/00010", b"newest", 12, rev + 4, 3),  # twice in the second
    ]
    return keys


def _file(tmp_path: Path, keys: list[KeyRevision], extra: dict[bytes, bytes] | None = None) -> Path:
    image = EtcdImage(keys=tuple(keys), consistent_index=keys[-1].main, cluster_version="3.4.0")
    tree = image_to_buckets(image)
    tree[b"key"].update(extra or {})  # type: ignore[union-attr]
    path = tmp_path / "etcd.db"
    path.write_bytes(write_bolt(tree))
    return path


def _seed(etcd_file: Path, data_dir: Path, split: bool, mp: pytest.MonkeyPatch) -> list[str]:
    mp.setattr(etcd_seed, "SPLIT_RECORDS", 1 if split else 10**9)
    mp.setattr(etcd_seed, "_split_pays", lambda: True)  # whatever the build and the load
    lines: list[str] = []
    seed_from_etcd(str(etcd_file), str(data_dir), lines.append)
    return lines


def _snapshot(data_dir: Path) -> Path:
    (snap,) = (data_dir / "snap").iterdir()
    return snap


def test_two_processes_write_the_snapshot_one_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "etcd.db"
    image = EtcdImage(keys=tuple(_keys()), consistent_index=N + 6, cluster_version="3.4.0")
    path.write_bytes(write_etcd_snapshot(image))  # with the SHA-256 trailer
    _seed(path, tmp_path / "one", False, monkeypatch)
    lines = _seed(path, tmp_path / "two", True, monkeypatch)
    assert "in two processes" in " ".join(lines)
    one, two = (
        read_snapshot(_snapshot(tmp_path / "one")),
        read_snapshot(_snapshot(tmp_path / "two")),
    )
    assert two.records == one.records  # the same records in the same order
    assert (two.info.counts, two.info.hashes) == (one.info.counts, one.info.hashes)
    assert two.info.last_offset == one.info.last_offset == N + 6
    kv = {key: value for type_, key, value in two.records if type_ == "kv"}
    assert b"k/00007" not in kv and len(kv) == N  # one deleted, one new
    assert sorted(os.listdir(tmp_path / "two")) == ["raft", "snap"]  # no temp file left


@pytest.mark.parametrize("at", [5, N - 5])  # in the first run, in the second
def test_a_record_whose_first_field_is_not_its_key_is_read_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: int
) -> None:
    """protobuf's key is the last field 1: where the first is another key, the parent's look
    at the child's run (the first field) would be wrong, so the file is read in one process
    (the same snapshot)."""
    two_keys = b"\x0a\x07k/00003\x0a\x05other\x10\x07\x18\x07\x20\x01"
    path = _file(tmp_path, _keys(), {revision_bytes(at + 2, 1): two_keys})
    _seed(path, tmp_path / "one", False, monkeypatch)
    _seed(path, tmp_path / "two", True, monkeypatch)
    one, two = (
        read_snapshot(_snapshot(tmp_path / "one")),
        read_snapshot(_snapshot(tmp_path / "two")),
    )
    assert two.records == one.records
    assert any(key == b"other" for _, key, _ in two.records)


def test_a_fault_in_the_childs_run_is_named_as_one_process_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = revision_bytes(N, 1)  # near the end: the child's run
    path = _file(tmp_path, _keys(), {bad: b"\x0a\xff"})  # a key that runs past the record
    errors = []
    for split in (False, True):
        with pytest.raises(EtcdLayoutError) as caught:
            _seed(path, tmp_path / f"d{split}", split, monkeypatch)
        errors.append(str(caught.value))
        assert not (tmp_path / f"d{split}").exists()  # nothing written, the new dir gone
    assert errors[0] == errors[1] and "bucket 'key'" in errors[0]


def test_a_machine_busy_past_twice_its_cpus_or_with_one_reads_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(tmp_path, _keys())
    monkeypatch.setattr(etcd_seed, "SPLIT_RECORDS", 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(os, "getloadavg", lambda: (4.0, 4.0, 4.0))  # twice the CPUs
    lines: list[str] = []
    seed_from_etcd(str(path), str(tmp_path / "d"), lines.append)
    assert "in two processes" not in " ".join(lines)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert not etcd_seed._spare_cpu()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert etcd_seed._spare_cpu()
    monkeypatch.setattr(os, "getloadavg", lambda: (3.9, 3.9, 3.9))  # busy, not that busy
    assert etcd_seed._spare_cpu()


def test_a_failure_in_this_process_stops_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _file(tmp_path, _keys())
    children: list[int] = []
    real = os.fork

    def fork() -> int:
        pid = real()
        if pid:
            children.append(pid)
        return pid

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.setattr(etcd_seed_split, "seed_data_dir_from_frames", fail)
    with pytest.raises(OSError, match="No space left"):
        _seed(path, tmp_path / "d", True, monkeypatch)
    (pid,) = children
    with pytest.raises(ChildProcessError):  # already waited for
        os.waitpid(pid, os.WNOHANG)
    assert not (tmp_path / "d").exists()


def test_a_damaged_page_in_the_childs_run_is_named_as_one_process_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leaf element pointing past its page (this process looks at the child's pages
    without checking them, the child's scan refuses the page): read in one process, which
    names the fault; nothing written."""
    db = bytearray(write_bolt(image_to_buckets(EtcdImage(keys=tuple(_keys())))))
    pages: list[tuple[memoryview, int]] = []
    read_bolt(bytes(db), key_pages=pages)
    at = bytes(db).find(pages[-2][0].tobytes())  # a leaf page of the child's run
    db[at + 16 + 4 : at + 16 + 8] = (0x7FFFFFF0).to_bytes(4, "little")  # element 0's pos
    path = tmp_path / "etcd.db"
    path.write_bytes(bytes(db))
    errors = []
    for split in (False, True):
        with pytest.raises(BoltFormatError) as caught:
            _seed(path, tmp_path / f"d{split}", split, monkeypatch)
        errors.append(str(caught.value))
        assert not (tmp_path / f"d{split}").exists()
    assert errors[0] == errors[1] and "past the page end" in errors[0]
