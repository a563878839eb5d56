"""``metaledger replicate redis`` end to end: a real redis-server as the source, the job's lease
and checkpoint in a real metaledger node, every write sent into a real ``metaledger broker``;
the oracle reads the topic back (PULL), replays it into a second redis-server and compares
``DEBUG DIGEST``; ``INFO replication`` on the source shows our acked offset equal to the
confirmed one. Then the failures: kill -9 of the replicator (it resumes with +CONTINUE from
its checkpoint), a standby that takes over from a killed or paused active, and a paused old
active that wakes up after losing its lease and sends nothing."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replicator.redis.replay import RedisTarget, Replayer
from replicator.status import read_statuses
from rmq.message import StoredMessage
from tests.harness import wait_until
from tests.integration.replicator.broker_env import QUEUES, Env, pull_all
from tests.integration.replicator.process import WorkerProcess
from tests.redis_harness import RedisServer

pytestmark = pytest.mark.integration

#: no 5 s wait before a diskless transfer starts; DEBUG DIGEST allowed (the oracle)
FAST = {"repl-diskless-sync-delay": "0", "enable-debug-command": "yes"}


class ReplicatorProcess(WorkerProcess):
    """One ``metaledger replicate redis`` worker, in its own session, stopped by its PID."""

    def __init__(
        self, env: Env, source: RedisServer, topic: str, job: str, worker: str, lease_ttl: int = 2
    ) -> None:
        self.env = env
        self.worker = worker
        args = [
            "redis", "--source", source.url, "--topic", topic, "--job", job, "--worker", worker,
            "--endpoints", ",".join(env.node.endpoints), "--lease-ttl", str(lease_ttl),
        ]  # fmt: skip
        super().__init__(env.root, f"replicator-{job}-{worker}.log", args)


class Oracle:
    """Reads every queue of the topic from where it left off and replays into ``target``.
    ``env``: the broker's environment, or the broker's address."""

    def __init__(self, env: Env | str, topic: str, target: RedisServer) -> None:
        self.addr = env if isinstance(env, str) else env.broker.addr
        self.topic = topic
        self.target = target
        self.replayer = Replayer(RedisTarget(target.client()))
        self.pulled = [0] * QUEUES

    def catch_up(self) -> int:
        new = 0
        for q in range(QUEUES):
            for m in pull_all(self.addr, self.topic, q, self.pulled[q]):
                self.pulled[q] += 1
                new += 1
                props = dict(m.properties)
                self.pulled_message(q, m)
                self.record(q, props)
                self.replayer.offer(q, m.body, props)
        return new

    def record(self, queue: int, properties: dict[str, str]) -> None:
        """Each message's properties as pulled (a subclass keeps them)."""

    def pulled_message(self, queue: int, message: StoredMessage) -> None:
        """Each message as pulled (who sent it, when it was stored: a subclass keeps it)."""

    def total(self) -> int:
        return sum(self.pulled)


def digest(server: RedisServer) -> bytes:
    return server.client().execute_command("DEBUG", "DIGEST")  # type: ignore[no-any-return]


def status(env: Env, job: str) -> dict[str, Any] | None:
    docs = read_statuses(env.client, "redis", job)
    return docs[0] if docs else None


def caught_up(env: Env, job: str, source: RedisServer) -> bool:
    """The job's confirmed offset is the source's offset, and the source shows it acked (by
    one of its replicas: a paused old worker stays listed until ``repl-timeout``)."""
    st = status(env, job)
    info = source.client().info("replication")
    offset = info["master_repl_offset"]
    acked = [
        int(v["offset"]) for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
    ]  # (a replica's INFO also has slave_repl_offset, slave_priority, …)
    return bool(
        st
        and st["replid"] == info["master_replid"]
        and st["confirmed_offset"] == offset
        and offset in acked
    )


def wait_replicated(
    env: Env, job: str, source: RedisServer, oracle: Oracle, timeout: float = 60
) -> None:
    wait_until(lambda: caught_up(env, job, source), timeout, f"job {job} confirmed and acked")

    def equal() -> bool:
        try:
            oracle.catch_up()
        except Exception as exc:  # an error reply of the target: name it
            raise AssertionError(f"replay failed: {exc!r}") from exc
        return digest(oracle.target) == digest(source)

    wait_until(equal, timeout, "the replayed topic equals the source (DEBUG DIGEST)")


