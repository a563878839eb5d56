"""Several real metaledger processes: writes everywhere, kills, restarts, corruption.

Raft sections are those of Ongaro & Ousterhout, "In Search of an Understandable
Consensus Algorithm (Extended Version)", 2014. The tests that write end with "all images
equal" (serializable full-range reads of every live node, revisions included); the crash
and restart tests also end with "all logs equal" (change-log segments, byte for byte,
after a clean stop).
"""

from __future__ import annotations

import collections
import itertools
import signal
import struct
import threading
import time
from pathlib import Path

import grpc
import pytest

from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import admin_pb2, admin_pb2_grpc
from tests.harness import CHANNEL_OPTIONS, Cluster, wait_until

pytestmark = pytest.mark.cluster

KV = dict[bytes, tuple[bytes, int, int, int]]


# --------------------------------------------------------------------------- helpers
def assert_offsets_ordered(st: admin_pb2.StatusResponse) -> None:
    assert st.apply_offset <= st.commit_offset <= st.end_offset, (
        f"{st.id}: apply {st.apply_offset} <= commit {st.commit_offset} <= end "
        f"{st.end_offset} does not hold"
    )


def assert_images_equal(cluster: Cluster, nodes: list[int], prefix: bytes = b"") -> KV:
    """Wait until ``nodes`` applied all the leader has; then their serializable full-range
    reads (values and revisions) must be equal. Returns that image."""
    cluster.wait_converged(nodes)
    images = {i: cluster.range_all(i, prefix, serializable=True) for i in nodes}
    first = images[nodes[0]]
    for i in nodes[1:]:
        if images[i] != first:
            only_a = sorted(set(first) - set(images[i]))[:5]
            only_b = sorted(set(images[i]) - set(first))[:5]
            differ = sorted(k for k in set(first) & set(images[i]) if first[k] != images[i][k])
            pytest.fail(
                f"images of {cluster.nodes[nodes[0]].id} and {cluster.nodes[i].id} differ: "
                f"only in the first {only_a}, only in the second {only_b}, "
                f"different {differ[:5]}"
            )
    return first


def assert_change_logs_equal(cluster: Cluster, nodes: list[int]) -> None:
    """Stop ``nodes`` (SIGTERM) once they have applied the same entries, then their
    change-log segments (DESIGN.md §3: the effects of the same entries) must be equal,
    byte for byte."""
    cluster.wait_converged(nodes)
    for i in nodes:
        assert cluster.stop(i) == 0, cluster.log_tail(i)

    def segments(i: int) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in (cluster.data_dir(i) / "log").glob("*.seg")}

    first = segments(nodes[0])
    assert first, "no change-log segment written"
    for i in nodes[1:]:
        other = segments(i)
        assert sorted(other) == sorted(first), (
            f"segment files differ: {sorted(first)} {sorted(other)}"
        )
        for name, data in first.items():
            assert other[name] == data, (
                f"{name} of {cluster.nodes[nodes[0]].id} and {cluster.nodes[i].id} differ "
                f"({len(data)} and {len(other[name])} bytes)"
            )


def assert_holds(cluster: Cluster, i: int, acked: dict[bytes, bytes], prefix: bytes) -> None:
    """Node i's linearizable read of ``prefix`` has every acknowledged key with its value."""
    got = cluster.range_all(i, prefix)
    missing = sorted(k for k in acked if k not in got)
    wrong = sorted(k for k in acked if k in got and got[k][0] != acked[k])
    assert not missing and not wrong, (
        f"{cluster.nodes[i].id} lost acknowledged writes: {len(missing)} missing "
        f"(e.g. {missing[:5]}), {len(wrong)} with another value (e.g. {wrong[:5]}) "
        f"of {len(acked)} acknowledged"
    )


