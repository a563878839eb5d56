"""Bit flips and truncation of a running follower's files: its Raft WAL and its change-log
segments, changed under it while it keeps serving and the others keep writing.

What must hold: the member never serves the damaged bytes (its reads and a watch from the
first revision give what was acknowledged, or fail); restarted, it either stops with an
error naming the file and the byte, or it comes up with every acknowledged write; the
cluster loses nothing acknowledged, and a stopped member rejoins once its data dir is
wiped. A change-log segment cut under the running member stops it at its next append (the
file is shorter than what it wrote); without that check the next records landed after
the cut and a restart took the segment as whole, serving an image without the cut-off
puts. (The stopped-member cases are tests/faults/test_faults.py and
test_changelog_flips.py.)"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import struct
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from snapshots import HEADER_BYTES
from tests.faults.inject import Writer, assert_acknowledged_everywhere, flip_byte
from tests.harness import Cluster, prefix_end, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.faults, pytest.mark.slow]


def _frames(data: bytes, start: int) -> list[tuple[int, int]]:
    """(position, end) of each length-prefixed frame (u32 length, u32 crc, payload)."""
    out, pos = [], start
    while pos + 8 <= len(data):
        (length,) = struct.unpack_from("<I", data, pos)
        if length == 0 or pos + 8 + length > len(data):
            break
        out.append((pos, pos + 8 + length))
        pos += 8 + length
    return out


def _wal(data_dir: Path) -> tuple[Path, int]:
    path = sorted((data_dir / "raft" / "wal").glob("wal-*.log"))[-1]
    return path, 0


def _segment(data_dir: Path) -> tuple[Path, int]:
    return sorted((data_dir / "log").glob("*.seg"))[-1], HEADER_BYTES


def _flip(locate: Callable[[Path], tuple[Path, int]]) -> Callable[[Path], tuple[Path, int]]:
    def damage(data_dir: Path) -> tuple[Path, int]:
        path, start = locate(data_dir)
        frames = _frames(path.read_bytes(), start)
        assert len(frames) >= 20, f"{path}: only {len(frames)} records"
        _, end = frames[len(frames) // 3]
        flip_byte(path, end - 1)  # the record's last payload byte: its CRC no longer matches
        return path, end - 1

    return damage


def _truncate(locate: Callable[[Path], tuple[Path, int]]) -> Callable[[Path], tuple[Path, int]]:
    def damage(data_dir: Path) -> tuple[Path, int]:
        path, start = locate(data_dir)
        frames = _frames(path.read_bytes(), start)
        assert len(frames) >= 20, f"{path}: only {len(frames)} records"
        at = frames[len(frames) // 2][0]  # a record boundary: what follows is simply gone
        os.truncate(path, at)
        return path, at

    return damage


DAMAGE = {
    "wal-flip": _flip(_wal),
    "wal-truncate": _truncate(_wal),
    "segment-flip": _flip(_segment),
    "segment-truncate": _truncate(_segment),
}


def _watch_values(endpoint: str, prefix: bytes, want: int, timeout: float) -> list[bytes]:
    """Values of the put events a watch from revision 1 delivers (up to ``want``), through
    one member only. A failed or cancelled watch ends the list early."""
    values: list[bytes] = []
    with grpc.insecure_channel(endpoint) as ch:
        create = rpc_pb2.WatchRequest(
            create_request=rpc_pb2.WatchCreateRequest(
                key=prefix, range_end=prefix_end(prefix), start_revision=1
            )
        )
        stream = rpc_pb2_grpc.WatchStub(ch).Watch(iter([create]), timeout=timeout)
        try:
            for resp in stream:
                if resp.canceled:
                    break
                values.extend(ev.kv.value for ev in resp.events)
                if len(values) >= want:
                    break
        except grpc.RpcError:
            pass
        finally:
            stream.cancel()
    return values


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damage_to_a_running_follower_is_never_served_and_is_caught(
    cluster: Cluster, kind: str
) -> None:
    leader = cluster.leader()
    victim = next(i for i in cluster.running() if i != leader)
    with Writer(cluster, b"dmg/", value_bytes=128) as writer:
        writer.wait_acked(300, 60)
        cluster.wait_converged()
        path, at = DAMAGE[kind](cluster.data_dir(victim))
        before = len(cluster.log_text(victim))
        writer.wait_acked(100, 60)
        acked = dict(writer.acked)
        with contextlib.suppress(AssertionError):  # a member that noticed is stopping
            wait_until(lambda: not cluster.is_running(victim), 3, "", interval=0.1)
        if cluster.is_running(victim):
            # still running on what it holds in memory: reads give the acknowledged values
            cluster.wait_converged()
            image = cluster.range_all(victim, prefix=b"dmg/", serializable=True, timeout=30)
            wrong = [k for k, v in acked.items() if image.get(k, (None,))[0] != v]
            assert not wrong, f"{kind}: the damaged member serves {len(wrong)} wrong values"
            seen = _watch_values(cluster.endpoints[victim], b"dmg/", len(acked), 30)
            bad = [v for v in seen if v not in set(acked.values()) | set(writer.acked.values())]
            assert not bad, f"{kind}: a watch through the damaged member delivered {bad[:3]}"
            cluster.kill(victim, signal.SIGKILL)
            cluster.start(victim)
            stopped = _exits_within(cluster, victim, 20)
        else:
            stopped = cluster.wait_exit(victim, 5)  # it noticed while running
        output = cluster.log_text(victim)[before:]
        if stopped is not None:
            assert stopped != 0
            named = [line for line in output.splitlines() if str(path) in line]
            assert any(re.search(r"at byte \d+", line) for line in named), (
                f"{kind}: the member stopped without naming {path} and a byte:\n{output[-3000:]}"
            )
            shutil.rmtree(cluster.data_dir(victim))
            cluster.start(victim)
        cluster.wait_ready(60)
        writer.wait_acked(50, 60)
    assert_acknowledged_everywhere(cluster, writer.acked, [0, 1, 2])
    print(f"{kind} at {path}:{at}: " + ("stopped" if stopped is not None else "came back"))


def _exits_within(cluster: Cluster, i: int, seconds: float) -> int | None:
    """Its exit code if node i exits within ``seconds`` of its start, else None (once it
    serves: a ready node that keeps running came back)."""
    try:
        cluster.wait_ready(seconds)
    except AssertionError:
        pass
    proc = cluster.procs[i]
    assert proc is not None
    return proc.poll()


def _settled(path: Path, quiet_s: float = 1.0) -> None:
    """Wait until ``path`` was not replaced (a new snapshot) for ``quiet_s``: the snapshots
    the last writes triggered are written, so a byte flipped in it stays in the file."""
    seen: list[tuple[int, float]] = []

    def quiet() -> bool:
        ino, now = path.stat().st_ino, time.monotonic()
        if not seen or seen[-1][0] != ino:
            seen.append((ino, now))
        return now - seen[-1][1] >= quiet_s

    wait_until(quiet, 30, f"{path} keeps being replaced")


def test_a_flipped_byte_in_the_running_leaders_snapshot_is_not_installed_on_a_follower(
    tmp_path: Path,
) -> None:
    """The leader's newest snapshot (the dump it streams to a follower behind its
    compacted log) gets a flipped byte while it runs; a follower wiped and restarted
    needs a snapshot: it must end with the others' image, never the damaged one.

    The leader checks the whole dump before it streams it: it logs the damage (file and
    byte) as an ERROR, takes a fresh snapshot, and sends that one. (Unchecked, the follower's
    restore stopped at "corrupt record at byte N: CRC mismatch" and the node exited 70
    before serving anything: safe, but it could never rejoin.)"""
    from tests.cluster.test_snapshots import (
        SnapshotCluster,
        assert_acked_readable,
        assert_all_equal,
        key_of,
        write_keys,
    )

    cluster = SnapshotCluster(tmp_path / "c", 3, ["--snapshot-every-items", "20"])
    failed = True
    try:
        leader = cluster.wait_ready(30)
        acked = write_keys(cluster.endpoints, (key_of(b"s/", i) for i in range(600)), clients=8)
        dump = cluster.data_dir(leader) / "raft" / "dump.snap"
        assert dump.exists(), sorted(p.name for p in (cluster.data_dir(leader) / "raft").iterdir())
        _settled(dump)
        size = dump.stat().st_size
        flip_byte(dump, size // 2)
        victim = next(i for i in range(3) if i != leader)
        assert cluster.stop(victim) == 0, cluster.log_tail(victim)
        shutil.rmtree(cluster.data_dir(victim))
        mark = len(cluster.log_text(victim))
        cluster.start(victim)
        image = assert_all_equal(cluster, timeout=60)
        assert_acked_readable(image, acked)
        assert "CRC mismatch" not in cluster.log_text(victim)[mark:]
        assert "not sending the snapshot" in cluster.log_text(leader), cluster.log_tail(leader)
        failed = False
    finally:
        cluster.close(failed=failed)