def dataset(r: Any) -> None:
    """A bit of every type in three dbs, with expiries."""
    for db in (0, 3, 15):
        r.execute_command("SELECT", db)
        pipe = r.pipeline(transaction=False)
        for i in range(200):
            pipe.set(b"s%d" % i, os.urandom(8) + bytes([i % 256]))
        pipe.rpush(b"list", *[b"e%d" % i for i in range(300)])
        pipe.hset(b"hash", mapping={b"f%d" % i: b"v%d" % i for i in range(50)})
        pipe.sadd(b"set", *range(100))
        pipe.zadd(b"zset", {b"m%d" % i: i / 7 for i in range(80)})
        pipe.xadd(b"stream", {b"a": b"1"})
        pipe.set(b"expiring", b"x", px=3_600_000)
        pipe.execute()
    r.execute_command("SELECT", 0)


def writes(r: Any, tag: bytes, n: int = 100) -> None:
    for i in range(n):
        r.set(b"w:%s:%d" % (tag, i), b"%d" % i)
        r.incr(b"counter")
        if i % 10 == 0:
            p = r.pipeline(transaction=True)
            p.lpush(b"list", tag)
            p.hincrby(b"hash", b"n", 1)
            p.execute()
        if i % 25 == 0:
            r.rename(b"w:%s:%d" % (tag, i), b"renamed:%s:%d" % (tag, i))
            r.mset({b"m1:%s" % tag: b"1", b"m2:%s" % tag: b"2", b"m3:%s" % tag: b"3"})