class Load:
    """Writer threads putting distinct keys through given nodes, recording each ack.

    Each writer has its own channel (the harness's channels are closed when a node is
    killed); a failed put is counted and not retried (its key is not reused).
    """

    def __init__(self, cluster: Cluster, targets: list[int], prefix: bytes) -> None:
        self.cluster = cluster
        self.prefix = prefix
        self.acked: dict[bytes, bytes] = {}
        self.revisions: dict[bytes, int] = {}
        self.errors: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(w, i), name=f"writer-{w}", daemon=True)
            for w, i in enumerate(targets)
        ]

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(15)
        assert not any(t.is_alive() for t in self.threads), "a writer thread hangs"

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def _run(self, w: int, node: int) -> None:
        addr = self.cluster.endpoints[node]
        with grpc.insecure_channel(addr, options=CHANNEL_OPTIONS) as ch:
            kv = rpc_pb2_grpc.KVStub(ch)
            for seq in itertools.count():
                if self.stop.is_set():
                    return
                key = self.prefix + f"w{w}/{seq:06d}".encode()
                value = f"value of {key.decode()} through {addr}".encode()
                try:
                    resp = kv.Put(rpc_pb2.PutRequest(key=key, value=value), timeout=7.0)
                except grpc.RpcError as exc:
                    with self.lock:
                        self.errors[exc.code().name] += 1
                    self.stop.wait(0.05)  # back off while there is no leader
                    continue
                with self.lock:
                    self.acked[key] = value
                    self.revisions[key] = resp.header.revision


class OffsetSampler:
    """Polls Admin.Status of the nodes in ``live`` and checks apply <= commit <= end."""

    def __init__(self, cluster: Cluster, live: set[int]) -> None:
        self.cluster = cluster
        self.live = live  # the test removes a node before killing it
        self.samples = 0
        self.violations: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="offset-sampler", daemon=True)

    def __enter__(self) -> OffsetSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)

    def _run(self) -> None:
        channels = {
            i: grpc.insecure_channel(addr, options=CHANNEL_OPTIONS)
            for i, addr in enumerate(self.cluster.endpoints)
        }
        try:
            while not self.stop.is_set():
                for i in sorted(self.live):
                    try:
                        st = admin_pb2_grpc.AdminStub(channels[i]).Status(
                            admin_pb2.StatusRequest(), timeout=1.0
                        )
                    except grpc.RpcError:
                        continue
                    self.samples += 1
                    if not st.apply_offset <= st.commit_offset <= st.end_offset:
                        self.violations.append(
                            f"{st.id}: apply {st.apply_offset} commit {st.commit_offset} "
                            f"end {st.end_offset}"
                        )
                self.stop.wait(0.02)
        finally:
            for ch in channels.values():
                ch.close()


def followers(cluster: Cluster, leader: int) -> list[int]:
    return [i for i in cluster.running() if i != leader]


# --------------------------------------------------------------------------- tests
def test_writes_through_every_node_are_readable_from_every_node(cluster: Cluster) -> None:
    """§5.3 (log replication) and §8 (linearizable reads): a write acknowledged by any node
    (followers forward to the leader) is seen by a linearizable read on every node at once,
    and by a serializable read once that node has applied it; apply <= commit <= end."""
    expected: dict[bytes, tuple[bytes, int]] = {}
    for i in range(cluster.n):
        for k in range(20):
            key = f"every/{cluster.nodes[i].id}/{k:02d}".encode()
            value = f"v{k} via {cluster.nodes[i].id}".encode()
            resp = cluster.put_retrying(i, key, value)
            rev = resp.header.revision
            assert rev > 0
            expected[key] = (value, rev)
            # Linearizable: visible everywhere as soon as it is acknowledged.
            for j in range(cluster.n):
                got = cluster.stub(j).Range(rpc_pb2.RangeRequest(key=key), timeout=5)
                assert [(kv.key, kv.value, kv.mod_revision) for kv in got.kvs] == [
                    (key, value, rev)
                ], f"linearizable read of {key!r} on {cluster.nodes[j].id}"
                assert got.header.revision >= rev
    revisions = [rev for _, rev in expected.values()]
    assert len(set(revisions)) == len(revisions), "two writes got one revision"

    for j in range(cluster.n):
        got = cluster.range_all(j, b"every/")
        assert {k: (v[0], v[2]) for k, v in got.items()} == expected

    # Serializable: the local image, once this node has applied the last write.
    cluster.wait_applied(max(revisions))
    for j in range(cluster.n):
        got = cluster.range_all(j, b"every/", serializable=True)
        assert {k: (v[0], v[2]) for k, v in got.items()} == expected, cluster.nodes[j].id
        st = cluster.status(j)
        assert_offsets_ordered(st)
        assert st.apply_offset >= max(revisions)
    assert_images_equal(cluster, list(range(cluster.n)))


