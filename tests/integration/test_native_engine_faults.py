"""raftlog.NativeEngine when its Raft log cannot sync (issue 14): ENOSPC/EIO from the WAL's
fdatasync put the engine in a degraded state it leaves by itself. Nothing is reported
persisted meanwhile: a leader does not count itself, so a single node commits nothing; a
follower acks no new entry, so the others commit without it, but it answers heartbeats
with its last index on disk, so a leader whose followers all cannot sync keeps leading. Once the disk works, the retry
persists the batch, commits resume, and a restart replays every committed item once.

Real engines with real sockets and logs; only ``raft_wal._fdatasync`` is replaced, failing
for one node's files while a flag is set."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import raftlog.native.wal
from raftlog.health import State
from tests.harness import wait_until
from tests.integration.test_native_engine import Node, leader_of, make_nodes, propose

pytestmark = [pytest.mark.integration, pytest.mark.faults]


class _FailingSync:
    """fdatasync that fails with ``code`` for files under ``directory`` (or any of several)
    while set."""

    def __init__(self, directory: Path | tuple[Path, ...], code: int) -> None:
        dirs = directory if isinstance(directory, tuple) else (directory,)
        self.directory = tuple(str(d) for d in dirs)
        self.code = code
        self.failing = threading.Event()
        self.failures = 0
        self.real = raftlog.native.wal._fdatasync

    def __call__(self, fd: int) -> None:
        if self.failing.is_set() and os.readlink(f"/proc/self/fd/{fd}").startswith(self.directory):
            self.failures += 1
            raise OSError(self.code, os.strerror(self.code))
        self.real(fd)


@pytest.fixture
def stop_all() -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for n in started:
        n.engine.stop()


def propose_async(node: Node, data: bytes) -> tuple[threading.Event, list[object]]:
    done = threading.Event()
    out: list[object] = []

    def cb(index: int | None, err: Exception | None) -> None:
        out.append(err if err is not None else index)
        done.set()

    node.engine.propose(data, cb)
    return done, out


def test_a_single_node_commits_nothing_while_its_wal_cannot_sync_then_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_all: list[Node]
) -> None:
    (node,) = make_nodes(tmp_path, ["s3cret"])
    sync = _FailingSync(tmp_path / "n0", errno.ENOSPC)
    monkeypatch.setattr(raftlog.native.wal, "_fdatasync", sync)
    stop_all.append(node)
    node.start()
    leader_of([node])
    propose(node, b"before")
    sync.failing.set()
    done, out = propose_async(node, b"during")
    wait_until(lambda: node.engine.health.state == State.NOSPACE, 10, "NOSPACE reported")
    wait_until(lambda: sync.failures >= 4, 10, "the sync is retried with backoff")
    assert not done.is_set() and node.data() == [b"before"]  # not counted: not on disk
    sync.failing.clear()
    assert done.wait(10), "the item commits once the disk works"
    assert isinstance(out[0], int)
    wait_until(lambda: node.engine.health.state == State.OK, 10, "the fault clears")
    propose(node, b"after")
    assert node.data() == [b"before", b"during", b"after"]
    node.restart()
    wait_until(lambda: len(node.data()) >= 3, 15, "the restarted node replays its log")
    assert node.data() == [b"before", b"during", b"after"]


def test_a_follower_that_cannot_sync_does_not_stop_the_others_and_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_all: list[Node]
) -> None:
    nodes = make_nodes(tmp_path, ["s3cret"] * 3)
    stop_all.extend(nodes)
    for n in nodes:
        n.start()
    leader = leader_of(nodes)
    follower = next(n for n in nodes if n is not leader)
    sync = _FailingSync(Path(follower.cfg.journal_dir), errno.EIO)
    monkeypatch.setattr(raftlog.native.wal, "_fdatasync", sync)
    sync.failing.set()
    sent = [b"item-%d" % i for i in range(5)]
    for data in sent:
        propose(leader, data)  # the leader and the other follower are a majority
    wait_until(lambda: follower.engine.health.state == State.IO_ERROR, 10, "EIO reported")
    sync.failing.clear()
    wait_until(lambda: follower.data() == sent, 15, "the follower catches up")
    wait_until(lambda: follower.engine.health.state == State.OK, 10, "the fault clears")
    assert all(n.data() == sent for n in nodes)


def test_a_leader_whose_followers_cannot_sync_keeps_leading_and_commits_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_all: list[Node]
) -> None:
    nodes = make_nodes(tmp_path, ["s3cret"] * 3)
    stop_all.extend(nodes)
    for n in nodes:
        n.start()
    leader = leader_of(nodes)
    propose(leader, b"before")
    term = leader.engine.term()
    followers = tuple(Path(n.cfg.journal_dir) for n in nodes if n is not leader)
    sync = _FailingSync(followers, errno.ENOSPC)
    monkeypatch.setattr(raftlog.native.wal, "_fdatasync", sync)
    sync.failing.set()
    done, out = propose_async(leader, b"during")
    wait_until(
        lambda: all(n.engine.health.state == State.NOSPACE for n in nodes if n is not leader),
        10,
        "NOSPACE on both followers",
    )
    time.sleep(3 * leader.cfg.leader_step_down_ms / 1000)  # check quorum would have fired
    assert leader.engine.is_leader() and all(n.engine.term() == term for n in nodes)
    assert not done.is_set()  # a majority has not persisted it
    sync.failing.clear()
    assert done.wait(10), "the item commits once the followers' disks work"
    assert isinstance(out[0], int)
    assert leader.engine.is_leader() and leader.engine.term() == term
    wait_until(lambda: all(n.data() == [b"before", b"during"] for n in nodes), 10, "all apply")


def read_index(node: Node) -> object:
    done = threading.Event()
    out: list[object] = []

    def cb(index: int | None, err: Exception | None) -> None:
        out.append(err if err is not None else index)
        done.set()

    node.engine.read_index(cb)
    assert done.wait(10), "no answer to a read index"
    return out[0]


def test_read_index_through_every_node_while_no_follower_can_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_all: list[Node]
) -> None:
    """ReadIndex (§6.4) writes nothing: while both followers' WALs fail, the leader and the
    followers (which ask the leader) still get a read index covering every committed item,
    answered once they delivered that far."""
    nodes = make_nodes(tmp_path, ["s3cret"] * 3)
    stop_all.extend(nodes)
    for n in nodes:
        n.start()
    leader = leader_of(nodes)
    committed = propose(leader, b"before")
    followers = tuple(Path(n.cfg.journal_dir) for n in nodes if n is not leader)
    sync = _FailingSync(followers, errno.ENOSPC)
    monkeypatch.setattr(raftlog.native.wal, "_fdatasync", sync)
    sync.failing.set()
    propose_async(leader, b"during")  # cannot commit: only the leader holds it on disk
    wait_until(lambda: sync.failures >= 2, 10, "the followers' syncs fail")
    for _ in range(3):
        for n in nodes:
            index = read_index(n)
            assert isinstance(index, int) and index >= committed, (n.cfg.node_id, index)
            assert n.data() == [b"before"]
        time.sleep(0.5)
    assert leader.engine.is_leader()
    sync.failing.clear()


def test_a_slow_wal_sync_is_logged_with_how_long_it_took(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stop_all: list[Node],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A WAL sync over a second (a shared or slow disk) says so, as etcd's does: the
    member's loop, its heartbeats and its writes waited for it."""
    (node,) = make_nodes(tmp_path, ["s3cret"])
    real = raftlog.native.wal._fdatasync
    slow = threading.Event()

    def sync(fd: int) -> None:
        if slow.is_set():
            slow.clear()
            time.sleep(1.3)
        real(fd)

    monkeypatch.setattr(raftlog.native.wal, "_fdatasync", sync)
    stop_all.append(node)
    node.start()
    leader_of([node])
    with caplog.at_level(logging.WARNING, logger="raftlog.native.flush"):
        slow.set()
        propose(node, b"slow")
    prefix = "slow fdatasync of the Raft log: "
    took = [
        float(m.removeprefix(prefix).split(" ")[0])
        for r in caplog.records
        if (m := r.getMessage()).startswith(prefix)
    ]
    assert any(t >= 1.3 for t in took), took