@pytest.fixture
def redis_pair(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    with (
        RedisServer(tmp_path, FAST, name="source") as src,
        RedisServer(tmp_path, {"enable-debug-command": "yes"}, name="target") as dst,
    ):
        yield src, dst


def test_full_sync_and_stream_replay_equal_and_acked_is_confirmed(
    env: Env, redis_pair: tuple[RedisServer, RedisServer]
) -> None:
    source, target = redis_pair
    topic, job = env.topic("redis-e2e"), "e2e"
    r = source.client()
    dataset(r)
    rep = ReplicatorProcess(env, source, topic, job, "w1")
    try:
        oracle = Oracle(env, topic, target)
        wait_replicated(env, job, source, oracle)
        writes(r, b"a")
        r.execute_command("SELECT", 3)
        r.set(b"k", b"1")
        r.flushall()
        r.set(b"k", b"2")
        r.execute_command("SELECT", 0)
        r.swapdb(0, 15)
        r.move(b"s1", 4)
        r.set(b"big", os.urandom(6 * 1024 * 1024))  # longer than a message: fragments
        wait_replicated(env, job, source, oracle)
        st = status(env, job)
        assert st is not None and st["full_syncs"] == 1 and st["worker"] == "w1"
        assert st["checkpoint_offset"] is not None
        assert oracle.replayer.duplicates == 0
    finally:
        assert rep.stop() == 0, rep.log()[-3000:]
    assert "Traceback" not in rep.log()


def test_a_full_syncs_lag_is_its_age_and_a_stop_is_no_warning(
    env: Env, redis_pair: tuple[RedisServer, RedisServer]
) -> None:
    """During the first full sync, ``lag_s`` is the age of what is unconfirmed (the sync
    began moments ago), never the machine's uptime; Ctrl-C (SIGTERM here) ends the pass at
    INFO, with no internal class name in the log."""
    source, _ = redis_pair
    topic, job = env.topic("redis-lag"), "lag"
    source.client().execute_command("DEBUG", "POPULATE", 300_000, "lag", 200)
    started = time.monotonic()
    rep = ReplicatorProcess(env, source, topic, job, "w1")
    seen: list[float] = []

    def synced() -> bool:
        st = status(env, job)
        if st is not None:
            seen.append(st["lag_s"])
        return caught_up(env, job, source)

    try:
        wait_until(synced, 120, lambda: f"job {job} confirmed and acked: {rep.log()[-2000:]}")
        assert seen and max(seen) <= time.monotonic() - started, seen
    finally:
        assert rep.stop() == 0, rep.log()[-3000:]
    log = rep.log()
    assert "WARNING" not in log and "_Restart" not in log, log[-3000:]


def test_kill_9_resumes_with_continue_and_no_write_is_lost(
    env: Env, redis_pair: tuple[RedisServer, RedisServer]
) -> None:
    source, target = redis_pair
    topic, job = env.topic("redis-kill"), "kill"
    r = source.client()
    dataset(r)
    rep = ReplicatorProcess(env, source, topic, job, "w1")
    try:
        oracle = Oracle(env, topic, target)
        wait_replicated(env, job, source, oracle)
        for round_ in range(3):
            writes(r, b"before%d" % round_, 50)
            rep.stop(signal.SIGKILL)
            writes(r, b"between%d" % round_, 50)
            rep.start()
            wait_replicated(env, job, source, oracle)
            st = status(env, job)
            assert st is not None and st["full_syncs"] == 0, "a restart resumes with CONTINUE"
        assert "partial resync" in rep.log()
        # at-least-once: a restart resends at most what was in flight when it was killed
        assert oracle.replayer.duplicates <= oracle.total() // 2
    finally:
        rep.stop()


def test_standby_takes_over_and_a_paused_old_active_sends_nothing(
    env: Env, redis_pair: tuple[RedisServer, RedisServer]
) -> None:
    source, target = redis_pair
    topic, job = env.topic("redis-standby"), "standby"
    r = source.client()
    dataset(r)
    a = ReplicatorProcess(env, source, topic, job, "a")
    b = None
    try:
        oracle = Oracle(env, topic, target)
        wait_replicated(env, job, source, oracle)
        b = ReplicatorProcess(env, source, topic, job, "b")
        wait_until(lambda: "campaigns" in b.log(), 30, "b campaigns")
        st = status(env, job)
        assert st is not None and st["worker"] == "a"

        a.send(signal.SIGSTOP)  # paused: its lease runs out, b takes over
        writes(r, b"paused", 50)  # a's socket buffers some of these
        wait_until(lambda: (status(env, job) or {}).get("worker") == "b", 30, "b is active")
        wait_replicated(env, job, source, oracle)
        counts = oracle.total()

        a.send(signal.SIGCONT)  # wakes up past its lease's TTL
        wait_until(
            lambda: "pass 1 ended" in a.log(), 30, lambda: f"a notices it lost the job:\n{a.log()}"
        )
        assert oracle.catch_up() == 0, "the old active sent messages after losing its lease"
        assert oracle.total() == counts
        writes(r, b"after", 20)
        wait_replicated(env, job, source, oracle)
        assert (status(env, job) or {}).get("worker") == "b"

        b.stop(signal.SIGKILL)  # now a is the standby again
        writes(r, b"b-dead", 20)
        wait_until(lambda: (status(env, job) or {}).get("worker") == "a", 30, "a is active")
        wait_replicated(env, job, source, oracle)
    finally:
        a.stop()
        if b is not None:
            b.stop()


def test_a_standby_whose_lease_ran_out_while_it_waited_campaigns_again(
    env: Env, redis_pair: tuple[RedisServer, RedisServer]
) -> None:
    """A standby's campaign fails when its lease runs out while it waits (the key vanished
    with its lease: a paused standby here, a paused metaledger leader in
    tests/faults/test_replicator_redis.py); it campaigns again with a new lease and takes
    over when the active dies. It used to exit."""
    source, target = redis_pair
    topic, job = env.topic("redis-standby-lapse"), "standby-lapse"
    r = source.client()
    dataset(r)
    a = ReplicatorProcess(env, source, topic, job, "a")
    b = None

    def candidates() -> int:
        return env.client.get(f"replicators/redis/{job}/", prefix=True, count_only=True).count

    try:
        oracle = Oracle(env, topic, target)
        wait_replicated(env, job, source, oracle)
        b = ReplicatorProcess(env, source, topic, job, "b")
        wait_until(lambda: candidates() == 2, 30, "b campaigns")
        b.send(signal.SIGSTOP)
        wait_until(lambda: candidates() == 1, 30, "b's lease runs out while it waits")
        b.send(signal.SIGCONT)
        wait_until(lambda: candidates() == 2, 30, lambda: f"b campaigns again:\n{b.log()}")
        assert b.alive and "campaign: " in b.log(), b.log()

        a.stop(signal.SIGKILL)
        writes(r, b"b-takes-over", 20)
        wait_until(lambda: (status(env, job) or {}).get("worker") == "b", 30, "b is active")
        wait_replicated(env, job, source, oracle)
    finally:
        a.stop()
        if b is not None:
            b.stop()
