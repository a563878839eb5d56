"""Issue 18's stream semantics end to end (a real redis-server, the real ``metaledger replicate
redis`` process, a real node and broker; the DEBUG DIGEST oracle after each step):

- SELECT across reconnects: the replicator is killed (-9) while a client writes in db 5 and
  restarted; ``+CONTINUE`` resumes without a SELECT, so the events keep db 5 (the
  checkpoint's db);
- SWAPDB, MOVE, COPY … DB; a MULTI whose commands touch several dbs; EVAL (with a SELECT
  inside the script) and FCALL of a loaded function library; ``SET k 1; FLUSHALL; SET k 2``;
  RENAME from a key of one queue to a key of another.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from replicator.redis.checkpoint import CheckpointStore
from replicator.redis.routing import queue_of
from tests.harness import wait_until
from tests.integration.replicator.broker_env import QUEUES, Env
from tests.integration.replicator.redis.test_failures import Recorder, worker
from tests.integration.replicator.redis.test_replicate import (
    FAST,
    dataset,
    status,
    wait_replicated,
)
from tests.redis_harness import RedisServer

pytestmark = pytest.mark.integration

LIBRARY = """#!lua name=ledgerlib
redis.register_function('bump', function(keys, args)
  redis.call('INCRBY', keys[1], args[1])
  redis.call('HSET', keys[2], 'last', args[1])
  return redis.call('GET', keys[1])
end)
"""

CROSS_DB_SCRIPT = """
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SELECT', 9)
redis.call('SET', KEYS[1], ARGV[1] .. '-in-9')
redis.call('LPUSH', KEYS[2], ARGV[1])
return 1
"""


def other_queue_key(key: bytes) -> bytes:
    """A key routed to another queue than ``key``."""
    q = queue_of(key, QUEUES)
    return next(k for i in range(100) if queue_of(k := b"other:%d" % i, QUEUES) != q)


def test_stream_semantics_end_to_end(env: Env, tmp_path: Path) -> None:
    topic, job = env.topic("redis-semantics"), "semantics"
    with (
        RedisServer(tmp_path, {**FAST, "repl-backlog-size": "64mb"}, name="source") as source,
        RedisServer(tmp_path, {"enable-debug-command": "yes"}, name="target") as target,
    ):
        r = source.client()
        dataset(r)
        rep = worker(env, source, topic, job)
        try:
            oracle = Recorder(env, topic, target)
            wait_replicated(env, job, source, oracle)

            # ---- SELECT across reconnects: a writer in db 5 the whole time ----
            db5 = source.client(db=5)
            stop = threading.Event()
            written = [0]

            def writer() -> None:
                while not stop.is_set():
                    i = written[0]
                    db5.set(b"db5:%d" % i, b"%d" % i)
                    db5.hincrby(b"db5:hash", b"n", 1)
                    written[0] += 1
                    stop.wait(0.002)  # a steady trickle, not a flood: the backlog must hold it

            t = threading.Thread(target=writer, daemon=True)
            t.start()
            try:
                wait_until(lambda: written[0] > 200, 30, "the writer writes in db 5")
                wait_until(
                    lambda: (CheckpointStore(env.client, job).load() or _NoCp).db == 5,
                    30,
                    "a checkpoint in db 5",
                )
                rep.stop(signal.SIGKILL)
                mark = written[0]
                wait_until(lambda: written[0] > mark + 200, 30, "more writes while it is down")
                rep.start()
                wait_until(
                    lambda: "partial resync" in rep.log(), 30, "the restart resumes (CONTINUE)"
                )
                wait_until(lambda: written[0] > mark + 400, 30, "writes after the restart")
            finally:
                stop.set()
                t.join(10)
            wait_replicated(env, job, source, oracle)
            st = status(env, job)
            assert st is not None and st["full_syncs"] == 0, "CONTINUE, not a full sync"
            resumed = [p for _, p in oracle.seen if p.get("REDIS_KIND") == "command"]
            assert any(p["REDIS_DB"] == "5" for p in resumed)
            assert source.client(db=0).exists(b"db5:1") == 0, "db 5's keys stay in db 5"

            # ---- cross-db commands ----
            r.execute_command("SELECT", 0)
            r.set(b"mover", b"1")
            r.move(b"mover", 4)
            r.set(b"copied", b"c")
            r.execute_command("COPY", b"copied", b"copied2", "DB", 6)
            r.execute_command("COPY", b"copied", b"copied", "DB", 7, "REPLACE")
            r.swapdb(3, 15)
            r.swapdb(0, 4)
            p = r.pipeline(transaction=True)
            p.execute_command("SELECT", 2)
            p.set(b"tx:a", b"in-2")
            p.execute_command("SELECT", 11)
            p.set(b"tx:a", b"in-11")
            p.move(b"tx:a", 12)
            p.execute()
            r.execute_command("SELECT", 0)
            wait_replicated(env, job, source, oracle)

            # ---- scripts and functions ----
            r.eval(CROSS_DB_SCRIPT, 2, b"script:k", b"script:list", b"v1")
            r.execute_command("FUNCTION", "LOAD", LIBRARY)
            r.execute_command("FCALL", "bump", 2, b"fn:counter", b"fn:hash", 5)
            r.execute_command("FCALL", "bump", 2, b"fn:counter", b"fn:hash", 7)
            wait_replicated(env, job, source, oracle)
            assert target.client().execute_command("FUNCTION", "LIST"), "the library arrived"

            # ---- keyless and multi-key ordering ----
            r.set(b"k", b"1")
            r.flushall()
            r.set(b"k", b"2")
            a = b"rename:src"
            b = other_queue_key(a)
            r.set(a, b"moved")
            r.rename(a, b)
            r.set(a, b"again")
            r.rename(b, a)
            wait_replicated(env, job, source, oracle)
            assert target.client().get(b"k") == b"2"
            assert target.client().get(a) == b"moved"
            st = status(env, job)
            assert st is not None and st["full_syncs"] == 0 and st["passes"] == 1
        finally:
            rep.stop()


class _NoCp:
    db = -1
