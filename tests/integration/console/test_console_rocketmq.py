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
import datetime
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.cli_lag import lag_time
from nameserver.client import Client, GroupPolicy, QueueData
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode
from rmq.connection import blocking_call
from rmq.headers import GetConsumerConnectionListHeader, GetProducerConnectionListHeader
from tests.cluster.broker.conftest import PERM_RW, SEND_OK, TOPIC, BrokerGroup, _request
from tests.console_harness import (  # noqa: F401  (the shared fixtures)
    BROWSER_MARKS,
    ConsoleProcess,
    browser_errors,
    screenshot,
    shared_blank_page,
    shared_client,
    shared_cluster,
    shared_driver,
)
from tests.console_harness import table as _table
from tests.console_harness import text as _text
from tests.harness import Cluster, free_ports, wait_until
from tests.integration.broker.conftest import cli_env, metaledger

pytestmark = BROWSER_MARKS

SHOTS = "screenshots"
CONSUMER = "console-readers"
UPDATE_CONSUMER_OFFSET = 15
EXTRA_TOPICS = 60  # with SeedTopic: more than the page's 50
POP_GROUP = "console-poppers"
WHEEL_GROUP = "console-wheel"
GRPC_GROUP = "console-grpc"
PRODUCER_GROUP = "console-producers"
WHEEL = str(Path(__file__).parents[1] / "broker" / "wheel_client.py")
GRPC_CONSUMER = str(Path(__file__).parents[1] / "broker" / "grpc_consumer.py")
GRPC_PRODUCER = str(Path(__file__).parents[1] / "broker" / "grpc_producer.py")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-rocketmq")


@pytest.fixture(scope="module")
def group(
    root: Path, cluster: Cluster, client: Client, request: pytest.FixtureRequest
) -> Iterator[BrokerGroup]:
    g = BrokerGroup(root / "brokers", client, cluster.endpoints, 2, "SYNC_MASTER", GroupPolicy(2))
    for proc, port in zip(g.procs, free_ports(len(g.procs)), strict=True):
        proc.extra += ["--listen-grpc", f"127.0.0.1:{port}"]  # for a 5.x consumer
    try:
        yield g.start()
    finally:
        g.close(failed=request.session.testsfailed > 0)


@pytest.fixture(scope="module")
def console(root: Path, cluster: Cluster) -> Iterator[ConsoleProcess]:
    c = ConsoleProcess(root / "console", cluster.endpoints)
    yield c
    c.stop()


def _cli(root: Path, cluster: Cluster, *args: str) -> Any:
    r = metaledger(root, *args, "--endpoints", ",".join(cluster.endpoints), "-w", "json")
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def _runtime(addr: str) -> dict[str, str]:
    """The broker's GET_BROKER_RUNTIME_INFO table."""
    r = blocking_call(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 10)
    assert r.code == 0, r.remark
    return dict(json.loads(r.body)["table"])


def _acked(group: BrokerGroup, master_id: int) -> dict[int, int]:
    """Each replica's acknowledged offset by replica id, as the master's runtime info says:
    the master's own end, each connected slave's slaveAckOffset_<id>."""
    table = _runtime(group.master.address)
    out = {master_id: int(table["commitLogMaxOffset"])}
    for k, v in table.items():
        if k.startswith("slaveAckOffset_"):
            out[int(k.removeprefix("slaveAckOffset_"))] = int(v)
    return out


def _when(ms: int) -> str:
    """A store time as the page writes it (and `consumer lag`'s table)."""
    t = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


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
    # each replica's acknowledged offset: what the master's runtime info answers (read
    # before and after the page, equal)
    ids = {r["broker_id"] for r in shown["replicas"]}

    def acked_equal() -> bool:
        before = _acked(group, shown["master_id"])
        driver.get(f"{console.url}/rocketmq?group={CONSUMER}&topic={TOPIC}")
        wait_until(lambda: any(r[0] == group.name for r in _table(driver, "#groups")), 20, "g")
        row = next(r for r in _table(driver, "#groups") if r[0] == group.name)
        after = _acked(group, shown["master_id"])
        want = sorted(f"{i}={before[i]}" if i in before else f"{i}=-" for i in ids)
        return before == after and sorted(row[8].splitlines()) == want

    wait_until(acked_equal, 30, "the acknowledged offsets equal the runtime info's")
    acked = _acked(group, shown["master_id"])
    assert set(acked) == ids and len(set(acked.values())) == 1  # the slave acked it all
    brokers = {r[3] for r in _table(driver, "#brokers")}
    assert {p.address for p in group.procs} <= brokers
    driver.execute_script("window.scrollTo(0, 0)")
    screenshot(driver, root / SHOTS, "rocketmq")
    assert browser_errors(driver) == []


