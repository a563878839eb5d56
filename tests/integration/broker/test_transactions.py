"""Transactional messages through a real ``metaledger broker`` over remoting, ``rmq.connection``
acting as the producer: a prepare is invisible until END_TRANSACTION commits it (then seen
once), never seen after a rollback, checked back on the producer's connection when left
without an answer (CHECK_TRANSACTION_STATE, answered with fromTransactionCheck), and a
restart between prepare and commit neither loses it nor shows it twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.transactions.half import physical_offset
from nameserver.client import Client, QueueData
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.connection import RemotingConnection
from rmq.headers import CheckTransactionStateHeader, PullMessageHeader, SendMessageHeader
from rmq.message import StoredMessage, decode_records, properties_text
from tests.harness import Cluster
from tests.integration.broker.conftest import BrokerProcess, metaledger, wait_for

pytestmark = [pytest.mark.integration]

TOPIC = "TxTopic"
GROUP = "TxProducers"
COMMIT, ROLLBACK = 8, 12
#: checks come quickly here: a half is checked once 1 s old, every 300 ms
FAST_CHECKS = ("--transaction-timeout-ms", "1000", "--transaction-check-interval-ms", "300")


class Env:
    def __init__(self, root: Path, node: Cluster, broker: BrokerProcess) -> None:
        self.root, self.node, self.broker = root, node, broker


@contextlib.contextmanager
def running(root: Path, name: str, *flags: str, grpc: bool = False) -> Iterator[Env]:
    """One metaledger node and one broker replica with fast checks, serving TOPIC (``grpc``:
    with a gRPC port picked free, ``broker.grpc_port``)."""
    node = Cluster(root / "node", n=1)
    broker = None
    try:
        node.wait_ready(30)
        broker = BrokerProcess(root, node.endpoints, name, *flags, *FAST_CHECKS, grpc=grpc)
        with Client(node.endpoints, timeout_s=10) as client:
            wait_for(
                f"{name} registered",
                lambda: client.route_cluster_info().clusters.get("DefaultCluster"),
            )
            client.route_topic_create(TOPIC, [QueueData(name, 1, 1, 6)])
        yield Env(root, node, broker)
    finally:
        code = 0
        if broker is not None:
            code = broker.stop()
            print(broker.log_tail())
        node.close()  # before the assert: a failed broker must not leave the node running
        assert code == 0, f"broker exited {code}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with running(tmp_path_factory.mktemp("tx"), "broker-a", "--listen-grpc", "off") as e:
        yield e


async def connect(env: Env) -> RemotingConnection:
    return await RemotingConnection.connect("127.0.0.1", env.broker.port)


async def prepare(
    c: RemotingConnection, body: bytes, uniq: str, topic: str = TOPIC
) -> RemotingCommand:
    h = SendMessageHeader(
        producer_group=GROUP, topic=topic, queue_id=0, sys_flag=0x4,
        born_timestamp=int(time.time() * 1000), flag=0,
        properties=properties_text({"TRAN_MSG": "true", "PGROUP": GROUP, "UNIQ_KEY": uniq}),
    )  # fmt: skip
    r = await c.call(h.request_v2(body), timeout_s=10)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return r


async def end(
    c: RemotingConnection,
    table_offset: int,
    commit_log_offset: int,
    msg_id: str,
    resolution: int,
    from_check: bool = False,
) -> RemotingCommand:
    fields = {
        "producerGroup": GROUP, "tranStateTableOffset": table_offset,
        "commitLogOffset": commit_log_offset, "commitOrRollback": resolution,
        "fromTransactionCheck": from_check, "msgId": msg_id,
    }  # fmt: skip
    return await c.request(RequestCode.END_TRANSACTION, fields, timeout_s=10)


async def end_sent(
    c: RemotingConnection, sent: RemotingCommand, resolution: int
) -> RemotingCommand:
    msg_id = sent.ext_fields["msgId"]
    offset = physical_offset(msg_id)
    assert offset is not None
    return await end(c, int(sent.ext_fields["queueOffset"]), offset, msg_id, resolution)


async def pull_all(c: RemotingConnection, topic: str = TOPIC) -> list[StoredMessage]:
    out: list[StoredMessage] = []
    offset = 0
    while True:
        pull = PullMessageHeader(
            consumer_group="inspect", topic=topic, queue_id=0, queue_offset=offset,
            max_msg_nums=32, sys_flag=0x4, commit_offset=0, suspend_timeout_ms=0,
            sub_version=0, subscription="*",
        )  # fmt: skip
        r = await c.call(pull.request(), timeout_s=10)
        if r.code != 0:
            return out
        got = decode_records(r.body)
        out.extend(got)
        offset = int(r.ext_fields["nextBeginOffset"])
        if not got:
            return out


def count(messages: list[StoredMessage], uniq: str) -> int:
    return sum(1 for m in messages if m.properties.get("UNIQ_KEY") == uniq)


def seen(env: Env, uniq: str) -> int:
    async def go() -> int:
        c = await connect(env)
        try:
            return count(await pull_all(c), uniq)
        finally:
            await c.close()

    return asyncio.run(go())


async def heartbeat(c: RemotingConnection, client_id: str) -> None:
    body = json.dumps(
        {"clientID": client_id, "producerDataSet": [{"groupName": GROUP}], "consumerDataSet": []}
    ).encode()
    r = await c.request(RequestCode.HEART_BEAT, {}, body)
    assert r.code == ResponseCode.SUCCESS, r.remark


def test_commit_is_seen_once_and_rollback_never(env: Env) -> None:
    async def go() -> None:
        c = await connect(env)
        try:
            committed = await prepare(c, b"commit me", "tx-commit")
            rolled = await prepare(c, b"roll me back", "tx-rollback")
            await asyncio.sleep(0.3)
            assert not any(
                m.properties.get("UNIQ_KEY", "").startswith("tx-") for m in await pull_all(c)
            )
            assert (await end_sent(c, committed, COMMIT)).code == ResponseCode.SUCCESS
            assert (await end_sent(c, rolled, ROLLBACK)).code == ResponseCode.SUCCESS
            again = await end_sent(c, committed, COMMIT)
            assert again.code == ResponseCode.SUCCESS and "already" in (again.remark or "")
        finally:
            await c.close()

    asyncio.run(go())
    assert seen(env, "tx-commit") == 1
    assert seen(env, "tx-rollback") == 0
    time.sleep(1.5)  # past the timeout: the check asks nothing and shows nothing again
    assert seen(env, "tx-commit") == 1 and seen(env, "tx-rollback") == 0


def test_a_half_without_an_answer_is_checked_on_the_producers_connection(env: Env) -> None:
    async def go() -> None:
        producer = await connect(env)
        try:
            await heartbeat(producer, "tx-producer-1")
            sent = await prepare(producer, b"check me", "tx-check")
            notifications = producer.notifications
            assert notifications is not None

            def checks() -> list[RemotingCommand]:
                return [n for n in notifications if n.code == RequestCode.CHECK_TRANSACTION_STATE]

            deadline = time.monotonic() + 15
            while not checks():
                assert time.monotonic() < deadline, "no CHECK_TRANSACTION_STATE arrived"
                await asyncio.sleep(0.1)
            check = checks()[0]
            h = CheckTransactionStateHeader.from_command(check)
            assert h.msg_id == "tx-check" and h.transaction_id == "tx-check"
            assert h.topic == TOPIC and h.broker_name == "broker-a"
            assert h.commit_log_offset != physical_offset(sent.ext_fields["msgId"])  # the copy
            (half,) = decode_records(check.body)
            assert half.body == b"check me" and half.topic == TOPIC
            assert count(await pull_all(producer), "tx-check") == 0
            r = await end(
                producer, h.tran_state_table_offset, h.commit_log_offset, h.msg_id or "",
                COMMIT, from_check=True,
            )  # fmt: skip
            assert r.code == ResponseCode.SUCCESS, r.remark
            asked = len(checks())
            await asyncio.sleep(1.5)  # ended: no more checks of it
            assert len(checks()) == asked
        finally:
            await producer.close()

    asyncio.run(go())
    assert seen(env, "tx-check") == 1


def test_a_restart_between_prepare_and_commit(env: Env) -> None:
    async def before() -> tuple[RemotingCommand, RemotingCommand]:
        c = await connect(env)
        try:
            done = await prepare(c, b"ended before", "tx-restart-a")
            assert (await end_sent(c, done, COMMIT)).code == ResponseCode.SUCCESS
            return done, await prepare(c, b"ended after", "tx-restart-b")
        finally:
            await c.close()

    done, open_one = asyncio.run(before())
    assert env.broker.stop() == 0, env.broker.log_tail()
    env.broker.start()
    wait_for("the broker's routes", lambda: seen(env, "tx-restart-a") == 1, timeout=30)

    async def after() -> None:
        c = await connect(env)
        try:
            r = await end_sent(c, open_one, COMMIT)
            assert r.code == ResponseCode.SUCCESS, r.remark
            again = await end_sent(c, done, COMMIT)  # ended before the restart: remembered
            assert again.code == ResponseCode.SUCCESS and "already" in (again.remark or "")
            other_way = await end_sent(c, open_one, ROLLBACK)
            assert other_way.code == ResponseCode.SYSTEM_ERROR, other_way.remark
        finally:
            await c.close()

    asyncio.run(after())
    time.sleep(1.5)  # the check after the restart asks nothing and shows nothing twice
    assert seen(env, "tx-restart-a") == 1
    assert seen(env, "tx-restart-b") == 1


def test_metaledger_send_transaction_commit_and_rollback(env: Env) -> None:
    ends = {"commit": "cli-commit", "rollback": "cli-rollback"}
    for resolution, body in ends.items():
        r = metaledger(
            env.root, "send", TOPIC, body, "--transaction", resolution,
            "--producer-group", GROUP, "--endpoints", env.node.endpoints[0],
        )  # fmt: skip
        assert r.returncode == 0, r.stderr.decode()
        assert f"transaction={resolution}" in r.stdout.decode()

    async def bodies() -> list[bytes]:
        c = await connect(env)
        try:
            return [m.body for m in await pull_all(c)]
        finally:
            await c.close()

    wait_for("the committed one", lambda: b"cli-commit" in asyncio.run(bodies()))
    time.sleep(1.5)  # past the check timeout: still once, the rolled back one never
    got = asyncio.run(bodies())
    assert got.count(b"cli-commit") == 1 and b"cli-rollback" not in got


TX_PRODUCER = str(Path(__file__).with_name("grpc_transaction.py"))


def test_a_5x_transactional_producer_commits_rolls_back_and_answers_checks(
    rocketmq5_python: Path, tmp_path: Path
) -> None:
    """The 5.x client's Transaction (commit, rollback) and its TransactionChecker answering
    the server's recover_orphaned_transaction_command with COMMIT; the 4.x pull reads back
    exactly the committed ones, once each."""
    with running(tmp_path, "broker-g", grpc=True) as e:
        broker = e.broker
        grpc_port = broker.grpc_port
        spec = [
            {"body_hex": b"committed".hex(), "action": "commit"},
            {"body_hex": b"rolled back".hex(), "action": "rollback"},
            {"body_hex": b"checked".hex(), "action": "check"},
        ]
        clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        clean["HOME"] = str(tmp_path)  # the client logs under $HOME/logs
        r = subprocess.run(
            [str(rocketmq5_python), TX_PRODUCER, f"127.0.0.1:{grpc_port}", TOPIC],
            input=json.dumps(spec).encode(), capture_output=True, timeout=180, env=clean,
            check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:] + broker.log_tail()
        lines = [json.loads(x) for x in r.stdout.decode().splitlines() if x.startswith("{")]
        *sent, checked = lines
        assert all("transaction_id" in s for s in sent), lines
        ids = [s["message_id"] for s in sent]
        assert checked == {"checked": [ids[2]]}, (lines, broker.log_tail())

        async def pulled() -> list[StoredMessage]:
            c = await connect(e)
            try:
                return await pull_all(c)
            finally:
                await c.close()

        found: list[StoredMessage] = []

        def both() -> bool:
            found[:] = asyncio.run(pulled())
            return len(found) >= 2

        wait_for("the committed messages", both, timeout=30, every=0.2)
        time.sleep(1.5)  # and nothing more, nothing twice
        found[:] = asyncio.run(pulled())
        assert sorted(m.body for m in found) == [b"checked", b"committed"]
        assert sorted(m.properties["UNIQ_KEY"] for m in found) == sorted([ids[0], ids[2]])
