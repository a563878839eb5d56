"""Snapshots across real processes (DESIGN.md §4): catching up through the leader's
snapshot, whole-cluster restart from snapshot + change log, a corrupt snapshot, and
``etcdctl snapshot save``.

Raft sections are those of Ongaro & Ousterhout, "In Search of an Understandable
Consensus Algorithm (Extended Version)", 2014 (§7: log compaction, InstallSnapshot).
Every test ends with "all images equal": serializable full-range reads of every node,
revisions included, and equal apply offsets. (Not "all change logs equal", byte for byte:
a node that installed the leader's snapshot has that snapshot's effects in its change
log instead of the entries it missed.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from snapshots.etcdfmt import read_etcd_snapshot, split_snapshot_hash
from tests.harness import CHANNEL_OPTIONS, Cluster, wait_until

pytestmark = pytest.mark.cluster

KV = dict[bytes, tuple[bytes, int, int, int]]
RETRIABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

#: ``serve`` flags → ServerConfig fields, for the launcher that bypasses the CLI.
_CONFIG_FIELDS = {
    "--snapshot-every-items": "snapshot_every_items",
    "--snapshot-keep": "snapshot_keep",
    "--peer-idle-timeout-ms": "peer_idle_timeout_ms",
}


# --------------------------------------------------------------------------- cluster
class SnapshotCluster(Cluster):
    """A :class:`Cluster` whose nodes get extra ``serve`` flags (snapshot cadence)."""

    def __init__(
        self, root: str | os.PathLike[str], n: int = 3, serve_args: Sequence[str] = ()
    ) -> None:
        self.serve_args = list(serve_args)  # set before Cluster starts the nodes
        super().__init__(root, n)

    def command(self, i: int) -> list[str]:
        cmd = super().command(i)
        if cmd[1:4] == ["-m", "nameserver.cli", "serve"]:
            return cmd + self.serve_args
        # the python launcher: its last argument is the ServerConfig as JSON
        config = json.loads(cmd[-1])
        flags = iter(self.serve_args)
        for flag in flags:
            config[_CONFIG_FIELDS[flag]] = int(next(flags))
        return [*cmd[:-1], json.dumps(config)]

    def log_since(self, i: int, mark: int) -> str:
        """Node i's log from byte ``mark`` on (the log appends across restarts)."""
        with open(self.nodes[i].log_path, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")

    def log_mark(self, i: int) -> int:
        try:
            return self.nodes[i].log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def snapshots(self, i: int) -> list[Path]:
        """Node i's snapshot files, oldest first."""
        return sorted((self.data_dir(i) / "snap").glob("*.snap"))


@pytest.fixture
def make_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``make_cluster(*serve_args, n=3)``: a ready n-node :class:`SnapshotCluster`, stopped at
    teardown, with log tails printed when the test failed."""
    made: list[SnapshotCluster] = []

    def make(*serve_args: str, n: int = 3) -> SnapshotCluster:
        c = SnapshotCluster(tmp_path / f"cluster{len(made)}", n, serve_args)
        made.append(c)
        c.wait_ready(30)
        c.wait_announced(30)
        return c

    yield make
    failed = any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
        for when in ("setup", "call")
    )
    for c in made:
        c.close(failed=failed)


# --------------------------------------------------------------------------- writing
def key_of(prefix: bytes, i: int) -> bytes:
    return prefix + b"%07d" % i


def value_of(key: bytes, size: int = 32) -> bytes:
    return (key + b"=" * size)[:size] if size >= len(key) else key[:size]


async def _write(
    endpoints: Sequence[str],
    keys: Iterable[bytes],
    acked: dict[bytes, int],
    clients: int,
    value_size: int,
    stop: threading.Event | None,
    retry_s: float,
) -> None:
    channels = [grpc.aio.insecure_channel(ep, options=CHANNEL_OPTIONS) for ep in endpoints]
    stubs = [rpc_pb2_grpc.KVStub(ch) for ch in channels]
    todo = iter(keys)  # shared by the workers: one event loop, no locking needed

    async def worker(endpoint: str, stub: rpc_pb2_grpc.KVStub) -> None:
        for key in todo:
            started = time.monotonic()
            req = rpc_pb2.PutRequest(key=key, value=value_of(key, value_size))
            attempts = 0
            while True:
                if stop is not None and stop.is_set():
                    return
                attempts += 1
                try:
                    resp = await stub.Put(req, timeout=10.0)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() not in RETRIABLE or time.monotonic() > started + retry_s:
                        if stop is not None:  # the cluster is being killed under us
                            return
                        raise AssertionError(
                            f"put {key!r} through {endpoint}: {attempts} attempts in "
                            f"{time.monotonic() - started:.1f} s, the last: "
                            f"{exc.code().name} {exc.details()}"
                        ) from exc
                    await asyncio.sleep(0.05)
                    continue
                acked[key] = resp.header.revision
                break

    try:
        await asyncio.gather(
            *(worker(endpoints[i % len(stubs)], stubs[i % len(stubs)]) for i in range(clients))
        )
    finally:
        await asyncio.gather(*(ch.close() for ch in channels), return_exceptions=True)


def write_keys(
    endpoints: Sequence[str],
    keys: Iterable[bytes],
    clients: int = 64,
    value_size: int = 32,
    retry_s: float = 30.0,
) -> dict[bytes, int]:
    """Put every key (its value: :func:`value_of`) with ``clients`` concurrent clients spread
    over ``endpoints``, retrying while there is no leader; key → acknowledged revision."""
    acked: dict[bytes, int] = {}
    asyncio.run(_write(endpoints, keys, acked, clients, value_size, None, retry_s))
    return acked


class BackgroundWriter:
    """Puts keys from a thread until stopped (or the cluster dies); records what was
    acknowledged."""

    def __init__(self, endpoints: Sequence[str], keys: Iterable[bytes], clients: int) -> None:
        self.acked: dict[bytes, int] = {}
        self.stop = threading.Event()
        self.error: BaseException | None = None

        def run() -> None:
            try:
                asyncio.run(_write(endpoints, keys, self.acked, clients, 32, self.stop, 5.0))
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=run, name="writer", daemon=True)
        self.thread.start()

    def join(self) -> dict[bytes, int]:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the writer did not stop"
        return self.acked


# --------------------------------------------------------------------------- checks
def assert_all_equal(cluster: SnapshotCluster, timeout: float = 60.0) -> KV:
    """Every node applied all the leader has, with equal apply offsets, and their
    serializable full ranges (values and revisions) are equal. Returns that image."""
    nodes = list(range(cluster.n))
    cluster.wait_converged(nodes, timeout)

    def offsets() -> dict[int, int]:
        return {i: cluster.status(i).apply_offset for i in nodes}

    wait_until(
        lambda: len(set(offsets().values())) == 1,
        timeout,
        lambda: f"apply offsets differ: {offsets()}",
    )
    images = {i: cluster.range_all(i, serializable=True, timeout=30) for i in nodes}
    first = images[0]
    for i in nodes[1:]:
        if images[i] != first:
            only_a = sorted(set(first) - set(images[i]))
            only_b = sorted(set(images[i]) - set(first))
            differ = sorted(k for k in set(first) & set(images[i]) if first[k] != images[i][k])
            pytest.fail(
                f"images of n0 and {cluster.nodes[i].id} differ ({len(first)} and "
                f"{len(images[i])} keys): only in n0 {only_a[:5]} ({len(only_a)}), only in "
                f"{cluster.nodes[i].id} {only_b[:5]} ({len(only_b)}), different "
                f"{differ[:5]} ({len(differ)})"
            )
    return first


def assert_acked_readable(image: KV, acked: dict[bytes, int], value_size: int = 32) -> None:
    missing = sorted(k for k in acked if k not in image)
    assert not missing, (
        f"{len(missing)} acknowledged writes lost, e.g. (key, acknowledged revision) "
        f"{[(k, acked[k]) for k in missing[:5]]}; the image has {len(image)} keys"
    )
    wrong = sorted(
        k for k, rev in acked.items() if image[k][0] != value_of(k, value_size) or image[k][2] < rev
    )
    assert not wrong, f"{len(wrong)} acknowledged writes read back wrong, e.g. {wrong[:5]}"


def _followers(cluster: Cluster, leader: int) -> list[int]:
    return [i for i in range(cluster.n) if i != leader]


def change_log_offsets(cluster: Cluster, i: int) -> set[int]:
    """Offsets with records in node i's change-log segments (read only; the node stopped,
    or idle)."""
    from snapshots import read_segments

    return {r.offset for r in read_segments(cluster.data_dir(i) / "log", 2**62)}


def flip_middle_byte(path: Path) -> None:
    """Flip one byte in the middle of ``path``, in place (a hard link sees it too)."""
    with open(path, "r+b") as f:
        middle = os.fstat(f.fileno()).st_size // 2
        f.seek(middle)
        byte = f.read(1)[0]
        f.seek(middle)
        f.write(bytes([byte ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())


def _idle_with(
    cluster: SnapshotCluster, leader: int, keys: Iterator[bytes], done: Any, what: str
) -> tuple[int, dict[bytes, int]]:
    """Puts through the leader, one at a time, each followed by a linearizable read (its
    barrier is a noop entry, with no change-log records), until, with everything applied
    everywhere, ``done(newest snapshot offset of a node, offset of its last change-log
    record)`` holds for some node (a follower if one qualifies). Returns that node and the
    puts (key -> the store revision, which is not the offset: the store counts etcd's way)."""
    acked: dict[bytes, int] = {}
    deadline = time.monotonic() + 120
    while True:
        if acked:
            cluster.wait_converged()
            time.sleep(0.2)  # a snapshot the last item triggered is written meanwhile
            for i in [*_followers(cluster, leader), leader]:
                snaps = cluster.snapshots(i)
                # read while it runs: idle, converged, so no record is being written
                last = max(change_log_offsets(cluster, i), default=0)
                if snaps and done(int(snaps[-1].stem), last):
                    return i, acked
        assert time.monotonic() < deadline, f"{what}: not within 120 s"
        key = next(keys)
        acked[key] = cluster.put(leader, key, value_of(key)).header.revision


def idle_right_after_a_snapshot(
    cluster: SnapshotCluster, leader: int, keys: Iterator[bytes]
) -> tuple[int, dict[bytes, int]]:
    """Puts until a node's newest snapshot covers its last change-log offset (the last
    put's): it was taken with nothing after it but noops."""
    return _idle_with(cluster, leader, keys, lambda snap, put: snap >= put, "idle at a snapshot")


def idle_after_the_newest_snapshot(
    cluster: SnapshotCluster, leader: int, keys: Iterator[bytes]
) -> tuple[int, dict[bytes, int]]:
    """Puts until a node's change log has at least 3 puts after its newest snapshot."""
    return _idle_with(
        cluster, leader, keys, lambda snap, put: put >= snap + 3, "idle past a snapshot"
    )


# --------------------------------------------------------------------------- tests
#: writes the lagging followers miss
LAGGED_WRITES = 20_000


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_lagging_followers_catch_up_by_installing_the_leaders_snapshot(make_cluster: Any) -> None:
    """Raft §7: two followers of five, one killed and one stopped (SIGSTOP), miss 20k
    writes while the leader compacts its log behind them (a snapshot every 500 items: about
    40 of them past the lagging nodes, the newest of 22k keys, about 2 MiB: two chunks);
    each gets the leader's snapshot (InstallSnapshot), then the tail, and ends with the same
    image and apply offset as the others. (Both ways of falling behind on one cluster and one
    load: they were two runs of three nodes that wrote 50k keys each.)"""
    cluster: SnapshotCluster = make_cluster("--snapshot-every-items", "500", n=5)
    leader = cluster.wait_ready(30)
    killed, stopped = _followers(cluster, leader)[:2]
    lagging = (killed, stopped)
    serving = [i for i in range(cluster.n) if i not in lagging]
    endpoints = [cluster.endpoints[i] for i in serving]

    # some history on every node first, so the lagging ones have snapshots of their own
    warm = write_keys(cluster.endpoints, (key_of(b"warm/", i) for i in range(2000)))
    cluster.wait_converged()
    before = {i: cluster.status(i).apply_offset for i in lagging}
    own_snapshots = {i: {p.name for p in cluster.snapshots(i)} for i in lagging}
    marks = {i: cluster.log_mark(i) for i in lagging}  # a stopped node logs nothing
    cluster.kill(killed)
    cluster.kill(stopped, signal.SIGSTOP)

    started = time.monotonic()
    try:
        acked = write_keys(endpoints, (key_of(b"lag/", i) for i in range(LAGGED_WRITES)))
    finally:
        cluster.kill(stopped, signal.SIGCONT)
    write_s = time.monotonic() - started
    assert len(acked) == LAGGED_WRITES
    print(f"{LAGGED_WRITES} writes through 3 nodes in {write_s:.1f} s"
          f" ({LAGGED_WRITES / write_s:.0f}/s)")  # fmt: skip

    # the leader's Raft log is compacted well past the lagging nodes' last entries
    leader = cluster.wait_ready(30, serving)
    newest = int(cluster.snapshots(leader)[-1].stem)
    assert newest > max(before.values()) + 1000, (
        f"the leader's newest snapshot is at {newest}, the lagging nodes applied {before}"
    )

    marks[killed] = cluster.log_mark(killed)
    cluster.start(killed)
    cluster.wait_ready(60)
    image = assert_all_equal(cluster, timeout=90)

    for lag in lagging:
        installed = [
            line
            for line in cluster.log_since(lag, marks[lag]).splitlines()
            if "installed the leader's snapshot at offset" in line
        ]
        assert installed, (
            f"{cluster.nodes[lag].id} caught up without installing the leader's snapshot\n"
            f"{cluster.log_tail(lag)}"
        )
        at = int(installed[-1].split("installed the leader's snapshot at offset ")[1].split()[0])
        assert at > before[lag]
        # the installed snapshot is in its snap dir, and it never took one at that offset
        names = {p.name for p in cluster.snapshots(lag)}
        assert f"{at:020d}.snap" in names, (lag, at, sorted(names))
        assert f"{at:020d}.snap" not in own_snapshots[lag]
        assert f"snapshot at offset {at} (raft index" not in cluster.log_text(lag)

    assert_acked_readable(image, warm)
    assert_acked_readable(image, acked)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_follower_paused_past_the_leaders_snapshot_and_its_idle_timeout_catches_up_in_seconds(
    make_cluster: Any,
) -> None:
    """Raft §7, as the loaded machine once saw it: a follower stopped (SIGSTOP) while the
    leader writes it a snapshot (the bytes wait in its socket buffer), compacts past that
    snapshot too, and closes the follower's silent connection (the peer idle timeout). On
    SIGCONT the follower installs the stale snapshot and its answer is lost: the leader's
    heartbeats keep it a follower, their answers show where it is, and it gets the newer
    snapshot within seconds (not the 120 s transfer timeout)."""
    idle_s = 2.0
    every = 100
    cluster: SnapshotCluster = make_cluster(
        "--snapshot-every-items", str(every), "--peer-idle-timeout-ms", str(int(idle_s * 1000))
    )
    leader = cluster.wait_ready(30)
    lagging = _followers(cluster, leader)[0]
    serving = [i for i in range(cluster.n) if i != lagging]
    warm = write_keys(cluster.endpoints, (key_of(b"warm/", i) for i in range(1000)), clients=16)
    cluster.wait_converged()
    mark = cluster.log_mark(leader)
    to = cluster.nodes[lagging].peer_addr
    cluster.kill(lagging, signal.SIGSTOP)
    stopped = time.monotonic()
    writer = BackgroundWriter(
        [cluster.endpoints[i] for i in serving], (key_of(b"lag/", i) for i in range(10**6)), 16
    )
    try:

        def stale_snapshot_sent() -> bool:
            """The leader wrote the paused follower a snapshot and then compacted its log
            past it, and the follower was silent for longer than the idle timeout."""
            lines = cluster.log_since(leader, mark).splitlines()
            sent = [
                int(ln.split("sending the snapshot at index ")[1].split()[0])
                for ln in lines
                if "sending the snapshot at index " in ln and ln.endswith(to)
            ]
            compacted = [
                int(ln.rsplit(" ", 1)[1])
                for ln in lines
                if "raft log compacted behind the snapshot at index" in ln
            ]
            return (
                bool(sent)
                and any(c - every > sent[0] for c in compacted)
                and (time.monotonic() - stopped > 2 * idle_s)
            )

        wait_until(stale_snapshot_sent, 150, "a stale snapshot written to the paused follower")
    finally:
        cluster.kill(lagging, signal.SIGCONT)
        acked = writer.join()
    assert writer.error is None, writer.error
    resumed = time.monotonic()
    image = assert_all_equal(cluster, timeout=40)
    print(f"{len(acked)} writes; caught up {time.monotonic() - resumed:.1f} s after SIGCONT")
    assert_acked_readable(image, warm)
    assert_acked_readable(image, acked)


@pytest.mark.timeout(180)
def test_whole_cluster_restart_from_snapshot_and_change_log_loses_nothing(
    make_cluster: Any,
) -> None:
    """All three nodes SIGKILLed under write load, after several snapshots: each restores
    its newest snapshot plus the change log after it, and every acknowledged write is
    there, on every node."""
    cluster: SnapshotCluster = make_cluster("--snapshot-every-items", "100")
    acked = write_keys(cluster.endpoints, (key_of(b"a/", i) for i in range(3000)), clients=16)
    # overwrite some, so the snapshot and the change log after it disagree about a key
    acked.update(
        write_keys(cluster.endpoints, (key_of(b"a/", i) for i in range(0, 3000, 7)), clients=16)
    )
    writer = BackgroundWriter(cluster.endpoints, (key_of(b"b/", i) for i in range(10**6)), 16)
    wait_until(lambda: len(writer.acked) >= 500, 60, "500 writes under load")
    for i in range(cluster.n):  # SIGKILL all three while the writer is busy
        with contextlib.suppress(ProcessLookupError):
            os.killpg(cluster.procs[i].pid, signal.SIGKILL)  # type: ignore[union-attr]
    for i in range(cluster.n):
        cluster.kill(i)  # reap
    late = writer.join()
    assert writer.error is None, writer.error
    acked.update(late)

    marks = {}
    for i in range(cluster.n):
        snaps = cluster.snapshots(i)
        assert len(snaps) >= 1, f"{cluster.nodes[i].id} has no snapshot to restart from"
        marks[i] = cluster.log_mark(i)
    for i in range(cluster.n):
        cluster.start(i)
    cluster.wait_ready(60)
    for i in range(cluster.n):
        text = cluster.log_since(i, marks[i])
        assert "restored snapshot" in text, (
            f"{cluster.nodes[i].id} did not restore from a snapshot\n{cluster.log_tail(i)}"
        )

    image = assert_all_equal(cluster)
    assert_acked_readable(image, acked)
    # linearizable reads through every node see them too
    for i in range(cluster.n):
        assert_acked_readable(
            cluster.range_all(i, b"a/"), {k: v for k, v in acked.items() if k.startswith(b"a/")}
        )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("newest_at", ["before_the_log_end", "the_log_end"])
def test_corrupt_newest_snapshot_is_refused_and_the_node_falls_back(
    make_cluster: Any, newest_at: str
) -> None:
    """One flipped byte in the middle of a stopped node's newest snapshot (which is also
    PySyncObj's dump, a hard link): on restart it says so (WARNING naming the file),
    restores the previous snapshot plus the change log, and ends equal to the others.

    ``the_log_end``: the newest snapshot was taken at the node's last change-log offset
    (a node that went idle right after a snapshot: the usual case); ``before_the_log_end``:
    a few writes came after it."""
    cluster: SnapshotCluster = make_cluster("--snapshot-every-items", "20")
    leader = cluster.wait_ready(30)
    acked = write_keys(cluster.endpoints, (key_of(b"c/", i) for i in range(2000)), clients=16)
    extra = (key_of(b"x/", i) for i in range(10**6))
    idle = (
        idle_right_after_a_snapshot
        if newest_at == "the_log_end"
        else idle_after_the_newest_snapshot
    )
    victim, puts = idle(cluster, leader, extra)
    acked.update(puts)
    assert cluster.stop(victim) == 0, cluster.log_tail(victim)

    snaps = cluster.snapshots(victim)
    assert len(snaps) >= 2, snaps
    newest, previous = snaps[-1], snaps[-2]
    flip_middle_byte(newest)

    mark = cluster.log_mark(victim)
    cluster.start(victim)
    cluster.wait_ready(60)
    image = assert_all_equal(cluster)
    assert_acked_readable(image, acked)

    text = cluster.log_since(victim, mark)
    warnings = [ln for ln in text.splitlines() if "WARNING" in ln and str(newest) in ln]
    assert warnings, (
        f"no WARNING naming {newest} in {cluster.nodes[victim].id}'s log\n"
        f"{cluster.log_tail(victim, 60)}"
    )
    assert f"restored snapshot {previous}" in text, cluster.log_tail(victim, 60)
    # nothing was written meanwhile: the node rebuilt all it had applied on its own (the
    # previous snapshot plus its change log), not from the leader's snapshot
    assert "installed the leader's snapshot" not in text, cluster.log_tail(victim, 60)

    # and it goes on with the others
    more = write_keys(cluster.endpoints, (key_of(b"d/", i) for i in range(300)), clients=8)
    image = assert_all_equal(cluster)
    assert_acked_readable(image, {**acked, **more})


@pytest.mark.timeout(120)
def test_restart_keeps_the_change_log_records_at_the_newest_snapshots_offset(
    make_cluster: Any,
) -> None:
    """DESIGN.md §3-§4: the change log holds the effects of every offset (watches, the
    Spark compaction and the corrupt-snapshot fallback read it). A node stopped right after
    a snapshot at its last offset, then restarted, must still have that offset's records,
    like the other nodes."""
    cluster: SnapshotCluster = make_cluster("--snapshot-every-items", "20")
    leader = cluster.wait_ready(30)
    write_keys(cluster.endpoints, (key_of(b"h/", i) for i in range(200)), clients=8)
    victim, _ = idle_right_after_a_snapshot(
        cluster, leader, (key_of(b"x/", i) for i in range(10**6))
    )
    newest = int(cluster.snapshots(victim)[-1].stem)
    assert cluster.stop(victim) == 0, cluster.log_tail(victim)
    at = max(change_log_offsets(cluster, victim))
    assert at <= newest, f"the change log goes on after the newest snapshot ({newest}): {at}"

    cluster.start(victim)
    cluster.wait_ready(30)
    write_keys(cluster.endpoints, (key_of(b"y/", i) for i in range(5)), clients=1)
    assert_all_equal(cluster)
    for i in range(cluster.n):
        assert cluster.stop(i) == 0, cluster.log_tail(i)
    offsets = {i: change_log_offsets(cluster, i) for i in range(cluster.n)}
    for i in range(cluster.n):
        assert at in offsets[i], (
            f"offset {at} ({cluster.nodes[victim].id}'s last change-log offset when it "
            f"stopped, covered by its newest snapshot {newest}) is missing from {cluster.nodes[i].id}'s change log after the restart: it has "
            f"{sorted(o for o in offsets[i] if at - 3 <= o <= at + 3)} around it"
        )


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_etcdctl_snapshot_save_is_a_snapshot_metaledger_reads(
    make_cluster: Any, tmp_path: Path
) -> None:
    """``etcdctl snapshot save`` (Maintenance.Snapshot) against a node stores an etcd 3.4
    snapshot (bbolt database and SHA-256) with one key record per key written, every member,
    at a revision no older than what the node had applied."""
    etcdctl = shutil.which("etcdctl")
    if etcdctl is None:
        pytest.skip("etcdctl is not installed")
    cluster: SnapshotCluster = make_cluster()
    acked = write_keys(cluster.endpoints, (key_of(b"e/", i) for i in range(777)), clients=16)
    leader = cluster.wait_ready(30)
    target = _followers(cluster, leader)[0]
    cluster.wait_converged()
    # the store revision it had applied (etcd's count: behind its apply offset, which also
    # numbers lease and member requests)
    applied = (
        cluster.maintenance(target).Status(rpc_pb2.StatusRequest(), timeout=10).header.revision
    )

    out = tmp_path / "saved.db"
    done = subprocess.run(
        [etcdctl, "--endpoints", cluster.endpoints[target], "snapshot", "save", str(out)],
        capture_output=True,
        text=True,
        env=dict(os.environ, ETCDCTL_API="3"),
        timeout=60,
    )
    assert done.returncode == 0, f"etcdctl snapshot save failed: {done.stdout}{done.stderr}"
    data = out.read_bytes()
    assert split_snapshot_hash(data)[1], "etcd's SHA-256 trailer"
    image = read_etcd_snapshot(data)
    assert len(image.live_keys()) == len(acked) == len(image.keys)
    assert len(image.members) == cluster.n, image.members
    assert image.revision >= applied, (image.revision, applied)
