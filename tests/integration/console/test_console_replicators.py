"""The console's Replicators page in a real browser (headless Chromium through selenium)
against the shared 3-node cluster, with real replicators keeping their records in it: a Redis
job (a real ``redis-server`` as the source, an active and a standby worker) streaming into a
topic of a real ``metaledger broker`` registered in the cluster, and a RocketMQ job copying
that topic on into a second RocketMQ cluster (its own node and broker), its heartbeats going
through both. The page loads without a console error; every number on it is what the client
reads of the records at the revision the page was read at, and what ``metaledger replicate
status`` answers; the Redis job's data reached a second ``redis-server`` replayed from the
destination. The screenshot goes to the test's tmp dir (and to
$METALEDGER_CONSOLE_SCREENSHOTS, for docs/console.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client, QueueData
from replicator.redis.replay import RedisTarget, Replayer
from tests.console_harness import (  # noqa: F401  (the shared fixtures)
    BROWSER_MARKS,
    ConsoleProcess,
    browser_errors,
    screenshot,
    shared_blank_page,
    shared_client,
    shared_cluster,
    shared_driver,
    table,
)
from tests.console_harness import text as _text
from tests.harness import Cluster, wait_until
from tests.integration.broker.conftest import BrokerProcess, metaledger
from tests.integration.replicator.process import WorkerProcess
from tests.integration.replicator.rocketmq.clusters import RmqCluster
from tests.integration.replicator.rocketmq.process import Worker
from tests.redis_harness import REDIS_SERVER, RedisServer

pytestmark = [
    *BROWSER_MARKS,
    pytest.mark.skipif(not Path(REDIS_SERVER).exists(), reason="redis-server is not installed"),
]

SHOTS = "screenshots"
TOPIC = "redis-events"
QUEUES = 4
REDIS_JOB, RMQ_JOB = "cache", "mirror"
#: no 5 s wait before a diskless transfer starts
FAST_REDIS = {"repl-diskless-sync-delay": "0"}


@dataclass
class Jobs:
    source: RedisServer
    redis_workers: list[WorkerProcess]
    dest: RmqCluster
    rmq_worker: Worker
    namesrv: str


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-replicators")


def _redis_worker(root: Path, cluster: Cluster, source: RedisServer, name: str) -> WorkerProcess:
    args = [
        "redis", "--source", source.url, "--topic", TOPIC, "--job", REDIS_JOB, "--worker", name,
        "--endpoints", ",".join(cluster.endpoints), "--lease-ttl", "3",
    ]  # fmt: skip
    return WorkerProcess(root, f"redis-{name}.log", args)


def _statuses(client: Client, revision: int = 0) -> dict[str, Any]:
    """The status documents by ``kind/job`` (RocketMQ: ``rocketmq/job/worker``)."""
    out = {}
    for kv in client.get("/replicators/", prefix=True, revision=revision).kvs:
        if kv.key.endswith(b"/status"):
            doc = json.loads(kv.value)
            out["/".join(kv.key.decode().split("/")[2:-1])] = doc
    return out


def _caught_up(client: Client) -> bool:
    st = _statuses(client)
    redis = st.get(f"redis/{REDIS_JOB}")
    rmq = st.get(f"rocketmq/{RMQ_JOB}/w/m1")
    if not redis or not rmq or redis.get("phase") != "command stream" or redis["sent"] < 20:
        return False
    if redis["lag_bytes"] or redis["in_flight"] or redis["checkpoint_offset"] is None:
        return False
    if redis["checkpoint_offset"] != redis["confirmed_offset"]:
        return False
    queues = [q for q in rmq["queues"] if q["partition"].startswith(f"{TOPIC}/")]
    hb = rmq.get("heartbeat") or {}
    return (
        len(queues) == QUEUES
        and sum(q["max_offset"] for q in queues) >= redis["confirmed"]
        and all(q["committed_offset"] == q["max_offset"] and not q["in_flight"] for q in queues)
        and hb.get("rtt_ms") is not None
    )


@pytest.fixture(scope="module")
def jobs(root: Path, cluster: Cluster, client: Client) -> Iterator[Jobs]:
    started: list[Any] = []
    try:
        broker = BrokerProcess(root, cluster.endpoints, "broker-a")
        started.append(broker)
        wait_until(
            lambda: "broker-a" in client.route_cluster_info().clusters.get("DefaultCluster", []),
            30,
            "broker-a registered",
        )
        client.route_topic_create(TOPIC, [QueueData("broker-a", QUEUES, QUEUES, 6)])
        source = RedisServer(root, config=FAST_REDIS, name="source")
        started.append(source)
        dest = RmqCluster(root / "B", "B")
        started.append(dest)
        workers = [_redis_worker(root, cluster, source, "w1")]
        started.extend(workers)
        wait_until(lambda: f"redis/{REDIS_JOB}" in _statuses(client), 60, "w1 active")
        workers.append(_redis_worker(root, cluster, source, "w2"))  # the standby
        started.append(workers[-1])
        namesrv = f"127.0.0.1:{cluster.nodes[0].remoting_port}"
        rmq = Worker(root, namesrv, dest.namesrv, cluster.endpoints, RMQ_JOB, "m1",
                     "--topics", TOPIC)  # fmt: skip
        started.append(rmq)
        r = source.client()
        for i in range(20):
            r.set(f"user:{i}", f"name-{i}")
        r.incrby("visits", 7)
        wait_until(lambda: _caught_up(client), 90, lambda: json.dumps(_statuses(client)))
        yield Jobs(source, workers, dest, rmq, namesrv)
    finally:
        for p in reversed(started):
            if isinstance(p, WorkerProcess | BrokerProcess):
                p.stop()
            else:
                p.close()


@pytest.fixture(scope="module")
def console(root: Path, cluster: Cluster) -> Iterator[ConsoleProcess]:
    c = ConsoleProcess(root / "console", cluster.endpoints)
    yield c
    c.stop()


def js(v: Any) -> str:
    """``v`` as the page writes it (JavaScript's number to text; "-" for nothing)."""
    if v is None or v == "":
        return "-"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _where(namesrv: str, cluster: str) -> str:
    return f"{namesrv} (cluster {cluster})" if cluster else namesrv


def _page(driver: Any) -> dict[str, Any]:
    m = re.search(r"revision (\d+)", _text(driver, "#rrev"))
    return {
        "revision": int(m.group(1)) if m else 0,
        "jobs": {f"{r[0]}/{r[1]}": r for r in table(driver, "#jobs")},
        "queues": {r[1]: r for r in table(driver, "#queues")},
        "offsets": {r[0]: r for r in table(driver, "#offsets")},
    }


def _page_equals_records(driver: Any, client: Client) -> bool:
    """Every number on the page is what the records said at the revision it read at."""
    page = _page(driver)
    if not page["revision"]:
        return False
    st = _statuses(client, page["revision"])
    redis, rmq = st[f"redis/{REDIS_JOB}"], st[f"rocketmq/{RMQ_JOB}/w/m1"]
    queues = sorted(rmq["queues"], key=lambda q: q["partition"])
    hb = rmq["heartbeat"]
    want_redis = [
        "redis", REDIS_JOB, "w1, w2", redis["source"], f"topic {TOPIC}",
        js(redis["lag_bytes"]), "-", js(redis["lag_s"]), js(redis["in_flight"]), "-",
    ]  # fmt: skip
    want_rmq = [
        "rocketmq", RMQ_JOB, "m1", _where(rmq["source"], rmq["source_cluster"]),
        _where(rmq["dest"], rmq["dest_cluster"]), "-", js(sum(q["lag_messages"] for q in queues)),
        js(max(q["lag_s"] for q in queues)), js(sum(q["in_flight"] for q in queues)),
        f"{js(hb['rtt_ms'])} ms",
    ]  # fmt: skip
    want_offsets = [
        REDIS_JOB, redis["phase"], *(js(redis[k]) for k in (
            "parsed_offset", "confirmed_offset", "acked_offset", "checkpoint_offset", "sent",
            "confirmed")),
    ]  # fmt: skip
    want_queues = {
        q["partition"]: [
            RMQ_JOB, q["partition"], "m1", q["dest_topic"],
            *(js(q[k]) for k in ("max_offset", "pulled_offset", "committed_offset",
                                 "lag_messages", "lag_s", "in_flight", "sent", "acked")),
        ]
        for q in queues
    }  # fmt: skip
    got_redis = page["jobs"].get(f"redis/{REDIS_JOB}", [])
    got_rmq = page["jobs"].get(f"rocketmq/{RMQ_JOB}", [])
    return (
        got_redis[:10] == want_redis
        and got_rmq[:10] == want_rmq
        and got_redis[11:] == got_rmq[11:] == ["none"]
        and page["offsets"].get(REDIS_JOB) == want_offsets
        and page["queues"] == want_queues
    )


def _cli_status(root: Path, cluster: Cluster) -> list[dict[str, Any]]:
    out = metaledger(
        root, "replicate", "status", "--output", "json", "--endpoints", ",".join(cluster.endpoints)
    )
    assert out.returncode == 0, out.stderr.decode()
    docs: list[dict[str, Any]] = json.loads(out.stdout)
    return docs


def _page_equals_cli(driver: Any, root: Path, cluster: Cluster) -> bool:
    """What ``metaledger replicate status`` answers now is what the page shows (the settled
    numbers: offsets, lag, counts; the round trip changes with every heartbeat)."""
    docs = {(d["kind"], d["job"]): d for d in _cli_status(root, cluster)}
    page = _page(driver)
    redis, rmq = docs[("redis", REDIS_JOB)], docs[("rocketmq", RMQ_JOB)]
    offsets = page["offsets"].get(REDIS_JOB, [])
    want = [js(redis[k]) for k in ("parsed_offset", "confirmed_offset", "acked_offset",
                                   "checkpoint_offset", "sent", "confirmed")]  # fmt: skip
    queues = {
        q["partition"]: [js(q[k]) for k in ("max_offset", "pulled_offset", "committed_offset",
                                            "lag_messages")]
        for q in rmq["queues"]
    }  # fmt: skip
    return bool(offsets[2:] == want and {p: r[4:8] for p, r in page["queues"].items()} == queues)


def test_the_replicators_page_is_what_the_records_and_the_cli_say(
    cluster: Cluster,
    client: Client,
    jobs: Jobs,
    console: ConsoleProcess,
    driver: Any,
    root: Path,
) -> None:
    from selenium.webdriver.common.by import By

    driver.get(console.url + "/replicators")
    wait_until(
        lambda: len(table(driver, "#jobs")) == 2 and len(table(driver, "#queues")) >= QUEUES,
        30,
        lambda: f"two jobs and {QUEUES} queues: {table(driver, '#jobs')}",
    )
    wait_until(
        lambda: _page_equals_records(driver, client),
        30,
        lambda: f"the page equal to the records: {_page(driver)}\n{_statuses(client)}",
    )
    # the active Redis worker is marked, the standby is listed after it
    active = driver.find_elements(By.CSS_SELECTOR, "tr[data-job='redis/cache'] .workers .leader")
    assert [e.text for e in active] == ["w1"]
    wait_until(
        lambda: _page_equals_cli(driver, root, cluster),
        30,
        lambda: f"the page equal to the CLI: {_page(driver)}\n{_cli_status(root, cluster)}",
    )
    # and the API answers the same JSON the page drew from
    status, body = console.get("/api/replicators")
    assert status == 200
    assert [(j["kind"], j["job"]) for j in body["jobs"]] == [("redis", REDIS_JOB),
                                                             ("rocketmq", RMQ_JOB)]  # fmt: skip
    assert [w["name"] for w in body["jobs"][0]["workers"]] == ["w1", "w2"]
    screenshot(driver, root / SHOTS, "replicators")
    assert browser_errors(driver) == []
    # the chain ends in a second redis-server: the destination cluster's copy of the topic,
    # replayed, holds what the source holds
    with RedisServer(root, name="destination") as dest:
        target = RedisTarget(dest.client())
        replayer = Replayer(target)
        for q in range(QUEUES):
            for m in jobs.dest.pull_all(TOPIC, q):
                replayer.offer(q, m.body, dict(m.properties))
        target.close()
        src, dst = jobs.source.client(), dest.client()
        keys = sorted(src.keys("*"))
        assert len(keys) == 21 and sorted(dst.keys("*")) == keys
        assert all(dst.get(k) == src.get(k) for k in keys)


def test_a_stopped_worker_is_an_alarm_on_the_page(
    client: Client, jobs: Jobs, console: ConsoleProcess, driver: Any
) -> None:
    """The RocketMQ job's destination broker stops: its heartbeats no longer come back, and
    the page names the link as down with no traceback."""
    driver.get(console.url + "/replicators")
    jobs.dest.stop_broker()
    try:
        wait_until(
            lambda: "heartbeat link down" in table(driver, "#jobs")[1][-1],
            60,
            lambda: f"the alarm: {table(driver, '#jobs')}",
        )
    finally:
        jobs.dest.start_broker()
    assert "Traceback" not in console.log()
    assert browser_errors(driver) == []
