"""Seeding from an etcd snapshot with the frames encoded in two processes (a forked child
encodes the second half): the same snapshot as one process writes, and a child that fails
is an error that leaves no file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nameserver import etcd_snapshot
from nameserver.etcd_snapshot import SEEDED_CLUSTER_ID, _write_split, seed_from_etcd
from snapshots import SnapshotError, SnapshotMeta, read_snapshot
from snapshots.etcdfmt import EtcdImage, KeyRevision, write_etcd_snapshot

N = 3000


@pytest.fixture
def etcd_file(tmp_path: Path) -> Path:
    keys = [
        KeyRevision(i + 2, 0, b"k/%05d" % i, b"v" * (i % 300), i + 2, i + 2, 1) for i in range(N)
    ]
    keys.append(KeyRevision(N + 2, 0, b"k/00007", tombstone=True))  # one key deleted
    image = EtcdImage(keys=tuple(keys), consistent_index=N + 2, cluster_version="3.4.0")
    path = tmp_path / "etcd.db"
    path.write_bytes(write_etcd_snapshot(image))
    return path


def _seed(etcd_file: Path, data_dir: Path, split_from: int, mp: pytest.MonkeyPatch) -> Path:
    mp.setattr(etcd_snapshot, "SPLIT_RECORDS", split_from)
    mp.setattr(etcd_snapshot, "_spare_cpu", lambda: True)  # whatever the machine's load
    lines: list[str] = []
    seeded = seed_from_etcd(str(etcd_file), str(data_dir), lines.append)
    assert seeded.keys == N - 1
    assert ("in two processes" in " ".join(lines)) == (split_from <= N)
    (snap,) = (data_dir / "snap").iterdir()
    return snap


def test_two_processes_write_the_snapshot_one_writes(
    etcd_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = read_snapshot(_seed(etcd_file, tmp_path / "one", 10**9, monkeypatch))
    two = read_snapshot(_seed(etcd_file, tmp_path / "two", 1, monkeypatch))  # verified read
    assert two.records == one.records
    assert (two.info.counts, two.info.hashes) == (one.info.counts, one.info.hashes)
    assert two.info.last_offset == one.info.last_offset == N + 2
    assert sorted(os.listdir(tmp_path / "two")) == ["raft", "snap"]  # no temp file left


def test_a_busy_or_single_cpu_machine_encodes_in_one_process(
    etcd_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(etcd_snapshot, "SPLIT_RECORDS", 1)
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    lines: list[str] = []
    seed_from_etcd(str(etcd_file), str(tmp_path / "d"), lines.append)
    assert "in two processes" not in " ".join(lines)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert not etcd_snapshot._spare_cpu()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert etcd_snapshot._spare_cpu()


def test_a_child_that_fails_is_an_error_naming_its_fault(tmp_path: Path) -> None:
    records = [("kv", b"k%d" % i, b"v") for i in range(100)]
    records[70] = ("", b"x", b"y")  # in the child's half
    meta = SnapshotMeta(cluster_id=SEEDED_CLUSTER_ID, last_offset=5, last_term=0)
    with pytest.raises(SnapshotError, match="child process failed: ValueError: record 71 has"):
        _write_split(str(tmp_path / "d"), meta, records, lambda n: None, lambda line: None)
    assert os.listdir(tmp_path / "d") == []


def test_a_failure_in_this_process_stops_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [("kv", b"k%d" % i, b"v") for i in range(100)]
    records[10] = ("", b"x", b"y")  # in this process's half
    meta = SnapshotMeta(cluster_id=SEEDED_CLUSTER_ID, last_offset=5, last_term=0)
    children: list[int] = []
    real = os.fork

    def fork() -> int:
        pid = real()
        if pid:
            children.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    with pytest.raises(ValueError, match="record 11 has an empty type"):
        _write_split(str(tmp_path / "d"), meta, records, lambda n: None, lambda line: None)
    (pid,) = children
    with pytest.raises(ChildProcessError):  # already waited for
        os.waitpid(pid, os.WNOHANG)
