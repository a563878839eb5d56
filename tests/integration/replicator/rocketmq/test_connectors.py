"""The RocketMQ replicator's job-wide connectors end to end (issue 19 items 3, 4, 5, 7), with
real clusters and real ``metaledger replicate rocketmq`` / ``replicate translate`` processes:

- heartbeats go through both clusters (every second here: ``--heartbeat-interval 1``; the
  default is 10 s), the worker's status shows them received with a round trip, they are not
  in the user topic nor in its counts (the metrics' ``kind`` label); a frozen destination
  broker (SIGSTOP) turns ``link_down`` on within a few intervals and ``link_up`` to 0, and
  both come back when it thaws; a worker started while the destination is frozen reports the
  link down (never having seen a heartbeat is not "up");
- the Prometheus endpoint (``--listen-metrics``) serves the per-queue committed offset and
  lag the status shows;
- config sync: the destination topic is created like the source's and follows it (queues
  4 → 8, perm 6 → 7); the replication goes on across the change with nothing lost and queue
  i still into queue i (the new source queues wait for the destination to grow); a source
  turned read-only (perm 4) leaves the destination writable (6): the replicator writes there;
- consumer-group failover: a group's source offsets translated through the offset-syncs
  (``replicate translate --write``, and the checkpoint connector with
  ``--sync-group-offsets``) leave no gap at the destination and at most the sync spacing of
  duplicates per queue, where translating by timestamp repeats (or skips) far more.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from replicator.rocketmq.client import ClusterClient
from replicator.rocketmq.config import HEARTBEAT_TOPIC
from replicator.rocketmq.groups import group_key
from tests.harness import free_ports, wait_until
from tests.integration.broker.conftest import cli_env
from tests.integration.replicator.rocketmq.clusters import Message, RmqCluster
from tests.integration.replicator.rocketmq.process import (
    Worker,
    caught_up,
    dumps,
    ids,
    queue_statuses,
    statuses,
    update_topic,
)

pytestmark = [pytest.mark.integration]

PREFIX = "metaledger_rocketmq_replicator_"
SYNC_EVERY = 5  # --offset-sync-every of the failover test: the duplicates' bound


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the worker's metrics endpoint: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((PREFIX + name, tuple(sorted(labels.items()))))


def heartbeat(dest: RmqCluster, job: str) -> dict[str, Any]:
    """The leading worker's heartbeat status ({} before one is published)."""
    for doc in statuses(dest.routes, job):
        if doc.get("leader"):
            return dict(doc.get("heartbeat") or {})
    return {}


def metrics_match_status(port: int, dest: RmqCluster, job: str, topic: str) -> bool:
    """The scraped per-queue committed offset and lag equal the published status (both
    come from one snapshot a commit interval; read until a scrape and a status agree)."""
    rows = {p: q for p, q in queue_statuses(dest.routes, job).items() if p.startswith(topic)}
    samples = scrape(port)
    return bool(rows) and all(
        sample(samples, "committed_offset", job=job, partition=p) == q["committed_offset"]
        and sample(samples, "lag_messages", job=job, partition=p) == q["lag_messages"]
        for p, q in rows.items()
    )


