"""The console's RocketMQ page in a real browser (headless Chromium through selenium) against
a real 3-node cluster and a real replica group of two ``metaledger broker`` processes: a
topic's route, its queue's min/max offset, the replica group and a consumer group's lag per
queue are what ``metaledger route get``, ``replica-group show`` and ``consumer lag`` answer;
more topics than a page page; a broker that stops answering is named on the page with no
traceback. The screenshot goes to the test's tmp dir (and to
$METALEDGER_CONSOLE_SCREENSHOTS, for docs/console.md).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client, GroupPolicy, QueueData
from tests.cluster.broker.conftest import PERM_RW, SEND_OK, TOPIC, BrokerGroup, _request
from tests.console_harness import ConsoleProcess, browser_errors, chrome, have_browser, screenshot
from tests.console_harness import table as _table
from tests.console_harness import text as _text
from tests.harness import Cluster, running_cluster, wait_until
from tests.integration.broker.conftest import metaledger

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.integration,
    pytest.mark.skipif(not have_browser(), reason="chromium and chromedriver are not installed"),
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]

SHOTS = "screenshots"
CONSUMER = "console-readers"
UPDATE_CONSUMER_OFFSET = 15
EXTRA_TOPICS = 60  # with SeedTopic: more than the page's 50


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-rocketmq")


@pytest.fixture(scope="module")
def cluster(root: Path) -> Iterator[Cluster]:
    with running_cluster(root / "cluster", n=3) as c:
        c.wait_announced()
        yield c


@pytest.fixture(scope="module")
def client(cluster: Cluster) -> Iterator[Client]:
    with Client(cluster.endpoints, timeout_s=10) as c:
        yield c


@pytest.fixture(scope="module")
def group(
    root: Path, cluster: Cluster, client: Client, request: pytest.FixtureRequest
) -> Iterator[BrokerGroup]:
    g = BrokerGroup(root / "brokers", client, cluster.endpoints, 2, "SYNC_MASTER", GroupPolicy(2))
    try:
        yield g.start()
    finally:
        g.close(failed=request.session.testsfailed > 0)


@pytest.fixture(scope="module")
def console(root: Path, cluster: Cluster) -> Iterator[ConsoleProcess]:
    c = ConsoleProcess(root / "console", cluster.endpoints)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def driver(root: Path) -> Iterator[Any]:
    d = chrome(root)
    yield d
    d.quit()


def _cli(root: Path, cluster: Cluster, *args: str) -> Any:
    r = metaledger(root, *args, "--endpoints", ",".join(cluster.endpoints), "-w", "json")
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def _commit(group: BrokerGroup, offset: int) -> None:
    """The consumer group's offset of queue 0, committed as a pull consumer commits it."""
    ext = {"consumerGroup": CONSUMER, "topic": TOPIC, "queueId": 0, "commitOffset": offset}
    r = asyncio.run(_request(group.master.port, UPDATE_CONSUMER_OFFSET, ext, b"", 10))
    assert r.code == 0, r.remark


