"""Faults injected into a real 3-node cluster under write load (issue 14's "what must hold").

Each test ends the same way: every acknowledged put is present on every node and the
nodes' images hash the same (``inject.assert_acknowledged_everywhere``); where the cause
of a fault goes away, the cluster commits again without a restart.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import time
from pathlib import Path

import grpc
import pytest

from tests.faults.inject import (
    Writer,
    assert_acknowledged_everywhere,
    fill,
    flip_byte,
    limit_descriptors,
    open_descriptors,
    raise_own_descriptor_limit,
    tmpfs,
)
from tests.harness import Cluster, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.faults]


def _followers(cluster: Cluster, leader: int) -> list[int]:
    return [i for i in cluster.running() if i != leader]


def test_sigkill_of_any_subset_under_load_loses_no_acknowledged_write(cluster: Cluster) -> None:
    """SIGKILL a follower, the leader, two nodes (quorum lost) and all three, one round
    each, under load; restart them with the same command each time."""
    with Writer(cluster, b"kill/") as writer:
        writer.wait_acked(30, 30)
        leader = cluster.leader()
        f = _followers(cluster, leader)
        rounds = [[f[0]], [leader], [leader, f[1]], [0, 1, 2]]
        for subset in rounds:
            for i in subset:
                cluster.kill(i, signal.SIGKILL)
            if len(subset) == 1:  # a quorum is left: it goes on committing
                writer.wait_acked(30, 30)
            for i in subset:
                cluster.start(i)
            cluster.wait_ready(60)
            writer.wait_acked(30, 60)
    assert_acknowledged_everywhere(cluster, writer.acked, [0, 1, 2])


def test_sigstop_of_the_leader_past_the_election_timeout(cluster: Cluster) -> None:
    """A leader frozen (SIGSTOP) past the election timeout is replaced; thawed, it steps
    down and catches up; nothing acknowledged is lost on the way."""
    leader = cluster.leader()
    others = _followers(cluster, leader)
    with Writer(cluster, b"stop/") as writer:
        writer.wait_acked(30, 30)
        cluster.kill(leader, signal.SIGSTOP)
        try:
            new = cluster.wait_ready(30, nodes=others)
            assert new != leader
            # every third put goes to the frozen node and waits out its deadline
            writer.wait_acked(10, 30)
        finally:
            cluster.kill(leader, signal.SIGCONT)
        cluster.wait_ready(30)
        writer.wait_acked(30, 30)
    assert_acknowledged_everywhere(cluster, writer.acked, [0, 1, 2])


@pytest.mark.slow
def test_full_disk_loses_nothing_and_heals_without_a_restart(tmp_path: Path) -> None:
    """Three nodes with their data on one small tmpfs, 8 KiB puts until the disk is full:
    writes are refused with etcd's "database space exceeded" (not lost, not timed out),
    the cluster commits again once space is freed, without a restart, and after a
    SIGKILL of every node and a restart every acknowledged put is still everywhere."""
    disk = tmp_path / "disk"
    with tmpfs(disk, size_mb=30):
        cluster = Cluster(tmp_path / "c", n=3, start=False)
        failed = True
        try:
            for i in range(cluster.n):
                (disk / f"n{i}").mkdir()
                os.symlink(disk / f"n{i}", cluster.data_dir(i))
                cluster.start(i)
            cluster.wait_ready(30)
            filler = fill(disk, leave_bytes=8 * 1024 * 1024)
            with Writer(cluster, b"full/", value_bytes=8192) as writer:
                wait_until(
                    lambda: writer.errors["RESOURCE_EXHAUSTED"] >= 5,
                    120,
                    lambda: (
                        f"no write was refused for space (acked {len(writer.acked)}, "
                        f"errors {dict(writer.errors)}, last {writer.last_error!r})"
                    ),
                )
                assert "space" in writer.last_error, writer.last_error
                refused = len(writer.acked)
                filler.unlink()
                writer.wait_acked(50, 90)
                assert len(writer.acked) > refused
            for i in range(cluster.n):
                assert cluster.is_running(i), f"{cluster.nodes[i].id} died of a full disk"
            assert_acknowledged_everywhere(cluster, writer.acked, [0, 1, 2])
            for i in range(cluster.n):
                cluster.kill(i, signal.SIGKILL)
            for i in range(cluster.n):
                cluster.start(i)
            cluster.wait_ready(60)
            assert_acknowledged_everywhere(cluster, writer.acked, [0, 1, 2])
            failed = False
        finally:
            cluster.close(failed=failed)


def test_full_raft_logs_keep_the_leader_and_linearizable_reads_through_every_node(
    tmp_path: Path,
) -> None:
    """Three nodes with their Raft logs on one small tmpfs filled until writes are refused:
    while no node can persist a Raft entry, the leader stays (followers answer its
    heartbeats with what is on disk, §6.2) and linearizable reads through every node
    (ReadIndex §6.4: nothing written) answer with every acknowledged put; writes are
    refused meanwhile and commit again once space is freed.

    Only the Raft logs fill: a node whose change log is full cannot apply what committed
    (its image waits for the change log), and a linearizable read there must wait too."""
    disk = tmp_path / "disk"
    with tmpfs(disk, size_mb=30):
        cluster = Cluster(tmp_path / "c", n=3, start=False)
        failed = True
        try:
            for i in range(cluster.n):
                (disk / f"n{i}").mkdir()
                cluster.data_dir(i).mkdir(parents=True)
                os.symlink(disk / f"n{i}", cluster.data_dir(i) / "raft")
                cluster.start(i)
            cluster.wait_ready(30)
            filler = fill(disk, leave_bytes=4 * 1024 * 1024)
            with Writer(cluster, b"full/", value_bytes=8192) as writer:
                wait_until(
                    lambda: writer.errors["RESOURCE_EXHAUSTED"] >= 5,
                    120,
                    lambda: f"no write was refused for space ({dict(writer.errors)})",
                )
            assert writer.acked, "nothing was acknowledged before the disk filled"
            leader = cluster.leader()
            term = cluster.status(leader).term
            deadline = time.monotonic() + 3 * 2.0  # past check quorum's step-down, twice
            rounds = 0
            while rounds < 2 or time.monotonic() < deadline:
                for i in range(cluster.n):
                    image = cluster.range_all(i, prefix=b"full/", timeout=10)  # linearizable
                    missing = [k for k, v in writer.acked.items() if image.get(k, (None,))[0] != v]
                    assert not missing, (
                        f"a linearizable read through {cluster.nodes[i].id} misses "
                        f"{len(missing)} acknowledged puts\n{cluster.log_tail(i)}"
                    )
                rounds += 1
                time.sleep(0.5)
            with pytest.raises(grpc.RpcError) as refused:
                cluster.put(leader, b"full/more", b"v" * 8192, timeout=10)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert cluster.leader() == leader and cluster.status(leader).term == term
            filler.unlink()

            def put_after() -> bool:  # refused until the retried WAL sync clears the fault
                try:
                    cluster.put(leader, b"full/after", b"v", timeout=5)
                except grpc.RpcError:
                    return False
                return True

            wait_until(put_after, 60, "no put committed after space was freed")
            assert cluster.leader() == leader
            failed = False
        finally:
            cluster.close(failed=failed)


def test_descriptor_exhaustion_heals_without_a_restart(cluster: Cluster) -> None:
    """A follower whose descriptors run out (RLIMIT_NOFILE lowered, idle connections to
    its remoting and client ports) keeps running, and once descriptors come back it
    applies everything the others committed meanwhile, without a restart."""
    raise_own_descriptor_limit(4096)
    leader = cluster.leader()
    victim = _followers(cluster, leader)[0]
    proc = cluster.procs[victim]
    assert proc is not None
    spec = cluster.nodes[victim]
    idle: list[socket.socket] = []
    with Writer(cluster, b"fd/", value_bytes=256) as writer:
        writer.wait_acked(30, 30)
        base = open_descriptors(proc.pid)
        old = limit_descriptors(proc.pid, base + 16)
        try:
            for port in (spec.remoting_port, spec.client_port) * 100:
                s = socket.socket()
                s.settimeout(2)
                try:
                    s.connect(("127.0.0.1", port))
                except OSError:
                    s.close()
                    continue
                idle.append(s)
            wait_until(
                lambda: open_descriptors(proc.pid) >= base + 14,
                20,
                "the victim's descriptors did not run out",
            )
            writer.wait_acked(300, 60)  # the other two commit meanwhile
        finally:
            for s in idle:
                s.close()
            limit_descriptors(proc.pid, old[0])
        writer.wait_acked(50, 30)
    assert cluster.is_running(victim), f"the victim died\n{cluster.log_tail(victim)}"
    assert_acknowledged_everywhere(cluster, writer.acked, [0, 1, 2])


_REC = struct.Struct("<II")


def _wal_records(data: bytes) -> list[int]:
    """Start positions of the records of a Raft WAL file (u32 length | u32 crc | payload)."""
    out, pos = [], 0
    while pos + _REC.size <= len(data):
        length, _ = _REC.unpack_from(data, pos)
        if pos + _REC.size + length > len(data):
            break
        out.append(pos)
        pos += _REC.size + length
    return out


def test_corrupt_record_in_the_newest_wal_stops_the_node_and_a_wiped_member_rejoins(
    cluster: Cluster,
) -> None:
    """One flipped byte in the middle of a stopped follower's newest Raft WAL file is
    corruption, not a torn tail: the node exits non-zero naming the file and the byte and
    changes nothing. Wiped and restarted with the same command, it catches up."""
    leader = cluster.leader()
    victim = _followers(cluster, leader)[0]
    with Writer(cluster, b"wal/", value_bytes=128, max_puts=300) as writer:
        writer.wait_acked(300, 60)
    cluster.wait_converged()
    assert cluster.stop(victim) == 0, cluster.log_tail(victim)
    wals = sorted((cluster.data_dir(victim) / "raft").rglob("wal-*.log"))
    assert wals, "no Raft WAL file"
    newest = wals[-1]
    records = _wal_records(newest.read_bytes())
    assert len(records) >= 20, f"{newest} holds only {len(records)} records"
    at = records[len(records) // 2] + _REC.size + 4
    flip_byte(newest, at)
    corrupted = newest.read_bytes()

    before = len(cluster.log_text(victim))
    cluster.start(victim)
    rc = cluster.wait_exit(victim, 30)
    output = cluster.log_text(victim)[before:]
    assert rc != 0, f"the node started on a corrupt WAL\n{output[-3000:]}"
    named = [line for line in output.splitlines() if str(newest) in line]
    assert named, f"the error does not name {newest}\n{output[-3000:]}"
    assert any(str(records[len(records) // 2]) in line for line in named), named
    assert "Traceback" not in output, output[-3000:]
    assert newest.read_bytes() == corrupted, "the corrupt WAL was changed"

    shutil.rmtree(cluster.data_dir(victim))
    cluster.start(victim)
    cluster.wait_ready(60)
    assert_acknowledged_everywhere(cluster, writer.acked, [0, 1, 2])
