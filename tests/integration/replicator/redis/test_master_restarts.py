"""Issue 18: the source restarted or replaced under the real ``metaledger replicate redis``
process (a real redis-server, node and broker; the DEBUG DIGEST oracle after each step):

- the master restarted after ``SHUTDOWN SAVE`` (Redis 7 keeps replid and offset in the RDB:
  +CONTINUE with a new replid, stored at once) and after kill -9 (from an older dump, then
  from none: its offset behind our checkpoint, a full sync, a new generation, the commit
  accepted);
- the same restart with messages in flight (the broker stopped): the restarted master's
  backlog is empty, so a full sync; the late-stored messages are applied once;
- a replica we follow promoted (REPLICAOF NO ONE) with messages in flight: +CONTINUE with a
  new replid resends the unconfirmed range, which keeps its first replid, so a consumer
  applies it once.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.harness import wait_until
from tests.integration.replicator.broker_env import QUEUES, Env
from tests.integration.replicator.redis.test_failures import Recorder, checkpoint, start, worker
from tests.integration.replicator.redis.test_replicate import (
    FAST,
    dataset,
    digest,
    status,
    wait_replicated,
    writes,
)
from tests.redis_harness import RedisServer

pytestmark = pytest.mark.integration


def test_master_restarts_after_shutdown_save_and_after_kill_9(env: Env, tmp_path: Path) -> None:
    source, target, topic, job = start(env, tmp_path, {}, "master-restart")
    rep = None
    try:
        r = source.client()
        dataset(r)
        rep = worker(env, source, topic, job)
        oracle = Recorder(env, topic, target)
        wait_replicated(env, job, source, oracle)
        writes(r, b"a", 50)
        wait_replicated(env, job, source, oracle)
        first = checkpoint(env, job)
        assert first is not None

        # SHUTDOWN SAVE: Redis 7 keeps replid and offset in the RDB; we resume with CONTINUE
        source.restart(save=True)
        r = source.client()
        writes(r, b"b", 50)
        wait_replicated(env, job, source, oracle)
        st = status(env, job)
        assert st is not None and st["full_syncs"] == 0 and st["passes"] >= 2, st
        assert "partial resync" in rep.log()
        saved = checkpoint(env, job)
        assert saved is not None and saved.generation == first.generation
        assert saved.replid == r.info("replication")["master_replid"] != first.replid
        assert oracle.tags()["SNAPSHOT_BEGIN"] == QUEUES

        # kill -9 with no save: the master comes back from the older dump, its offset
        # behind our checkpoint (same replid): a full sync, a new generation
        writes(r, b"c", 200)
        wait_replicated(env, job, source, oracle)
        before = checkpoint(env, job)
        assert before is not None
        source.kill()
        source.start()
        r = source.client()
        info = r.info("replication")
        assert info["master_repl_offset"] < before.offset, (info, before)
        writes(r, b"d", 50)
        wait_replicated(env, job, source, oracle)
        st = status(env, job)
        assert st is not None and st["full_syncs"] == 1, st
        after = checkpoint(env, job)
        assert after is not None and after.generation == before.generation + 1, (before, after)
        assert after.position > before.position and after.offset < before.offset

        # kill -9 again without any dump: a new replid, offset from 0
        (source.dir / "dump.rdb").unlink()
        writes(r, b"e", 200)
        wait_replicated(env, job, source, oracle)
        before = checkpoint(env, job)
        assert before is not None
        source.kill()
        source.start()
        r = source.client()
        assert r.info("replication")["master_replid"] != before.replid
        dataset(r)
        wait_replicated(env, job, source, oracle)
        after = checkpoint(env, job)
        assert after is not None and after.generation == before.generation + 1
        assert after.replid != before.replid
    finally:
        if rep is not None:
            rep.stop()
        source.close()
        target.close()


def test_master_restart_after_shutdown_save_with_messages_in_flight(
    env: Env, tmp_path: Path
) -> None:
    """The master restarts (SHUTDOWN SAVE) while what we sent is not confirmed yet (the broker
    stopped): our checkpoint is behind the saved offset, and the restarted master's backlog is
    empty, so it cannot resend that range: a full sync, a new generation. The broker stores
    the in-flight writes later, before SNAPSHOT_BEGIN: applied once (INCR, LPUSH are not
    idempotent), then replaced by the snapshot."""
    source, target, topic, job = start(env, tmp_path, {}, "restart-in-flight")
    rep = None
    broker = env.broker.proc
    assert broker is not None
    try:
        r = source.client()
        dataset(r)
        rep = worker(env, source, topic, job)
        oracle = Recorder(env, topic, target)
        wait_replicated(env, job, source, oracle)
        before = checkpoint(env, job)
        assert before is not None

        broker.send_signal(signal.SIGSTOP)  # for a few seconds: its route stays registered
        try:
            writes(r, b"in-flight", 50)
            offset = r.info("replication")["master_repl_offset"]
            wait_until(
                lambda: (status(env, job) or {}).get("parsed_offset", 0) >= offset,
                20,
                "the replicator read (and sent) the writes",
            )
            source.restart(save=True)
            wait_until(
                lambda: rep.log().count("full sync:") == 2, 20, "a full sync from the new master"
            )
        finally:
            broker.send_signal(signal.SIGCONT)
        r = source.client()
        writes(r, b"after", 20)
        wait_replicated(env, job, source, oracle)
        cp = checkpoint(env, job)
        assert cp is not None and cp.generation == before.generation + 1, (before, cp)
        assert cp.replid == r.info("replication")["master_replid"] != before.replid
        assert oracle.tags()["SNAPSHOT_BEGIN"] == 2 * QUEUES
    finally:
        broker.send_signal(signal.SIGCONT)
        if rep is not None:
            rep.stop()
        source.close()
        target.close()


def test_promoted_replica_continue_with_new_replid_and_messages_in_flight(
    env: Env, tmp_path: Path
) -> None:
    """PSYNC2: the replicator follows a Redis replica; while what it sent is unconfirmed (the
    broker stopped) that replica is promoted (REPLICAOF NO ONE: a new replid, the old one as
    replid2, its backlog kept), drops its sub-replicas, and answers our PSYNC with
    ``+CONTINUE <new replid>``, resending the unconfirmed range. The broker stores the first
    copies late; a consumer must apply the range once."""
    master = RedisServer(tmp_path, FAST, name="master")
    source = RedisServer(
        tmp_path, {**FAST, "replicaof": f"127.0.0.1 {master.port}"}, name="replica"
    )
    target = RedisServer(tmp_path, {"enable-debug-command": "yes"}, name="target")
    topic, job = env.topic("redis-promoted"), "promoted"
    rep = None
    broker = env.broker.proc
    assert broker is not None
    try:
        m = master.client()
        dataset(m)
        wait_until(
            lambda: source.client().info("replication")["master_link_status"] == "up",
            30,
            "the replica is in sync",
        )
        rep = worker(env, source, topic, job)
        oracle = Recorder(env, topic, target)
        wait_until(lambda: digest(source) == digest(master), 30, "replica equal")
        wait_replicated(env, job, source, oracle)

        broker.send_signal(signal.SIGSTOP)
        try:
            writes(m, b"in-flight", 50)
            offset = m.info("replication")["master_repl_offset"]
            wait_until(
                lambda: (status(env, job) or {}).get("parsed_offset", 0) >= offset,
                10,
                "the replicator read (and sent) the writes",
            )
            source.client().execute_command("REPLICAOF", "NO", "ONE")
            wait_until(lambda: "+CONTINUE" in rep.log(), 10, "the replicator continues")
        finally:
            broker.send_signal(signal.SIGCONT)
        r = source.client()
        writes(r, b"after", 20)
        wait_replicated(env, job, source, oracle)
        st = status(env, job)
        assert st is not None and st["full_syncs"] == 0
        assert oracle.replayer.duplicates > 0, "the unconfirmed range came twice, applied once"
        cp = checkpoint(env, job)
        old_replid = m.info("replication")["master_replid"]
        assert cp is not None and cp.replid == r.info("replication")["master_replid"]
        assert cp.history == old_replid, "messages keep the history's first name"
    finally:
        broker.send_signal(signal.SIGCONT)
        if rep is not None:
            rep.stop()
        source.close()
        master.close()
        target.close()