def _wait_rows(
    driver: Any, css: str, ok: Callable[[list[list[str]]], bool], what: str
) -> list[list[str]]:
    wait_until(lambda: ok(_table(driver, css)), 30, what)
    return _table(driver, css)


def _group_row(driver: Any, group: str) -> list[str]:
    """The groups table's row of ``group``, re-read from the console (Show)."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, "#gform button").click()
    rows = _wait_rows(driver, "#cgroups", lambda t: any(r[0] == group for r in t), group)
    return next(r for r in rows if r[0] == group)


def _lag_cells(doc: dict[str, Any]) -> list[str]:
    """What the groups table shows of `consumer lag --group G`: lag, in flight, lag time."""
    return [str(doc["lag"]), str(doc["inflight"]), lag_time(doc["lagMs"])]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a client this test started, by its PID: SIGTERM, then SIGKILL after 20 s."""
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _lookup(driver: Any, topic: str, by: str, what: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    for css, value in (("#mtopic", topic), ("#mwhat", what)):
        box = driver.find_element(By.CSS_SELECTOR, css)
        box.clear()
        box.send_keys(value)
    Select(driver.find_element(By.ID, "mby")).select_by_value(by)
    driver.find_element(By.CSS_SELECTOR, "#mform button").click()


def test_consumer_groups_clients_and_message_lookup_show_what_the_cli_answers(
    root: Path,
    cluster: Cluster,
    group: BrokerGroup,
    console: ConsoleProcess,
    driver: Any,
) -> None:
    """A pull group (committed offsets), a POP group (`consume --pop`) and a live push
    consumer of the 4.x `rocketmq` wheel (remoting): every group is listed with the lag in
    messages and in time that `consumer lag` answers, the wheel's client with its protocol
    and version as the broker's GET_CONSUMER_CONNECTION_LIST names it; a message found by key
    and by id is what `message get` finds; an unknown and a malformed id say so."""
    from selenium.webdriver.common.by import By

    sent = _cli(root, cluster, "send", TOPIC, "order seven", "--keys", "order-7")
    msg_id = sent["msgId"]
    r = metaledger(root, "consume", TOPIC, "--group", POP_GROUP, "--pop", "--count", "2",
                   "--endpoints", ",".join(cluster.endpoints))  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    env = cli_env(root)
    env["HOME"] = str(root)  # the C++ core logs to $HOME/logs/rocketmq-cpp
    namesrv = f"127.0.0.1:{cluster.nodes[0].remoting_port}"
    out = (root / "wheel.out").open("wb")
    wheel = subprocess.Popen(
        [sys.executable, WHEEL, "consume", namesrv, WHEEL_GROUP, TOPIC, "0", "120"],
        stdout=out, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        consumed = lambda: (root / "wheel.out").read_text().count('"sha256"')  # noqa: E731
        wait_until(lambda: consumed() >= 6, 60, "the wheel consumer got the 6 messages")
        driver.get(f"{console.url}/rocketmq?group={CONSUMER}&topic={TOPIC}")
        mine = {CONSUMER, POP_GROUP, WHEEL_GROUP}
        rows = _wait_rows(driver, "#cgroups", lambda t: mine <= {r[0] for r in t}, "the groups")
        assert _text(driver, "#gtotal").startswith(f"({len(rows)} groups, {len(rows)} shown")
        # each group's lag and lag in time: what `consumer lag` answers at the same moment
        for g in sorted(mine):

            def same(g: str = g) -> bool:
                before = _cli(root, cluster, "consumer", "lag", "--group", g)
                row = _group_row(driver, g)
                after = _cli(root, cluster, "consumer", "lag", "--group", g)
                return before == after and row[2:5] == _lag_cells(before)

            wait_until(same, 60, f"{g}'s row equal to consumer lag")
        lag = _cli(root, cluster, "consumer", "lag", "--group", CONSUMER, "--topic", TOPIC)
        assert lag["lag"] == 4 and lag["lagMs"] == lag["queues"][0]["lagMs"] > 0
        row = _group_row(driver, CONSUMER)
        assert row[1] == group.name and row[4] == lag_time(lag["lagMs"])
        # per queue: the lag in time and the store time of the first message not consumed
        want = lag["queues"][0]
        cells = _wait_rows(driver, "#lag", lambda t: len(t) == 1, "lag row")[0]
        assert cells[6:9] == [str(want["lag"]), lag_time(want["lagMs"]), _when(want["nextTimestamp"])]  # fmt: skip
        assert _text(driver, "#ltotal").startswith(f"total lag 4, in flight 0, lag time {lag_time(lag['lagMs'])}")  # fmt: skip
        # the wheel's client: remoting, with the version its heartbeats carry
        driver.find_element(By.CSS_SELECTOR, f"#cgroups tr[data-group='{WHEEL_GROUP}'] a").click()
        wait_until(lambda: _text(driver, "#cgroup") == WHEEL_GROUP, 20, "the clients' group")
        clients = _wait_rows(driver, "#clients", lambda t: len(t) == 1, "the wheel's client")
        ask = GetConsumerConnectionListHeader(WHEEL_GROUP).request()
        answer = json.loads(blocking_call(group.master.address, ask, 10).body)
        (conn,) = answer["connectionSet"]
        proto = answer["clientProtocols"][conn["clientId"]]
        assert clients[0] == [conn["clientId"], conn["clientAddr"], conn["language"], "remoting",
                              proto["version"], group.master.address]  # fmt: skip
        # the C++ core (rocketmq-client-cpp 2.x) sends the ordinal of V3_1_8, as in RocketMQ
        assert proto["version"].startswith("V3_") and conn["language"] == "CPP"
        assert "1 online" in _text(driver, "#ckind")
        row = _group_row(driver, WHEEL_GROUP)
        assert (row[5], row[6]) == ("1", f"remoting {proto['version']}")
        driver.execute_script("document.getElementById('gform').scrollIntoView()")
        screenshot(driver, root / SHOTS, "rocketmq-groups")
    finally:
        _stop(wheel)
        out.close()
    # message lookup by key and by id: what `message get` finds
    (by_key,) = [json.loads(line) for line in metaledger(
        root, "message", "get", "--key", "order-7", "--topic", TOPIC, "--json",
        "--endpoints", ",".join(cluster.endpoints)).stdout.decode().splitlines()]  # fmt: skip
    assert by_key["msgId"] == msg_id
    shown = [by_key["msgId"], by_key["uniqKey"] or "-", TOPIC, str(by_key["queueId"]),
             str(by_key["queueOffset"]), "order-7", "-", _when(by_key["storeTimestamp"]),
             by_key["storeHost"], "order seven"]  # fmt: skip
    _lookup(driver, TOPIC, "key", "order-7")
    assert _wait_rows(driver, "#msgs", lambda t: len(t) == 1, "found by key") == [shown]
    _lookup(driver, "", "id", msg_id)
    wait_until(lambda: _table(driver, "#msgs") == [shown], 20, "found by id")
    driver.execute_script("document.getElementById('mform').scrollIntoView()")
    screenshot(driver, root / SHOTS, "rocketmq-lookup")
    assert browser_errors(driver) == []
    # an unknown id and a malformed one: a clear message, as `message get` says
    unknown = msg_id[:-8] + "7FFFFFFF"
    r = metaledger(
        root, "message", "get", "--id", unknown, "--endpoints", ",".join(cluster.endpoints)
    )
    assert r.returncode == 4 and f"no message with id {unknown!r}" in r.stderr.decode()
    _lookup(driver, "", "id", unknown)
    wait_until(lambda: _text(driver, "#merror") == f"no message with id {unknown!r}", 20, "unknown")
    assert _table(driver, "#msgs") == []
    _lookup(driver, "", "id", "not-an-id")
    wait_until(lambda: "32 or 56 hex digits" in _text(driver, "#merror"), 20, "malformed")
    assert "give the topic" in _text(driver, "#merror") and _table(driver, "#msgs") == []
    _lookup(driver, TOPIC, "id", "NO-SUCH-CLIENT-ID")
    want_text = f"no message with id 'NO-SUCH-CLIENT-ID' in topic {TOPIC}"
    wait_until(lambda: _text(driver, "#merror") == want_text, 20, "unknown client id")
    errors = browser_errors(driver)
    assert errors and all(
        "/api/rocketmq/message" in e and ("400" in e or "404" in e) for e in errors
    ), errors
    assert "Traceback" not in console.log()


def test_a_grpc_consumer_is_listed_with_its_protocol_version_and_lag(
    root: Path,
    cluster: Cluster,
    group: BrokerGroup,
    console: ConsoleProcess,
    driver: Any,
    rocketmq5_python: Path,
) -> None:
    """RocketMQ 5's Python SimpleConsumer (gRPC) receives 3 messages and acks them, then holds
    a fourth in flight: its group's lag, in flight and lag in time on the page are what
    `consumer lag` answers, and its client is listed as gRPC with its own version."""
    from selenium.webdriver.common.by import By

    master = group.master
    endpoint = master.args[master.args.index("--listen-grpc") + 1]
    steps = [
        {"op": "receive", "expect": 3, "max": 3, "invisible_s": 60},
        {"op": "ack"},
        {"op": "receive", "expect": 1, "max": 1, "invisible_s": 120},
        {"op": "sleep", "s": 90},
    ]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HOME"] = str(root)
    out_path = root / "grpc.out"
    out = out_path.open("wb")
    consumer = subprocess.Popen(
        [str(rocketmq5_python), GRPC_CONSUMER, endpoint, TOPIC, GRPC_GROUP, "simple"],
        stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        assert consumer.stdin is not None
        consumer.stdin.write(json.dumps({"steps": steps}).encode())
        consumer.stdin.close()

        def events(kind: str) -> int:
            return out_path.read_text().count(f'"event": "{kind}"')

        wait_until(lambda: events("received") >= 4 and events("acked") >= 3, 120, "4 received")
        assert events("received") == 4 and events("error") == 0, out_path.read_text()
        driver.get(f"{console.url}/rocketmq?group={GRPC_GROUP}&topic={TOPIC}")

        def same() -> bool:
            before = _cli(root, cluster, "consumer", "lag", "--group", GRPC_GROUP)
            row = _group_row(driver, GRPC_GROUP)
            after = _cli(root, cluster, "consumer", "lag", "--group", GRPC_GROUP)
            return before == after and row[2:7] == [*_lag_cells(before), "1", "grpc 5.1.2"]

        wait_until(same, 60, "the gRPC group's row equal to consumer lag")
        lag = _cli(root, cluster, "consumer", "lag", "--group", GRPC_GROUP, "--topic", TOPIC)
        (q,) = lag["queues"]
        assert (q["inflight"], q["lag"]) == (1, q["brokerOffset"] - 3) and q["lagMs"] > 0
        cells = _wait_rows(driver, "#lag", lambda t: len(t) == 1, "the gRPC group's queue")[0]
        assert cells[3:8] == [str(q["brokerOffset"]), "3", "1", str(q["lag"]), lag_time(q["lagMs"])]

        def one_client() -> bool:  # online is now: the group clicked again asks again
            driver.find_element(
                By.CSS_SELECTOR, f"#cgroups tr[data-group='{GRPC_GROUP}'] a"
            ).click()
            return len(_wait_rows(driver, "#clients", lambda t: len(t) > 0, "a client")) == 1

        wait_until(one_client, 60, lambda: f"the gRPC client: {_table(driver, '#clients')}")
        clients = _table(driver, "#clients")
        assert clients[0][2:] == ["PYTHON", "grpc", "5.1.2", master.address]
        driver.execute_script("document.getElementById('gform').scrollIntoView()")
        screenshot(driver, root / SHOTS, "rocketmq-grpc")
        assert browser_errors(driver) == []
    finally:
        _stop(consumer)
        out.close()


def _show_producers(driver: Any, group: str) -> list[list[str]]:
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "pgroup")
    box.clear()
    box.send_keys(group)
    driver.find_element(By.CSS_SELECTOR, "#pform button").click()
    wait_until(lambda: f"of {group}:" in _text(driver, "#pkind"), 20, f"the producers of {group}")
    return _table(driver, "#producers")


def _producer_rows(addr: str, group: str) -> list[list[str]]:
    """What GET_PRODUCER_CONNECTION_LIST answers on ``addr``, as the page's rows."""
    r = blocking_call(addr, GetProducerConnectionListHeader(group).request(), 10)
    if r.code != 0:
        return []
    doc = json.loads(r.body)
    protocols = doc["clientProtocols"]
    return [
        [c["clientId"], c["clientAddr"], c["language"], protocols[c["clientId"]]["protocol"],
         protocols[c["clientId"]]["version"], addr]
        for c in doc["connectionSet"]
    ]  # fmt: skip


def test_producers_online_are_what_the_broker_lists(
    root: Path,
    cluster: Cluster,
    group: BrokerGroup,
    console: ConsoleProcess,
    driver: Any,
    rocketmq5_python: Path,
) -> None:
    """A producer of the 4.x `rocketmq` wheel (remoting, its heartbeats' producer data) and
    RocketMQ 5's Python producer (gRPC, its Telemetry settings: its group is the topic) stay
    online: the page's Producers table is what the master's GET_PRODUCER_CONNECTION_LIST
    answers at the same moment; a group nobody produces for says so."""
    master = group.master
    spec = [{"topic": TOPIC, "body_hex": b"p1".hex(), "keys": "p-1"}, {"sleep_s": 120}]
    env = cli_env(root)
    env["HOME"] = str(root)
    namesrv = f"127.0.0.1:{cluster.nodes[0].remoting_port}"
    wheel_out = (root / "wheel-producer.out").open("wb")
    wheel = subprocess.Popen(
        [sys.executable, WHEEL, "produce", namesrv, PRODUCER_GROUP],
        stdin=subprocess.PIPE, stdout=wheel_out, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    genv = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    genv["HOME"] = str(root)
    endpoint = master.args[master.args.index("--listen-grpc") + 1]
    grpc_out = (root / "grpc-producer.out").open("wb")
    grpc = subprocess.Popen(
        [str(rocketmq5_python), GRPC_PRODUCER, endpoint, TOPIC],
        stdin=subprocess.PIPE, stdout=grpc_out, stderr=subprocess.STDOUT, env=genv,
    )  # fmt: skip
    try:
        for proc, items in ((wheel, spec), (grpc, [{"body_hex": b"p2".hex()}, {"sleep_s": 120}])):
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(items).encode())
            proc.stdin.close()
        driver.get(f"{console.url}/rocketmq")
        for name, protocol in ((PRODUCER_GROUP, "remoting"), (TOPIC, "grpc")):

            def same(name: str = name) -> bool:
                before = _producer_rows(master.address, name)
                rows = _show_producers(driver, name)
                after = _producer_rows(master.address, name)
                return len(before) == 1 and before == after and rows == before

            wait_until(same, 90, f"the producers of {name} equal the broker's list")
            (row,) = _table(driver, "#producers")
            assert row[3] == protocol and "1 online" in _text(driver, "#pkind")
        (row,) = _table(driver, "#producers")
        assert row[2:5] == ["PYTHON", "grpc", "5.1.2"]
        assert _show_producers(driver, PRODUCER_GROUP)[0][2] == "CPP"
        driver.execute_script("document.getElementById('pform').scrollIntoView()")
        screenshot(driver, root / SHOTS, "rocketmq-producers")
        assert _show_producers(driver, "nobody-produces") == []
        assert "nobody online" in _text(driver, "#pkind")
        assert browser_errors(driver) == []
    finally:
        for proc in (wheel, grpc):
            _stop(proc)
        wheel_out.close()
        grpc_out.close()


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
    status, body = console.get("/api/rocketmq/groups")
    assert status == 200 and body["groups"] == [] and master.address in body["errors"][0]
    status, body = console.get(f"/api/rocketmq/clients?group={CONSUMER}")
    assert status == 200 and body["clients"] == [] and master.address in body["errors"][0]
    status, body = console.get(f"/api/rocketmq/producers?group={PRODUCER_GROUP}")
    assert status == 200 and body["producers"] == [] and master.address in body["errors"][0]
    status, body = console.get("/api/rocketmq/brokers")
    (mine,) = [g for g in body["groups"] if g["group"] == group.name]
    assert status == 200 and master.address in mine["acked_error"], mine
    status, body = console.get(f"/api/rocketmq/message?topic={TOPIC}&key=order-7")
    assert status == 404 and master.address in body["error"], body
    for path in ("/api/rocketmq/topics?limit=0", "/api/rocketmq/lag", "/api/rocketmq/offsets",
                 "/api/rocketmq/groups?limit=0", "/api/rocketmq/clients", "/api/rocketmq/message",
                 "/api/rocketmq/producers",
                 "/api/rocketmq/message?key=k", "/api/rocketmq/message?id=zz"):  # fmt: skip
        status, body = console.get(path)
        assert status == 400 and "Traceback" not in body["error"], path
    status, body = console.get("/api/rocketmq/offsets?topic=NoSuchTopic")
    assert status in (400, 404) and "Traceback" not in body["error"]
    assert "Traceback" not in console.log()
