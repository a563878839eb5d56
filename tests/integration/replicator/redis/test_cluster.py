"""A Redis Cluster source (issue 18, "What must hold"): 3 masters and 3 replicas on loopback,
one ``metaledger replicate redis --cluster-shard SLOT`` job per shard, each into its own topic
of a real broker. A failover of one shard, graceful (``CLUSTER FAILOVER`` on its replica) or
by kill -9 of its master, while a client keeps writing across all slots: the shard's job
follows the promoted replica with PSYNC2 (``+CONTINUE``: the replica kept the old replid as
its replid2), with no full sync, and the oracle holds per shard.

One topic per shard: a shard's stream is one history (replid, offsets, SELECTs, MULTI/EXEC,
its own FLUSHALLs), and the replay's dedupe and barriers (replay.py) are per history; a
consumer of the whole cluster reads the shards' topics, as a cluster client reads the masters.

The oracle, per shard: replay the shard's topic into a standalone redis-server and compare
``DEBUG DIGEST`` with the shard's *current* master (a cluster node's digest covers its own
keys only), after ``INFO replication`` on that master shows our acked offset at its offset.
Every write the cluster client got an OK for is then checked key by key in the replay of the
shard that serves its slot. Redis replication is asynchronous: a replica behind the
replicator when its master dies has a history the replicator's offset is not in (a full sync
is then right), so the kill -9 comes when the writer holds and the replica has caught up; the
writer goes on through the failover."""

from __future__ import annotations

import signal
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import ExponentialBackoff
from redis.crc import key_slot
from redis.retry import Retry

from tests.harness import wait_until
from tests.integration.replicator.broker_env import Env
from tests.integration.replicator.redis.test_replicate import (
    FAST,
    Oracle,
    ReplicatorProcess,
    digest,
    status,
    wait_replicated,
)
from tests.redis_cluster_harness import RedisCluster, Shard
from tests.redis_harness import RedisServer

pytestmark = pytest.mark.integration


class ShardReplicator(ReplicatorProcess):
    """A worker of one shard's job: the cluster's seed node plus ``--cluster-shard SLOT``."""

    def __init__(self, env: Env, seed: RedisServer, topic: str, job: str, slot: int) -> None:
        self.slot = slot  # before super().__init__, which starts the process
        super().__init__(env, seed, topic, job, "w1")

    def start(self) -> None:
        if "--cluster-shard" not in self.args:
            self.args += ["--cluster-shard", str(self.slot)]
        super().start()


class Writer:
    """Writes ``w:<n> = n`` (and INCRs counters) across all slots from a thread until stopped, about ``rate`` a
    second (the machine is shared: a flat-out writer outruns a 1 MB backlog); remembers what
    the cluster acknowledged (a write that failed during a failover is not retried)."""

    def __init__(self, cluster: RedisCluster, rate: float = 300) -> None:
        self.pause = 1 / rate
        self.rc = cluster.client(retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 10))
        self.acked: dict[bytes, bytes] = {}
        self.failed = 0
        self._stop = threading.Event()
        self._go = threading.Event()
        self._go.set()
        self._writing = threading.Lock()  # held for one write: pause() waits it out
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            if not self._go.wait(0.1):
                continue
            key, value = b"w:%d" % n, b"%d" % n
            n += 1
            try:
                with self._writing:
                    self.rc.set(key, value)
                    self.acked[key] = value
                    if n % 4 == 0:  # not idempotent: a resend applied twice shows in the digest
                        self.rc.incr(b"c:%d" % (n % 16))
            except (redis.RedisError, OSError):
                self.failed += 1
                self._stop.wait(0.05)
                continue
            self._stop.wait(self.pause)

    def hold(self) -> None:
        """Stops writing; returns once no write is in flight."""
        self._go.clear()
        with self._writing:
            pass

    def resume(self) -> None:
        self._go.set()

    def wait_more(self, count: int, timeout: float = 30) -> None:
        goal = len(self.acked) + count
        wait_until(lambda: len(self.acked) >= goal, timeout, f"{count} more writes acked")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.rc.close()


class Job:
    def __init__(
        self, env: Env, cluster: RedisCluster, shard: Shard, root: Path, prefix: str
    ) -> None:
        self.slot = shard.slot
        self.cluster = cluster
        self.name = f"{prefix}-{shard.slot}"  # a job and a topic of their own per test
        self.topic = env.topic(f"redis-{prefix}-{shard.slot}")
        self.target = RedisServer(root, {"enable-debug-command": "yes"}, name=f"t{shard.slot}")
        self.oracle = Oracle(env, self.topic, self.target)
        self.proc = ShardReplicator(env, cluster.nodes[0], self.topic, self.name, shard.slot)

    def master(self) -> RedisServer:
        return self.cluster.shard_of(self.slot).master

    def close(self) -> None:
        try:
            code = self.proc.stop()
            assert code in (0, None), self.proc.log()[-3000:]
        finally:
            self.target.close()