def test_rocketmq_page_shows_what_the_cli_answers(
    root: Path,
    cluster: Cluster,
    client: Client,
    group: BrokerGroup,
    console: ConsoleProcess,
    driver: Any,
) -> None:
    from selenium.webdriver.common.by import By

    for i in range(5):
        assert group.send(f"m{i}".encode())[0] == SEND_OK
    _commit(group, 2)
    for i in range(EXTRA_TOPICS):
        client.route_topic_create(f"Z{i:03d}", [QueueData(group.name, 1, 1, PERM_RW)])

    driver.get(f"{console.url}/rocketmq?group={CONSUMER}&topic={TOPIC}")
    # the route is what `route get` answers
    route = _cli(root, cluster, "route", "get", TOPIC)
    wait_until(lambda: any(r[0] == TOPIC for r in _table(driver, "#topics")), 20, "the topic")
    row = next(r for r in _table(driver, "#topics") if r[0] == TOPIC)
    q = route["queueDatas"][0]
    addrs = route["brokerDatas"][0]["brokerAddrs"]
    assert row[1:] == [
        q["brokerName"],
        ", ".join(f"{i}={a}" for i, a in sorted(addrs.items())),
        str(q["readQueueNums"]),
        str(q["writeQueueNums"]),
        str(q["perm"]),
    ]
    # 61 topics page 50 at a time
    total = len(client.route_topics().topics)
    assert _text(driver, "#ttotal") == f"({total} topics, 50 shown)"
    driver.find_element(By.ID, "tmore").click()
    wait_until(lambda: _text(driver, "#ttotal") == f"({total} topics, {total} shown)", 20, "2")
    # the queue's offsets: 5 messages from 0; the lag is what `consumer lag` answers
    wait_until(lambda: len(_table(driver, "#queues")) == 1, 20, "the queue")
    assert _table(driver, "#queues")[0] == [group.name, addrs["0"], "0", "0", "5", "5"]
    lag = _cli(root, cluster, "consumer", "lag", "--group", CONSUMER, "--topic", TOPIC)
    assert lag["lag"] == 3
    wait_until(lambda: len(_table(driver, "#lag")) == 1, 20, "the lag row")
    want = lag["queues"][0]
    cells = _table(driver, "#lag")[0]
    assert cells[:7] == [
        want["broker"],
        want["topic"],
        str(want["queueId"]),
        str(want["brokerOffset"]),
        str(want["consumerOffset"]),
        str(want["inflight"]),
        str(want["lag"]),
    ]
    assert _text(driver, "#ltotal").startswith("total lag 3, in flight 0")
    # the replica group is what `replica-group show` answers
    shown = _cli(root, cluster, "replica-group", "show", group.name)
    wait_until(lambda: any(r[0] == group.name for r in _table(driver, "#groups")), 20, "group")
    g = next(r for r in _table(driver, "#groups") if r[0] == group.name)
    assert g[2] == f"{shown['master_id']} {shown['master_address']}"
    assert g[3] == str(shown["master_epoch"])
    assert g[4] == ",".join(map(str, shown["sync_state_set"]))
    assert g[5] == str(shown["sync_state_set_epoch"])
    pol = shown["policy"]
    auto = " auto" if pol["enable_auto_in_sync_replicas"] else ""
    assert g[6] == (
        f"{pol['total_replicas']} / {pol['in_sync_replicas']} / {pol['min_in_sync_replicas']}{auto}"
    )
    assert len(g[7].splitlines()) == 2 and "in sync" in g[7]
    brokers = {r[3] for r in _table(driver, "#brokers")}
    assert {p.address for p in group.procs} <= brokers
    driver.execute_script("window.scrollTo(0, 0)")
    screenshot(driver, root / SHOTS, "rocketmq")
    assert browser_errors(driver) == []


def test_a_broker_that_does_not_answer_is_named_not_a_traceback(
    group: BrokerGroup, console: ConsoleProcess
) -> None:
    master = group.master
    master.kill()
    status, body = console.get(f"/api/rocketmq/offsets?topic={TOPIC}")
    assert status == 200, body
    assert body["brokers"][0]["error"].startswith(f"broker {master.address}")
    status, body = console.get(f"/api/rocketmq/lag?group={CONSUMER}&topic={TOPIC}")
    assert status == 200 and body["queues"] == [] and master.address in body["errors"][0]
    for path in ("/api/rocketmq/topics?limit=0", "/api/rocketmq/lag", "/api/rocketmq/offsets"):
        status, body = console.get(path)
        assert status == 400 and "Traceback" not in body["error"], path
    status, body = console.get("/api/rocketmq/offsets?topic=NoSuchTopic")
    assert status in (400, 404) and "Traceback" not in body["error"]
    assert "Traceback" not in console.log()
