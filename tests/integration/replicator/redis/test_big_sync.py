"""A 1 GB dataset under 5k writes/s: the full sync completes, the link survives, and the
replicator's memory stays bounded (the RDB is parsed as a stream, the backlog of events goes
to the spill file, values come out in parts), however large the dataset.

The dataset is made by ``DEBUG POPULATE`` (1M string keys of 1000 bytes); a paced writer
keeps writing 5k SETs a second through the whole sync. Checked: the master did one full sync
(``sync_full``) and the replicator one pass; its peak RSS (sampled from /proc) stays under a
fixed bound far below the dataset; every key of the dataset and every write reached the
broker (the queues' max offsets count at least that many messages), and the confirmed offset
is the master's."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from rmq.connection import RemotingConnection
from tests.harness import wait_until
from tests.integration.replicator.broker_env import QUEUES, Env
from tests.integration.replicator.redis.test_replicate import (
    FAST,
    ReplicatorProcess,
    caught_up,
    status,
)
from tests.redis_harness import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = 1_000_000
VALUE_BYTES = 1000
RATE = 5000  # writes/s during the sync
#: the replicator's peak resident memory may not pass this (the dataset is ~1 GB)
RSS_BOUND_MB = 400


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def messages_in(env: Env, topic: str) -> int:
    """The sum of the topic's queues' max offsets (GET_MAX_OFFSET): messages stored."""

    async def go() -> int:
        host, _, port = env.broker.addr.rpartition(":")
        c = await RemotingConnection.connect(host, int(port))
        try:
            total = 0
            for q in range(QUEUES):
                r = await c.request(30, {"topic": topic, "queueId": q})
                assert r.code == 0, (r.code, r.remark)
                total += int(r.ext_fields["offset"])
            return total
        finally:
            await c.close()

    return asyncio.run(go())


def test_a_1_gb_full_sync_under_5k_writes_per_second(env: Env, tmp_path: Path) -> None:
    topic, job = env.topic("redis-big"), "big"
    # DEBUG POPULATE's values compress to almost nothing: without compression the RDB the
    # master streams is the full ~1 GB
    config = {**FAST, "repl-timeout": "10", "rdbcompression": "no"}
    with RedisServer(tmp_path, config, name="source") as source:
        r = source.client(socket_timeout=120)
        r.execute_command("DEBUG", "POPULATE", KEYS, "big", VALUE_BYTES)
        assert r.dbsize() == KEYS
        written = 0
        stop = threading.Event()

        def writer() -> None:
            nonlocal written
            w = source.client()
            t0 = time.monotonic()
            while not stop.is_set() and time.monotonic() - t0 < 600:  # bounded
                due = int((time.monotonic() - t0) * RATE)
                if due > written:
                    n = min(due - written, 500)
                    pipe = w.pipeline(transaction=False)
                    for i in range(written, written + n):
                        pipe.set(b"w:%d" % i, b"%d" % i)
                    pipe.execute()
                    written += n
                else:
                    stop.wait(0.01)

        rep = ReplicatorProcess(env, source, topic, job, "w1", lease_ttl=10)
        peak = 0.0
        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        try:
            assert rep.proc is not None

            def synced() -> bool:
                nonlocal peak
                peak = max(peak, rss_mb(rep.proc.pid))  # type: ignore[union-attr]
                st = status(env, job)
                return bool(st and st["phase"] == "command stream" and st["rdb_bytes"] > 0)

            wait_until(synced, 900, lambda: f"the full sync completes:\n{rep.log()[-3000:]}")
            stop.set()
            thread.join(30)

            def done() -> bool:
                nonlocal peak
                peak = max(peak, rss_mb(rep.proc.pid))  # type: ignore[union-attr]
                return caught_up(env, job, source)

            wait_until(done, 600, lambda: f"confirmed and acked:\n{rep.log()[-3000:]}")
            st = status(env, job)
            assert st is not None
            assert st["rdb_bytes"] > 1_000_000_000, st["rdb_bytes"]
            assert st["full_syncs"] == 1 and st["passes"] == 1, "the link survived"
            assert source.client().info("stats")["sync_full"] == 1
            assert written >= RATE * 5, "the writer ran during the sync"
            # every key of the dataset and every write is in the topic (markers and copies
            # add a few, a resend would add more: at least, not exactly)
            assert messages_in(env, topic) >= KEYS + written
            assert peak < RSS_BOUND_MB, f"replicator peak RSS {peak:.0f} MB"
            print(
                f"{st['rdb_bytes'] / 1e9:.2f} GB sync: {written} writes during it,"
                f" replicator peak RSS {peak:.0f} MB"
            )
        finally:
            stop.set()
            rep.stop()