def test_heartbeats_link_down_and_metrics(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    a, b = two_clusters
    topic = a.topic("Beats", queues=2)
    job = "beats"
    (port,) = free_ports(1)
    produced = a.produce(topic, [Message(b"m%d" % i) for i in range(20)])
    w = Worker(
        tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w1",
        "--topics", topic, "--listen-metrics", f"127.0.0.1:{port}",
    )  # fmt: skip

    def why() -> str:
        return f"{dumps(statuses(b.routes, job))}\n{w.log()[-3000:]}"

    try:
        wait_until(
            lambda: (
                caught_up(a, b, job, topic)
                and heartbeat(b, job).get("received", 0) >= 3
                and heartbeat(b, job).get("rtt_ms") is not None
            ),
            90,
            why,
        )
        hb = heartbeat(b, job)
        assert hb["enabled"] and not hb["link_down"], hb
        assert 0 <= hb["rtt_ms"] < 10_000, hb
        # the heartbeats went through the source's heartbeat topic into the destination's
        beats = [json.loads(m.body) for m in b.all_messages(HEARTBEAT_TOPIC)]
        assert any(d.get("job") == job for d in beats), beats[:3]
        assert any(d.get("job") == job for d in map(json.loads, _bodies(a, HEARTBEAT_TOPIC)))
        # ... and not into the user topic, nor its counts
        assert sorted(ids(b.all_messages(topic))) == sorted(s.msg_id for s in produced)

        def counts_right() -> bool:
            s = scrape(port)
            return (
                sample(s, "sent_messages_total", job=job, kind="user") == 20
                and sample(s, "acked_messages_total", job=job, kind="user") == 20
                and (sample(s, "acked_messages_total", job=job, kind="heartbeat") or 0) >= 1
                and sample(s, "link_up", job=job) == 1
                and sample(s, "heartbeat_rtt_seconds", job=job) is not None
            )

        wait_until(counts_right, 30, lambda: f"{scrape(port)}\n{why()}")
        wait_until(lambda: metrics_match_status(port, b, job, topic), 30, why)

        # the destination broker freezes: the link goes down within a few intervals, and
        # what the source takes meanwhile shows as lag (status and metrics alike)
        b.pause_broker()
        try:
            a.produce(topic, [Message(b"late%d" % i) for i in range(10)])
            wait_until(lambda: heartbeat(b, job).get("link_down"), 20, why)
            wait_until(lambda: sample(scrape(port), "link_up", job=job) == 0, 20, why)
            wait_until(
                lambda: (
                    sum(
                        q["lag_messages"]
                        for p, q in queue_statuses(b.routes, job).items()
                        if p.startswith(topic)
                    )
                    == 10
                ),
                30,
                why,
            )
            wait_until(lambda: metrics_match_status(port, b, job, topic), 30, why)
        finally:
            b.resume_broker()
        wait_until(
            lambda: (
                not heartbeat(b, job).get("link_down")
                and sample(scrape(port), "link_up", job=job) == 1
                and caught_up(a, b, job, topic)
            ),
            60,
            why,
        )
        assert ids(b.all_messages(topic)).keys() >= {s.msg_id for s in produced}
        assert len(ids(b.all_messages(topic))) == 30
    finally:
        b.resume_broker()
        assert w.stop() == 0, w.log()[-3000:]


def _bodies(cluster: RmqCluster, topic: str) -> list[bytes]:
    return [m.body for m in cluster.all_messages(topic)]


def test_config_follows_the_source(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    a, b = two_clusters
    topic = a.topic("Grow", queues=4)
    job = "grow"
    first = a.produce(topic, [Message(b"a%d" % i, queue=i % 4) for i in range(40)])
    w = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w1", "--topics", topic)

    def why() -> str:
        return f"{dumps(queue_statuses(b.routes, job))}\n{w.log()[-4000:]}"

    def shape(cluster: RmqCluster) -> list[tuple[int, int, int]]:
        return [
            (q.read_queue_nums, q.write_queue_nums, q.perm) for q in cluster.route(topic).queues
        ]

    try:
        wait_until(lambda: caught_up(a, b, job, topic), 90, why)
        assert shape(b) == [(4, 4, 6)]
        passes = max(int(d.get("passes", 0)) for d in statuses(b.routes, job))
        update_topic(a, topic, 8, perm=7)
        wait_until(lambda: shape(a) == [(8, 8, 7)], 30, lambda: str(shape(a)))
        wait_until(lambda: shape(b) == [(8, 8, 7)], 30, lambda: f"{shape(b)}\n{why()}")
        second = a.produce(topic, [Message(b"b%d" % i, queue=i % 8) for i in range(80)])
        wait_until(
            lambda: caught_up(a, b, job, topic) and len(queue_statuses(b.routes, job)) >= 8,
            90,
            why,
        )
        # the worker started a new pass for the new destination queue count
        assert max(int(d.get("passes", 0)) for d in statuses(b.routes, job)) > passes
        got = ids(b.all_messages(topic))
        assert got.keys() == {s.msg_id for s in first + second}
        for q in range(8):  # queue i still goes to queue i
            assert ids(a.pull_all(topic, q)).keys() == ids(b.pull_all(topic, q)).keys(), q
        # the source turns read-only (its producers moved away): the destination follows
        # but stays writable, the replicator writes there
        update_topic(a, topic, 8, perm=4)
        wait_until(lambda: shape(b) == [(8, 8, 6)], 30, lambda: f"{shape(b)}\n{why()}")
    finally:
        assert w.stop() == 0, w.log()[-3000:]


# --------------------------------------------------------------------------- failover


def gap_and_duplicates(
    src: list[str], dst: list[tuple[int, str]], consumed: int, resume: int
) -> tuple[int, int]:
    """A group that consumed source offsets below ``consumed`` resumes at destination offset
    ``resume``: (source messages it would never see, messages it would see again)."""
    seen = {uid for offset, uid in dst if offset >= resume}
    gap = sum(1 for uid in src[consumed:] if uid not in seen)
    dups = sum(1 for uid in src[:consumed] if uid in seen)
    return gap, dups


def group_offsets(cluster: RmqCluster, topic: str, group: str) -> dict[int, int | None]:
    async def go() -> dict[int, int | None]:
        async with ClusterClient(cluster.namesrv) as c:
            return {
                q.queue_id: await c.consumer_offset(group, q) for q in await c.read_queues(topic)
            }

    return asyncio.run(go())


def set_group_offsets(cluster: RmqCluster, topic: str, group: str, offsets: dict[int, int]) -> None:
    async def go() -> None:
        async with ClusterClient(cluster.namesrv) as c:
            for q in await c.read_queues(topic):
                await c.set_consumer_offset(group, q, offsets[q.queue_id])

    asyncio.run(go())


def by_timestamp(
    source: RmqCluster, dest: RmqCluster, topic: str, at: dict[int, int]
) -> dict[int, int]:
    """RIP-45's shipped translation: the destination offset of the store time of the source
    message at the group's offset."""

    stamps = {q: source.pull_all(topic, q)[offset].store_timestamp for q, offset in at.items()}

    async def go() -> dict[int, int]:
        async with ClusterClient(dest.namesrv) as c:
            out = {}
            for q in await c.read_queues(topic):
                out[q.queue_id] = await c.search_offset(q, stamps[q.queue_id])
            return out

    return asyncio.run(go())


def test_group_failover_through_offset_syncs(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    a, b = two_clusters
    topic = a.topic("Failover", queues=2)
    job = "failover"
    # the destination already holds messages of its own: its offsets are not the source's
    b.topic(topic, queues=2)
    b.produce(topic, [Message(b"own", queue=0)] * 7 + [Message(b"own", queue=1)] * 13)
    a.produce(topic, [Message(b"m%d" % i, queue=i % 2) for i in range(160)])
    consumed = {"G": {0: 37, 1: 60}, "G2": {0: 21, 1: 73}}
    for group, offsets in consumed.items():
        set_group_offsets(a, topic, group, offsets)
    w = Worker(
        tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w1", "--topics", topic,
        "--offset-sync-every", str(SYNC_EVERY), "--groups", "G2", "--sync-group-offsets",
    )  # fmt: skip

    def why() -> str:
        return f"{dumps(queue_statuses(b.routes, job))}\n{w.log()[-4000:]}"

    src = {q: [m.properties["UNIQ_KEY"] for m in a.pull_all(topic, q)] for q in range(2)}

    def dst() -> dict[int, list[tuple[int, str]]]:
        return {
            q: [(m.queue_offset, m.properties.get("UNIQ_KEY", "")) for m in b.pull_all(topic, q)]
            for q in range(2)
        }

    def outcome(group: str, resume: dict[int, int | None]) -> dict[int, tuple[int, int]]:
        d = dst()
        out = {}
        for q in range(2):
            r = resume[q]
            assert r is not None, (group, resume)
            out[q] = gap_and_duplicates(src[q], d[q], consumed[group][q], r)
        return out

    def good(group: str, resume: dict[int, int | None]) -> bool:
        return all(gap == 0 and dups <= SYNC_EVERY for gap, dups in outcome(group, resume).values())

    try:
        wait_until(lambda: caught_up(a, b, job, topic), 90, why)
        # the CLI: translate G and write its offsets to the destination broker
        cmd = [
            sys.executable, "-m", "nameserver.cli", "replicate", "translate", "--job", job,
            "--group", "G", "--source-namesrv", a.namesrv, "--dest-namesrv", b.namesrv,
            "--endpoints", ",".join(b.endpoints), "--write",
        ]  # fmt: skip
        out = subprocess.run(
            cmd, env=cli_env(tmp_path), capture_output=True, timeout=60, check=False
        )
        assert out.returncode == 0, out.stderr.decode()
        text = out.stdout.decode()
        assert "OFFSET" in text and "sync" in text and HEARTBEAT_TOPIC not in text, text
        # a group that consumed nothing (the source answers 0 on a queue that still starts
        # at 0, RocketMQ's trap 12) resumes at the destination's earliest: no gap either
        nobody = [*cmd[: cmd.index("G")], "Nobody", *cmd[cmd.index("G") + 1 : -1]]
        out = subprocess.run(
            nobody, env=cli_env(tmp_path), capture_output=True, timeout=60, check=False
        )
        assert out.returncode == 0, out.stderr.decode()
        text = out.stdout.decode()
        assert "earliest" in text and "sync" not in text, text
        # a job that committed nothing: exit 4
        unknown = [*cmd[: cmd.index(job)], "no-such-job", *cmd[cmd.index(job) + 1 :]]
        out = subprocess.run(
            unknown, env=cli_env(tmp_path), capture_output=True, timeout=60, check=False
        )
        assert out.returncode == 4, (out.stdout, out.stderr)
        resumed = group_offsets(b, topic, "G")
        result = outcome("G", resumed)
        assert good("G", resumed), (resumed, result, text)
        # translating by timestamp (RIP-45 as shipped) in the same setup: the copies were
        # stored after the source messages, so it goes back to the replication's start and
        # repeats everything the group had consumed
        stamped = by_timestamp(a, b, topic, consumed["G"])
        by_time = outcome("G", dict(stamped))
        for q in range(2):
            assert sum(by_time[q]) > SYNC_EVERY >= sum(result[q]), (q, by_time, result)
        # the checkpoint connector did the same for G2 by itself, and keeps it in metaledger
        wait_until(lambda: good("G2", group_offsets(b, topic, "G2")), 30, why)
        kv = b.routes.get(group_key(job, "G2")).kvs
        assert kv, "no translated offsets in metaledger"
        rows = [r for r in json.loads(kv[0].value) if r["topic"] == topic]
        assert {r["queue_id"]: r["offset"] for r in rows} == group_offsets(b, topic, "G2")
        assert {r["basis"] for r in rows} == {"sync"}
        assert not any(r["topic"] == HEARTBEAT_TOPIC for r in json.loads(kv[0].value))
    finally:
        assert w.stop() == 0, w.log()[-3000:]


def test_link_down_from_the_start(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    """A worker that starts while the destination broker is frozen has never seen a
    heartbeat come through: the link is down, not "unknown, so up"."""
    a, b = two_clusters
    topic = a.topic("Dark", queues=1)
    job = "dark"
    (port,) = free_ports(1)
    b.pause_broker()
    w: Worker | None = None
    try:
        w = Worker(
            tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w1",
            "--topics", topic, "--listen-metrics", f"127.0.0.1:{port}",
        )  # fmt: skip
        log = w.log
        wait_until(
            lambda: (
                heartbeat(b, job).get("link_down") and sample(scrape(port), "link_up", job=job) == 0
            ),
            30,
            lambda: f"{dumps(statuses(b.routes, job))}\n{log()[-3000:]}",
        )
        b.resume_broker()
        wait_until(
            lambda: (
                heartbeat(b, job).get("received", 0) >= 1
                and not heartbeat(b, job).get("link_down")
                and sample(scrape(port), "link_up", job=job) == 1
            ),
            60,
            lambda: f"{dumps(statuses(b.routes, job))}\n{log()[-3000:]}",
        )
    finally:
        b.resume_broker()
        if w is not None:
            assert w.stop() == 0, w.log()[-3000:]