def test_leader_sigkill_under_load_keeps_every_acknowledged_write(cluster: Cluster) -> None:
    """§5.2 (leader election), §5.4 (safety: leader completeness) and §8 (clients):
    SIGKILL the leader while writers put through every node; the survivors elect a new
    leader within seconds and every acknowledged write is readable, with its value, from
    both of them. Meanwhile apply <= commit <= end on every live node at every sample."""
    leader = cluster.leader()
    live = set(range(cluster.n))
    targets = [*followers(cluster, leader), leader]
    with OffsetSampler(cluster, live) as sampler, Load(cluster, targets, b"load/") as load:
        wait_until(lambda: load.acked_count() >= 150, 30, "150 writes acknowledged")
        live.discard(leader)
        t0 = time.monotonic()
        cluster.kill(leader, signal.SIGKILL)
        survivors = sorted(live)
        new_leader = cluster.wait_ready(15, nodes=survivors)
        failover_s = time.monotonic() - t0
        assert new_leader != leader
        assert failover_s < 10, f"a new leader took {failover_s:.1f} s"
        acked_at_failover = load.acked_count()
        wait_until(
            lambda: load.acked_count() >= acked_at_failover + 150,
            30,
            lambda: f"writes resume after the failover (errors so far: {dict(load.errors)})",
        )
    print(
        f"failover {failover_s:.2f} s; {len(load.acked)} writes acknowledged; "
        f"errors {dict(load.errors)}; {sampler.samples} offset samples"
    )
    assert not sampler.violations, sampler.violations[:10]
    assert sampler.samples > 0

    for i in survivors:
        assert_holds(cluster, i, load.acked, b"load/")
    image = assert_images_equal(cluster, survivors, b"load/")
    for key, rev in load.revisions.items():
        assert image[key][2] == rev, f"{key!r} acknowledged at {rev}, now {image[key][2]}"
    for i in survivors:
        assert_offsets_ordered(cluster.status(i))


def test_follower_sigkill_restart_catches_up(cluster: Cluster) -> None:
    """§5.5 (follower crashes) and §5.3 (the leader brings a follower's log up to date):
    SIGKILL a follower, keep writing through the other two, restart it: it applies
    everything the leader has and its serializable image equals the leader's."""
    leader = cluster.leader()
    down, other = followers(cluster, leader)
    for k in range(50):
        cluster.put([leader, other][k % 2], f"pre/{k:03d}".encode(), b"before")
    cluster.kill(down, signal.SIGKILL)
    acked: dict[bytes, bytes] = {}
    for k in range(300):
        key = f"during/{k:04d}".encode()
        value = f"written while {cluster.nodes[down].id} was down #{k}".encode()
        cluster.put([leader, other][k % 2], key, value)
        acked[key] = value
    cluster.stub(leader).DeleteRange(
        rpc_pb2.DeleteRangeRequest(key=b"pre/", range_end=b"pre0"), timeout=5
    )
    cluster.start(down)
    leader = cluster.wait_ready(30)
    target = cluster.wait_converged()
    st_down, st_leader = cluster.status(down), cluster.status(leader)
    assert st_down.apply_offset >= target
    assert st_down.apply_offset == st_leader.apply_offset
    assert_offsets_ordered(st_down)
    assert cluster.range_all(down, serializable=True) == cluster.range_all(
        leader, serializable=True
    )
    got = cluster.range_all(down, serializable=True)
    assert not any(k.startswith(b"pre/") for k in got)
    assert {k: v[0] for k, v in got.items() if k.startswith(b"during/")} == acked
    assert_change_logs_equal(cluster, list(range(cluster.n)))


def test_whole_cluster_sigkill_and_restart_keeps_acknowledged_writes(cluster: Cluster) -> None:
    """Figure 2 (currentTerm, votedFor and log[] are persistent state) and §5.4.1 (the
    election restriction: a new leader holds every committed entry): SIGKILL every node at
    once, start them again: every acknowledged write is there, with its revision, the term
    moved forward, and new writes get higher revisions."""
    with Load(cluster, list(range(cluster.n)), b"crash/") as load:
        wait_until(lambda: load.acked_count() >= 300, 30, "300 writes acknowledged")
        term_before = max(cluster.status(i).term for i in range(cluster.n))
        for i in range(cluster.n):
            cluster.kill(i, signal.SIGKILL)
    assert load.acked
    for i in range(cluster.n):
        cluster.start(i)
    leader = cluster.wait_ready(30)
    for i in range(cluster.n):
        assert_holds(cluster, i, load.acked, b"crash/")
    image = assert_images_equal(cluster, list(range(cluster.n)), b"crash/")
    for key, rev in load.revisions.items():
        assert image[key][2] == rev, f"{key!r} acknowledged at {rev}, now {image[key][2]}"
    assert cluster.status(leader).term > term_before
    resp = cluster.put_retrying(leader, b"crash/after", b"x")
    assert resp.header.revision > max(load.revisions.values())
    for i in range(cluster.n):
        assert_offsets_ordered(cluster.status(i))
    assert_change_logs_equal(cluster, list(range(cluster.n)))


