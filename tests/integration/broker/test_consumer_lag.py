"""Consumer lag against a real ``metaledger broker`` and metaledger node, for the three kinds of
consumer on one topic: a pull group (committed offsets), a remoting POP group and a RocketMQ 5
gRPC SimpleConsumer group (``rocketmq-python-client`` 5.1.2): GET_CONSUME_STATS (208),
``metaledger consumer lag`` and the metrics' ``metaledger_broker_consumer_lag`` /
``_inflight`` agree (10 sent, 4 consumed, 2 in flight → lag 6 with 2 in flight); and
``metaledger send --fifo-group`` puts a group in one queue, which ``consume --pop --fifo``
reads in order; a live gRPC consumer is in its group's GET_CONSUMER_CONNECTION_LIST (203)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq.connection import RemotingConnection
from rmq.consume_stats import QueueOffsets, decode_consume_stats
from rmq.headers import (
    AckMessageHeader,
    GetConsumerConnectionListHeader,
    GetConsumeStatsHeader,
    PopMessageHeader,
    SendMessageHeader,
    UpdateConsumerOffsetHeader,
)
from rmq.message import StoredMessage, decode_records
from tests.integration.broker.conftest import metaledger, wait_for
from tests.integration.broker.test_grpc_consumer import CONSUMER, consume, events
from tests.integration.broker.test_grpc_producer import QUEUES, Env, grpc_env

pytestmark = [pytest.mark.integration]

TOPIC, FIFO_TOPIC = "LagTopic", "FifoLagTopic"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Env, int]]:
    root = tmp_path_factory.mktemp("lag")
    with grpc_env(root, topics=(TOPIC, FIFO_TOPIC), metrics=True) as e:
        yield e, e.broker.metrics_port


async def _setup(port: int) -> None:
    """10 messages over the 4 queues; PULLG commits 4 of them; POPG pops 6 and acks 4."""
    c = await RemotingConnection.connect("127.0.0.1", port)
    try:
        for i in range(10):
            send = SendMessageHeader(
                producer_group="PG", topic=TOPIC, queue_id=i % QUEUES, sys_flag=0,
                born_timestamp=int(time.time() * 1000), flag=0, properties="",
            )  # fmt: skip
            r = await c.call(send.request(f"m{i}".encode()))
            assert r.code == 0, r.remark
        # queue 0 holds m0 m4 m8, queue 1 m1 m5 m9: 3 + 1 consumed
        for q, offset in ((0, 3), (1, 1)):
            r = await c.call(UpdateConsumerOffsetHeader("PULLG", TOPIC, q, offset).request())
            assert r.code == 0
        popped: list[tuple[StoredMessage, str]] = []
        for q in range(QUEUES):
            pop = PopMessageHeader(
                consumer_group="POPG", topic=TOPIC, queue_id=q, max_msg_nums=6 - len(popped),
                invisible_time=120_000, poll_time=0, born_time=0, init_mode=0,
            )  # fmt: skip
            r = await c.call(pop.request())
            if r.code == 0:
                e = r.ext_fields
                start = e["startOffsetInfo"].split(" ")[2]
                for m in decode_records(r.body):
                    handle = (f"{start} {e['popTime']} {e['invisibleTime']} 0 0 broker-a "
                              f"{q} {m.queue_offset}")  # fmt: skip
                    popped.append((m, handle))
            if len(popped) == 6:
                break
        assert len(popped) == 6
        for m, handle in popped[:4]:
            ack = AckMessageHeader("POPG", TOPIC, m.queue_id, handle, m.queue_offset)
            assert (await c.call(ack.request())).code == 0
    finally:
        await c.close()


async def _stats(port: int, group: str) -> list[QueueOffsets]:
    c = await RemotingConnection.connect("127.0.0.1", port)
    try:
        r = await c.call(GetConsumeStatsHeader(group, TOPIC).request())
    finally:
        await c.close()
    assert r.code == 0, r.remark
    return decode_consume_stats(r.body)[0]


def test_lag_of_pull_pop_and_grpc_groups(rocketmq5_python: Path, env: tuple[Env, int]) -> None:
    e, metrics_port = env
    wait_for("POP served", lambda: asyncio.run(_stats(e.broker.port, "probe")) is not None)
    asyncio.run(_setup(e.broker.port))
    # the gRPC group: 4 received and acked, then 2 received and held
    spec = {"steps": [
        {"op": "receive", "expect": 4, "max": 1, "invisible_s": 120},
        {"op": "ack"},
        {"op": "receive", "expect": 2, "max": 1, "invisible_s": 120},
    ]}  # fmt: skip
    out = consume(rocketmq5_python, e, TOPIC, "GRPCG", "simple", spec)
    assert len(events(out, "received")) == 6 and len(events(out, "acked")) == 4, out

    for group, inflight in (("PULLG", 0), ("POPG", 2), ("GRPCG", 2)):
        rows = asyncio.run(_stats(e.broker.port, group))
        assert len(rows) == QUEUES
        assert sum(r.broker_offset for r in rows) == 10
        assert (sum(r.lag for r in rows), sum(r.inflight for r in rows)) == (6, inflight), rows
        r = metaledger(
            e.root, "consumer", "lag", "--group", group, "--topic", TOPIC, "-w", "json",
            "--endpoints", e.node.endpoints[0],
        )  # fmt: skip
        assert r.returncode == 0, r.stderr.decode()
        doc = json.loads(r.stdout)
        assert (doc["lag"], doc["inflight"], len(doc["queues"])) == (6, inflight, QUEUES)
        # without --topic: every topic the group has offsets of, on every master
        r = metaledger(
            e.root, "consumer", "lag", "--group", group, "--endpoints", e.node.endpoints[0]
        )
        assert r.returncode == 0, r.stderr.decode()
        total = r.stdout.decode().splitlines()[-1]
        assert total.startswith(f"total lag 6 inflight {inflight} lag time "), total

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    lag: dict[str, float] = {}
    inflight_seen: dict[str, float] = {}
    for line in text.splitlines():
        for name, into in (("metaledger_broker_consumer_lag{", lag),
                           ("metaledger_broker_consumer_inflight{", inflight_seen)):  # fmt: skip
            if line.startswith(name) and f'topic="{TOPIC}"' in line:
                group = line.split('consumer_group="')[1].split('"')[0]
                into[group] = into.get(group, 0.0) + float(line.rsplit(" ", 1)[1])
    assert lag == {"PULLG": 6.0, "POPG": 6.0, "GRPCG": 6.0}, text
    assert inflight_seen == {"PULLG": 0.0, "POPG": 2.0, "GRPCG": 2.0}


def test_send_fifo_group_and_consume_pop_fifo(env: tuple[Env, int]) -> None:
    e, _ = env
    endpoints = ("--endpoints", e.node.endpoints[0])
    queues = set()
    for i in range(6):
        group = f"order-{i % 2}"
        r = metaledger(e.root, "send", FIFO_TOPIC, f"{group}:{i}", "--fifo-group", group,
                       "-w", "json", *endpoints)  # fmt: skip
        assert r.returncode == 0, r.stderr.decode()
        queues.add((group, json.loads(r.stdout)["queueId"]))
    assert len({g for g, _ in queues}) == 2 and len(queues) == 2  # one queue per group
    r = metaledger(
        e.root, "consume", FIFO_TOPIC, "--group", "FIFOREADER", "--pop", "--fifo",
        "--invisible", "30", "--count", "6", "--wait", "30", "-w", "json", *endpoints,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    got = [json.loads(line) for line in r.stdout.decode().splitlines()]
    assert len(got) == 6
    for group in ("order-0", "order-1"):
        mine = [d for d in got if d["messageGroup"] == group]
        assert [d["body"] for d in mine] == [
            f"{group}:{i}" for i in range(6) if i % 2 == int(group[-1])
        ]
        assert {d["attempt"] for d in mine} == {1}
        assert len({d["queueId"] for d in mine}) == 1
    # everything acked: the POP group has no lag left
    r = metaledger(e.root, "consumer", "lag", "--group", "FIFOREADER", "--topic", FIFO_TOPIC,
                   "-w", "json", *endpoints)  # fmt: skip
    assert r.returncode == 0 and json.loads(r.stdout)["lag"] == 0, r.stdout


async def _connections(port: int, group: str) -> tuple[int, bytes]:
    c = await RemotingConnection.connect("127.0.0.1", port)
    try:
        r = await c.call(GetConsumerConnectionListHeader(group).request())
    finally:
        await c.close()
    return r.code, r.body


def test_a_live_grpc_consumer_is_in_its_groups_connection_list(
    rocketmq5_python: Path, env: tuple[Env, int]
) -> None:
    e, _ = env
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    clean["HOME"] = str(e.root)
    # it heartbeats at 1 s, then every 10 s; it stays until it was seen listed
    seen = e.root / "liveg-listed"
    spec = {"steps": [{"op": "wait_file", "path": str(seen), "within_s": 30}]}
    proc = subprocess.Popen(
        [str(rocketmq5_python), CONSUMER, f"127.0.0.1:{e.grpc_port}", TOPIC, "LIVEG", "simple"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=clean,
    )  # fmt: skip
    try:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(spec).encode())
        proc.stdin.close()
        found: dict[str, Any] = {}

        def listed() -> bool:
            code, body = asyncio.run(_connections(e.broker.port, "LIVEG"))
            if code == 0:
                found.update(json.loads(body))
            return code == 0

        wait_for("the gRPC consumer listed", listed, timeout=20)
        seen.touch()
        (conn,) = found["connectionSet"]
        assert conn["language"] == "PYTHON" and conn["clientAddr"].startswith("127.0.0.1:")
        assert found["consumeType"] == "CONSUME_POP"
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # it terminated: its group is not online any more
    assert asyncio.run(_connections(e.broker.port, "LIVEG"))[0] == 206