def seed_data(rc: redis.RedisCluster) -> None:
    for i in range(300):
        rc.set(b"s%d" % i, b"v%d" % i)
        if i % 10 == 0:
            rc.rpush(b"l%d" % i, *[b"e%d" % j for j in range(20)])
            rc.hset(b"h%d" % i, mapping={b"f%d" % j: b"%d" % j for j in range(10)})
            rc.zadd(b"z%d" % i, {b"m%d" % j: j for j in range(10)})
    # one slot: a transaction and a multi-key command in the same shard
    p = rc.pipeline(transaction=True)
    p.set(b"{tx}a", b"1")
    p.incr(b"{tx}n")
    p.execute()
    rc.mset_nonatomic({b"{m}1": b"1", b"{m}2": b"2"})


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    with RedisCluster(tmp_path, masters=3, replicas=1, config=FAST) as c:
        yield c


@pytest.fixture
def jobs(
    env: Env, cluster: RedisCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[list[Job]]:
    prefix = f"c{zlib.crc32(request.node.name.encode()):08x}"
    out: list[Job] = []
    try:
        for shard in cluster.shards():
            out.append(Job(env, cluster, shard, tmp_path, prefix))
        yield out
    finally:
        for job in out:
            job.close()


def replicated(env: Env, jobs: list[Job]) -> None:
    for job in jobs:
        wait_replicated(env, job.name, job.master(), job.oracle)


def check_acked(jobs: list[Job], acked: dict[bytes, bytes], lost_ok: bool = False) -> int:
    """Every acknowledged write is in the replay of the shard serving its slot (``lost_ok``:
    unless the cluster itself lost it). Returns how many the cluster lost."""
    firsts = sorted(j.slot for j in jobs)
    by_slot = {j.slot: j for j in jobs}
    lost = 0
    for key, value in acked.items():
        first = max(s for s in firsts if s <= key_slot(key))
        job = by_slot[first]
        got = job.target.client().get(key)
        if got != value and lost_ok and job.master().client().get(key) is None:
            lost += 1
            assert got is None, f"{key!r}: the cluster lost it, the replay has {got!r}"
            continue
        assert got == value, f"{key!r} (slot {key_slot(key)}): {got!r} != {value!r}"
    return lost


def caught_up(master: RedisServer, replica: RedisServer) -> bool:
    offset = master.client().info("replication")["master_repl_offset"]
    return bool(replica.client().info("replication")["slave_repl_offset"] >= offset)


def test_one_job_per_shard_follows_a_graceful_failover_with_continue(
    env: Env, cluster: RedisCluster, jobs: list[Job]
) -> None:
    rc = cluster.client()
    seed_data(rc)
    replicated(env, jobs)
    for job in jobs:
        st = status(env, job.name)
        assert st is not None and st["full_syncs"] == 1 and st["source"] == job.master().url

    moved, others = jobs[1], [jobs[0], jobs[2]]
    old = cluster.shard_of(moved.slot)
    writer = Writer(cluster)
    try:
        writer.wait_more(200)
        cluster.failover(old.replicas[0])  # graceful: the replica catches up, then takes over
        assert moved.master().port == old.replicas[0].port
        writer.wait_more(200)
    finally:
        writer.stop()
    replicated(env, jobs)

    st = status(env, moved.name)
    assert st is not None
    assert st["source"] == old.replicas[0].url, "the job follows the promoted replica"
    assert st["full_syncs"] == 0 and st["passes"] >= 2, "PSYNC2: +CONTINUE, no full sync"
    assert st["replid"] == old.replicas[0].client().info("replication")["master_replid"]
    log = moved.proc.log()
    assert log.count("full sync: replid") == 1 and "partial resync: +CONTINUE" in log, log[-3000:]
    assert f"master 127.0.0.1:{old.replicas[0].port}" in log
    for job in others:
        st = status(env, job.name)
        assert st is not None and st["passes"] == 1, "the other shards' jobs were not disturbed"
    assert check_acked(jobs, writer.acked) == 0
    assert all(digest(j.target) == digest(j.master()) for j in jobs)
    assert sum(1 for k in writer.acked if key_slot(k) >= moved.slot) > 0


def test_kill_9_of_a_master_the_job_follows_the_promoted_replica(
    env: Env, cluster: RedisCluster, jobs: list[Job]
) -> None:
    rc = cluster.client()
    seed_data(rc)
    replicated(env, jobs)
    moved = jobs[2]
    old = cluster.shard_of(moved.slot)
    promoted = old.replicas[0]
    writer = Writer(cluster)
    try:
        writer.wait_more(200)
        # Redis replication is asynchronous: a replica behind the replicator at the kill has
        # a history the replicator's offset is not in, and a full sync is then the only right
        # answer. So the writer holds until the replica has the master's offset, and the kill
        # comes with nothing in flight; it writes on through the failover.
        writer.hold()
        wait_until(
            lambda: caught_up(old.master, promoted), 30,
            lambda: f"{promoted.addr} caught up with {old.master.addr}",
        )  # fmt: skip
        cluster.kill(old.master, signal.SIGKILL)
        writer.resume()
        # the replica is promoted after cluster-node-timeout (1 s) and an election
        wait_until(
            lambda: promoted.client().info("replication")["role"] == "master",
            60, lambda: f"{promoted.addr} promoted:\n{cluster.logs()}",
        )  # fmt: skip
        cluster.wait_ok(60)
        writer.wait_more(200, timeout=60)
    finally:
        writer.stop()
    replicated(env, jobs)

    st = status(env, moved.name)
    assert st is not None and st["source"] == promoted.url
    assert st["replid"] == promoted.client().info("replication")["master_replid"]
    log = moved.proc.log()
    # the replicator is no further than the cluster's own replica, so its checkpoint lies in
    # the promoted replica's history: +CONTINUE (replid2), never a full sync
    assert st["full_syncs"] == 0 and "partial resync: +CONTINUE" in log, log[-3000:]
    assert log.count("full sync: replid") == 1
    lost = check_acked(jobs, writer.acked, lost_ok=True)
    assert lost == 0, f"{lost} acknowledged writes lost (the kill came with none in flight)"
    assert all(digest(j.target) == digest(j.master()) for j in jobs)


def test_a_paused_master_is_left_for_the_promoted_replica_within_seconds(
    env: Env, cluster: RedisCluster, jobs: list[Job]
) -> None:
    """SIGSTOP of a master (what a partition looks like from its replicas): the link stays
    open and silent, so only the pass's check that its node is still the shard's master
    moves the job to the promoted replica (the read timeout would take 60 s)."""
    rc = cluster.client()
    seed_data(rc)
    replicated(env, jobs)
    moved = jobs[0]
    old = cluster.shard_of(moved.slot)
    promoted = old.replicas[0]
    writer = Writer(cluster)
    try:
        writer.wait_more(100)
        cluster.pause(old.master)
        try:
            wait_until(
                lambda: promoted.client().info("replication")["role"] == "master",
                60, lambda: f"{promoted.addr} promoted:\n{cluster.logs()}",
            )  # fmt: skip
            # well within the link's 60 s read timeout, while the writes go on
            wait_until(
                lambda: (status(env, moved.name) or {}).get("source") == promoted.url,
                30, lambda: f"the job follows {promoted.url}:\n{moved.proc.log()[-3000:]}",
            )  # fmt: skip
            writer.wait_more(100, timeout=60)
        finally:
            cluster.resume(old.master)
        cluster.wait_ok(60)  # the old master rejoins as a replica of the new one
        writer.wait_more(100)
    finally:
        writer.stop()
    replicated(env, jobs)
    st = status(env, moved.name)
    assert st is not None and st["source"] == promoted.url
    log = moved.proc.log()
    assert "the shard's master is now" in log, log[-3000:]
    assert st["full_syncs"] == 0 and log.count("full sync: replid") == 1, log[-3000:]
    assert check_acked(jobs, writer.acked, lost_ok=True) <= 5
    assert all(digest(j.target) == digest(j.master()) for j in jobs)


def test_writes_the_promoted_replica_never_got_a_full_sync_of_the_new_history(
    env: Env, cluster: RedisCluster, jobs: list[Job]
) -> None:
    """The replica is paused while its master takes 10 MB of writes, which our replicator
    confirms; then kill -9 of the master and the replica, resumed, is promoted without them
    (Redis replication is asynchronous: the cluster lost acknowledged writes). The checkpoint
    is past the new master's history, so PSYNC gets +FULLRESYNC: a new generation framed by
    SNAPSHOT markers, and the replay equals the new master again (the lost writes were in the
    topic before the snapshot, and are gone from the replay after it)."""
    rc = cluster.client()
    seed_data(rc)
    replicated(env, jobs)
    moved = jobs[1]
    old = cluster.shard_of(moved.slot)
    replica = old.replicas[0]
    big = b"x" * 256 * 1024
    doomed = [k for k in (b"big:%d" % i for i in range(2000)) if old_serves(jobs, moved, k)][:40]
    cluster.pause(replica)
    try:
        m = old.master.client()
        for k in doomed:
            m.set(k, big)
        wait_replicated(env, moved.name, old.master, moved.oracle)  # all confirmed by us
        cluster.kill(old.master, signal.SIGKILL)
    finally:
        cluster.resume(replica)
    wait_until(
        lambda: replica.client().info("replication")["role"] == "master",
        60, lambda: f"{replica.addr} promoted:\n{cluster.logs()}",
    )  # fmt: skip
    cluster.wait_ok(60)
    got = replica.client().info("replication")["second_repl_offset"]
    rc.set(b"after", b"1")
    replicated(env, jobs)

    st = status(env, moved.name)
    assert st is not None and st["source"] == replica.url
    log = moved.proc.log()
    assert st["full_syncs"] == 1 and log.count("full sync: replid") == 2, log[-3000:]
    lost = [k for k in doomed if replica.client().exists(k) == 0]
    assert lost, f"the replica got every write (second_repl_offset {got}): nothing was lost"
    assert all(moved.target.client().exists(k) == 0 for k in lost)
    assert all(digest(j.target) == digest(j.master()) for j in jobs)


def old_serves(jobs: list[Job], job: Job, key: bytes) -> bool:
    firsts = sorted(j.slot for j in jobs)
    return max(s for s in firsts if s <= key_slot(key)) == job.slot
