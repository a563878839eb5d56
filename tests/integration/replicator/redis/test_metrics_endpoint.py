"""``metaledger replicate redis --listen-metrics``: a real worker (real redis-server source, the
``env`` fixture's node and broker) serves Prometheus text whose values follow the job: a full
sync's RDB bytes and total (a disk transfer, ``--no-capa-eof``), messages sent and confirmed,
offsets and lag moving with writes; after a restart a partial resync instead of a full sync.
The full sync's progress line is in the worker's log."""

from __future__ import annotations

import signal
import socket
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import wait_until
from tests.integration.replicator.broker_env import Env
from tests.integration.replicator.redis.test_replicate import FAST, ReplicatorProcess, dataset
from tests.redis_harness import RedisServer

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MetricsReplicator(ReplicatorProcess):
    """A worker that serves metrics on ``self.port`` and asks for disk-style transfers."""

    port = 0

    def start(self) -> None:
        if "--listen-metrics" not in self.args:
            self.port = free_port()
            self.args += ["--listen-metrics", f"127.0.0.1:{self.port}", "--no-capa-eof"]
        super().start()

    def scrape(self) -> dict[str, float]:
        """Every sample of the job, by name (``metaledger_redis_`` dropped)."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.startswith("metaledger_redis_") and s.labels.get("job") == "metrics":
                    out[s.name.removeprefix("metaledger_redis_")] = s.value
        return out

    def scrape_if(self, cond: Callable[[dict[str, float]], bool]) -> dict[str, float] | None:
        samples = self.scrape()
        return samples if cond(samples) else None


def test_metrics_follow_the_job(env: Env, tmp_path: Path) -> None:
    with RedisServer(tmp_path, FAST, name="source") as source:
        r = source.client()
        dataset(r)
        topic = env.topic("redis-metrics")
        rep = MetricsReplicator(env, source, topic, "metrics", "w1")
        try:
            m = wait_until(
                lambda: rep.scrape_if(
                    lambda s: (
                        s.get("active") == 1
                        and s.get("full_sync_in_progress") == 0
                        and s.get("rdb_bytes", 0) > 0
                        and s.get("lag_bytes") == 0
                    )
                ),
                60,
                lambda: f"the first full sync done, seen in /metrics\n{rep.log()[-2000:]}",
            )
            assert m["full_syncs_total"] == 1 and m["passes_total"] == 1
            assert m["partial_resyncs_total"] == 0
            # a disk transfer says its size: all of it arrived
            assert m["rdb_total_bytes"] == m["rdb_bytes"] == m["rdb_received_bytes_total"]
            assert m["messages_sent_total"] >= 3 * 7  # every key of three dbs and the markers
            first = m

            for i in range(300):
                r.set(b"m:%d" % i, b"v%d" % i)
            offset = source.client().info("replication")["master_repl_offset"]
            m = wait_until(
                lambda: rep.scrape_if(
                    lambda s: (
                        s.get("confirmed_offset") == offset
                        and s.get("checkpoint_offset") == offset
                        and s.get("acked_offset") == offset
                    )
                ),
                30,
                lambda: f"offsets reach the master's {offset}: {rep.scrape()}",
            )
            assert m["parsed_offset"] == offset
            assert m["parsed_offset"] > first["parsed_offset"]
            assert m["messages_sent_total"] == first["messages_sent_total"] + 300
            assert m["messages_confirmed_total"] == m["messages_sent_total"]
            assert m["lag_bytes"] == 0 and m["lag_seconds"] == 0
            assert m["spooled_bytes"] == 0 and m["in_flight_messages"] == 0
            log = rep.log()
            assert "full sync: RDB" in log and "(done)" in log, log[-2000:]

            # a restart resumes: a partial resync, no full sync, in the new process's counters
            assert rep.stop() == 0
            r.set(b"after", b"restart")
            rep.start()
            m = wait_until(
                lambda: rep.scrape_if(lambda s: s.get("partial_resyncs_total") == 1),
                30,
                lambda: f"the restart resumes with CONTINUE\n{rep.log()[-2000:]}",
            )
            assert m["full_syncs_total"] == 0 and m["active"] == 1
        finally:
            rep.stop(signal.SIGTERM)
        assert "Traceback" not in rep.log()