def _frames(data: bytes) -> list[tuple[int, int]]:
    """(position, length of body) of every frame of a record stream (see snapshots)."""
    header_bytes, frame = 36, struct.Struct("<II")
    assert data[:4] == b"MLRS", "not a record stream"
    out, pos = [], header_bytes
    while pos + frame.size <= len(data):
        length, _crc = frame.unpack_from(data, pos)
        if pos + frame.size + length > len(data):
            break
        out.append((pos, length))
        pos += frame.size + length
    return out


def test_corrupt_segment_in_the_middle_refuses_to_start(cluster: Cluster) -> None:
    """DESIGN.md §3: a corrupt change-log record in the middle is a hard error naming the
    file, never silent loss: flip one payload byte of a middle record of a stopped node's
    first segment; the node must exit non-zero and name the file, and leave it alone."""
    leader = cluster.leader()
    victim = followers(cluster, leader)[0]
    last = None
    for k in range(100):
        last = cluster.put(leader, f"corrupt/{k:03d}".encode(), b"v" * 64)
    assert last is not None
    cluster.wait_applied(last.header.revision, [victim])
    assert cluster.stop(victim) == 0, cluster.log_tail(victim)

    segments = sorted((cluster.data_dir(victim) / "log").glob("*.seg"))
    assert segments, "no change-log segment written"
    seg: Path = segments[0]
    data = bytearray(seg.read_bytes())
    frames = _frames(bytes(data))
    assert len(frames) >= 10, f"{seg} holds only {len(frames)} records"
    pos, length = frames[len(frames) // 2]
    body_prefix = 12  # u64 offset, u32 sub-index
    assert length > body_prefix
    flip_at = pos + 8 + body_prefix + (length - body_prefix) // 2
    data[flip_at] ^= 0xFF
    seg.write_bytes(bytes(data))

    log_before = len(cluster.log_text(victim))
    cluster.start(victim)
    rc = cluster.wait_exit(victim, 30)
    output = cluster.log_text(victim)[log_before:]
    assert rc != 0, f"the node started on a corrupt segment\n{output[-3000:]}"
    assert str(seg) in output, f"the error does not name {seg}\n{output[-3000:]}"
    named = [line for line in output.splitlines() if str(seg) in line]
    assert any(str(pos) in line or str(flip_at) in line for line in named), (
        f"the error does not name the position (frame at byte {pos}, flipped byte "
        f"{flip_at}): {named}"
    )
    assert seg.read_bytes() == bytes(data), "the corrupt segment was changed (repaired?)"

    # The other two still serve.
    survivors = [i for i in range(cluster.n) if i != victim]
    cluster.wait_ready(15, nodes=survivors)
    cluster.put_retrying(survivors[0], b"corrupt/after", b"ok")
    assert cluster.range_all(survivors[1], b"corrupt/after")[b"corrupt/after"][0] == b"ok"


def test_idle_cluster_applies_everything_it_commits(cluster: Cluster) -> None:
    """Figure 2, rules for all servers ("if commitIndex > lastApplied: increment
    lastApplied") and §5.2: after a leader change on an otherwise idle cluster, every
    node's apply_offset reaches its commit_offset (Admin.Status applied_lag goes to 0)."""
    leader = cluster.leader()
    cluster.put(leader, b"idle/a", b"1")
    cluster.stop(leader)
    survivors = cluster.running()
    cluster.wait_ready(15, nodes=survivors)

    def caught_up() -> bool:
        return all(cluster.status(i).applied_lag == 0 for i in survivors)

    wait_until(
        caught_up,
        10,
        lambda: (
            "applied_lag stays above 0 after a leader change: "
            + "; ".join(
                f"{st.id}: commit {st.commit_offset} apply {st.apply_offset}"
                for st in cluster.statuses(survivors).values()
            )
        ),
    )
