"""Transactions over remoting in one in-process replica (issue 30): a prepare (``TRAN_MSG=true`` or
a prepared-type sysflag, on every send code) is stored on the half topic and invisible; a batch
holding one is refused with NO_PERMISSION and RocketMQ's ``rejectTransactionMessage`` remark;
END_TRANSACTION commits (once), rolls back, and refuses what names no half, changing nothing;
the check asks the producer's connection (CHECK_TRANSACTION_STATE) on a fake clock."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from broker.send.processor import is_half_message
from broker.transactions.half import CHECK_GROUP, HALF_TOPIC, OP_TOPIC, physical_offset
from rmq.batch import BatchItem, encode_batch
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.connection import RemotingConnection
from rmq.headers import CheckTransactionStateHeader
from rmq.message import StoredMessage, decode
from tests.unit.broker.front.conftest import TOPIC, Ctx, props, run_broker
from tests.unit.broker.front.test_send_pull import records

FORBIDDEN = "sending transaction message is forbidden"


@pytest.mark.parametrize(
    ("sys_flag", "reconsume_times", "properties", "half"),
    [
        (0, 0, {}, False),
        (0, 0, {"TRAN_MSG": "true"}, True),
        (0, 0, {"TRAN_MSG": "TRUE"}, True),  # Java's Boolean.parseBoolean
        (0, 0, {"TRAN_MSG": "false"}, False),
        (0x4, 0, {}, True),  # MessageSysFlag.TRANSACTION_PREPARED_TYPE
        (0x8, 0, {}, False),  # committed / rolled back types are not a prepare half
        (0xC, 0, {}, False),
        (0x4 | 0x1, 0, {}, True),  # compressed too
        # a pre-4.6.1 client's retried message keeps TRAN_MSG: exempt, as RocketMQ does
        (0, 1, {"TRAN_MSG": "true", "DELAY": "3"}, False),
        (0, 1, {"TRAN_MSG": "true"}, True),
        (0, 0, {"TRAN_MSG": "true", "DELAY": "3"}, True),
    ],
)
def test_is_half_message(
    sys_flag: int, reconsume_times: int, properties: dict[str, str], half: bool
) -> None:
    assert is_half_message(sys_flag, reconsume_times, properties) is half


async def max_offset(ctx: Ctx, topic: str = TOPIC, queue_id: int = 0) -> int:
    r = await ctx.client.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return int(r.ext_fields["offset"])


async def visible(ctx: Ctx, topic: str = TOPIC, queue_id: int = 0) -> list[StoredMessage]:
    """Every message a consumer of the queue sees."""
    out: list[StoredMessage] = []
    offset = 0
    while True:
        r = await ctx.pull(offset, topic=topic, queue_id=queue_id)
        if r.code != ResponseCode.SUCCESS:
            assert r.code == ResponseCode.PULL_NOT_FOUND, (r.code, r.remark)
            return out
        out += [decode(x) for x in records(r.body)]
        offset = int(r.ext_fields["nextBeginOffset"])


async def prepare(ctx: Ctx, body: bytes, **extra: Any) -> RemotingCommand:
    extra.setdefault("bornTimestamp", int(time.time() * 1000))
    r = await ctx.send(
        body, properties=props(TRAN_MSG="true", PGROUP="PG", UNIQ_KEY=f"U-{body.decode()}"), **extra
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    return r


def end_fields(sent: RemotingCommand, resolution: int, **extra: Any) -> dict[str, Any]:
    msg_id = sent.ext_fields["msgId"]
    fields: dict[str, Any] = {
        "producerGroup": "PG",
        "tranStateTableOffset": int(sent.ext_fields["queueOffset"]),
        "commitLogOffset": physical_offset(msg_id),
        "commitOrRollback": resolution,
        "fromTransactionCheck": False,
        "msgId": msg_id,
    }
    fields.update(extra)
    return fields


async def end(ctx: Ctx, sent: RemotingCommand, resolution: int, **extra: Any) -> RemotingCommand:
    return await ctx.client.request(
        RequestCode.END_TRANSACTION, end_fields(sent, resolution, **extra)
    )


COMMIT, ROLLBACK = 8, 12


def test_half_messages_are_stored_invisible_and_batches_refused(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        tran = props(TRAN_MSG="true", PGROUP="PG")
        for r in [
            await ctx.send(b"half", properties=tran),
            await ctx.send(b"half", properties=tran, code=RequestCode.SEND_MESSAGE_V2),
            await ctx.send(b"half", sysFlag=0x4, properties=props(PGROUP="PG")),
        ]:
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert r.ext_fields["queueId"] == "0"
        assert await max_offset(ctx) == 0  # nothing visible on the real topic
        assert await max_offset(ctx, HALF_TOPIC) == 3
        halves = await ctx.replica.transactions.read(HALF_TOPIC, 0, 3)
        for h in halves:
            assert h.topic == HALF_TOPIC and h.sysflag & 0xC == 0
            assert h.properties["REAL_TOPIC"] == TOPIC and h.properties["REAL_QID"] == "0"

        log_end = ctx.replica.store.log.end_offset
        refusals = [
            await ctx.send(
                encode_batch(
                    [BatchItem(0, b"ok", {}), BatchItem(0, b"half", {"TRAN_MSG": "true"})]
                ),
                code=RequestCode.SEND_BATCH_MESSAGE,
                batch=True,
            ),
            await ctx.send(
                encode_batch([BatchItem(0, b"a", {})]),
                code=RequestCode.SEND_BATCH_MESSAGE,
                batch=True,
                sysFlag=0x4,
            ),
        ]
        for r in refusals:
            assert r.code == ResponseCode.NO_PERMISSION, (r.code, r.remark)
            assert f"the broker[127.0.0.1] {FORBIDDEN}" in (r.remark or "")
        assert ctx.replica.store.log.end_offset == log_end

        # ordinary sends still go through, on the same connection
        ok = await ctx.send(b"plain", properties=props(TRAN_MSG="false"))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        assert await max_offset(ctx) == 1

    run_broker(tmp_path, scenario)


def test_commit_is_seen_once_and_a_second_end_writes_nothing(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        sent = await prepare(ctx, b"t1", queueId=2)
        assert await visible(ctx, queue_id=2) == []
        r = await end(ctx, sent, COMMIT)
        assert r.code == ResponseCode.SUCCESS, r.remark
        (m,) = await visible(ctx, queue_id=2)
        assert m.body == b"t1" and m.queue_id == 2
        assert m.properties["UNIQ_KEY"] == "U-t1"
        assert m.sysflag & 0xC == 0x8  # the commit type
        for gone in ("TRAN_MSG", "REAL_TOPIC", "REAL_QID", "__transactionId__"):
            assert gone not in m.properties
        assert m.prepared_tx_offset == physical_offset(sent.ext_fields["msgId"])
        assert await max_offset(ctx, OP_TOPIC) == 1

        log_end = ctx.replica.store.log.end_offset
        again = await end(ctx, sent, COMMIT)
        assert again.code == ResponseCode.SUCCESS
        assert "already committed" in (again.remark or "")
        checked = await end(ctx, sent, COMMIT, fromTransactionCheck=True)
        assert checked.code == ResponseCode.SUCCESS
        other_way = await end(ctx, sent, ROLLBACK)
        assert other_way.code == ResponseCode.SYSTEM_ERROR
        assert "already committed" in (other_way.remark or "")
        # concurrent ends of one half: one write
        answers = await asyncio.gather(*(end(ctx, sent, COMMIT) for _ in range(5)))
        assert all(a.code == ResponseCode.SUCCESS for a in answers)
        assert ctx.replica.store.log.end_offset == log_end
        assert len(await visible(ctx, queue_id=2)) == 1

    run_broker(tmp_path, scenario)


def test_concurrent_first_ends_write_once(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        sent = await prepare(ctx, b"race")
        answers = await asyncio.gather(*(end(ctx, sent, COMMIT) for _ in range(4)))
        assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 4
        assert sum(1 for a in answers if a.remark is None) == 1
        assert [m.body for m in await visible(ctx)] == [b"race"]
        assert await max_offset(ctx, OP_TOPIC) == 1

    run_broker(tmp_path, scenario)


def test_rollback_writes_only_the_op_and_is_never_seen(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        sent = await prepare(ctx, b"t2")
        r = await end(ctx, sent, ROLLBACK)
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert await max_offset(ctx, OP_TOPIC) == 1
        commit = await end(ctx, sent, COMMIT)
        assert commit.code == ResponseCode.SYSTEM_ERROR
        assert "already rolled back" in (commit.remark or "")
        assert await visible(ctx) == []
        # UNKNOWN (0) leaves it open, writes nothing
        other = await prepare(ctx, b"t3")
        log_end = ctx.replica.store.log.end_offset
        pending = await end(ctx, other, 0)
        assert pending.code == ResponseCode.SUCCESS and "stays open" in (pending.remark or "")
        assert ctx.replica.store.log.end_offset == log_end

    run_broker(tmp_path, scenario)


def test_end_transaction_bad_input_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        plain = await ctx.send(b"plain")
        sent = await prepare(ctx, b"t4")
        log_end = ctx.replica.store.log.end_offset
        cases = [
            (end_fields(sent, COMMIT, commitLogOffset=10**9), "no message at commit log offset"),
            (
                end_fields(
                    sent, COMMIT, commitLogOffset=physical_offset(plain.ext_fields["msgId"])
                ),
                "holds no half message",
            ),
            (
                end_fields(sent, COMMIT, commitLogOffset=7),
                "Find prepared transaction message failed",
            ),
            (end_fields(sent, COMMIT, producerGroup="OTHER"), "The producer group wrong"),
            (end_fields(sent, COMMIT, tranStateTableOffset=5), "state table offset wrong"),
            (end_fields(sent, 5), "<commitOrRollback> is 5"),
            ({"producerGroup": "PG", "tranStateTableOffset": 0, "commitLogOffset": 0}, "null"),
        ]
        for fields, words in cases:
            r = await ctx.client.request(RequestCode.END_TRANSACTION, fields)
            assert r.code == ResponseCode.SYSTEM_ERROR, (fields, r.code, r.remark)
            assert words in (r.remark or ""), (words, r.remark)
        assert ctx.replica.store.log.end_offset == log_end
        assert [m.body for m in await visible(ctx)] == [b"plain"]
        # the half is still open: a right end still works
        assert (await end(ctx, sent, COMMIT)).code == ResponseCode.SUCCESS
        assert [m.body for m in await visible(ctx)] == [b"plain", b"t4"]

    run_broker(tmp_path, scenario)


async def heartbeat(client: RemotingConnection, group: str = "PG") -> None:
    body = json.dumps(
        {"clientID": "producer-1", "producerDataSet": [{"groupName": group}], "consumerDataSet": []}
    ).encode()
    r = await client.request(RequestCode.HEART_BEAT, {}, body)
    assert r.code == ResponseCode.SUCCESS, r.remark


def test_check_asks_the_producer_after_the_timeout_and_its_answer_commits(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        producer = await ctx.connect()
        await heartbeat(producer)
        sent = await prepare(ctx, b"t5")
        checks = ctx.replica.checks
        now = time.time() * 1000
        checks.clock = lambda: int(now + 5000)  # younger than transactionTimeOut (6 s)
        assert await checks.check_round() == 0
        assert producer.notifications == []
        checks.clock = lambda: int(now + 7000)
        assert await checks.check_round() == 1
        await asyncio.sleep(0.2)
        assert producer.notifications is not None
        (check,) = producer.notifications
        assert check.code == RequestCode.CHECK_TRANSACTION_STATE and check.is_oneway
        h = CheckTransactionStateHeader.from_command(check)
        assert h.topic == TOPIC and h.msg_id == "U-t5" and h.transaction_id == "U-t5"
        assert h.broker_name == "broker-a"
        half = decode(check.body)
        assert half.topic == TOPIC and half.body == b"t5"
        assert half.properties["TRANSACTION_CHECK_TIMES"] == "1"
        # the check names the copy put back on the half queue
        assert h.tran_state_table_offset == int(sent.ext_fields["queueOffset"]) + 1
        assert await visible(ctx) == []
        r = await producer.request(
            RequestCode.END_TRANSACTION,
            {
                "producerGroup": "PG",
                "tranStateTableOffset": h.tran_state_table_offset,
                "commitLogOffset": h.commit_log_offset,
                "commitOrRollback": COMMIT,
                "fromTransactionCheck": True,
                "msgId": h.msg_id,
            },
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert [m.body for m in await visible(ctx)] == [b"t5"]
        # ended: later rounds ask nothing, and the progress passed both
        checks.clock = lambda: int(now + 60_000)
        assert await checks.check_round() == 0
        assert ctx.replica.transactions.half_progress == 2
        # the original's own end (a late client answer) is the same transaction
        late = await end(ctx, sent, COMMIT)
        assert late.code == ResponseCode.SUCCESS and "already" in (late.remark or "")
        assert [m.body for m in await visible(ctx)] == [b"t5"]
        await producer.close()

    run_broker(tmp_path, scenario)


def test_check_counts_and_stops_after_check_max(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        producer = await ctx.connect()
        await heartbeat(producer)
        await prepare(ctx, b"t6")
        checks = ctx.replica.checks
        now = time.time() * 1000
        checks.clock = lambda: int(now + 10_000)
        assert [await checks.check_round() for _ in range(4)] == [1, 1, 0, 0]
        await asyncio.sleep(0.2)
        assert producer.notifications is not None and len(producer.notifications) == 2
        times = [
            decode(c.body).properties["TRANSACTION_CHECK_TIMES"] for c in producer.notifications
        ]
        assert times == ["1", "2"]
        # a custom immunity (CHECK_IMMUNITY_TIME_IN_SECONDS) waits longer, without holding the rest
        r = await ctx.send(
            b"t7",
            properties=props(TRAN_MSG="true", PGROUP="PG", CHECK_IMMUNITY_TIME_IN_SECONDS="60"),
            bornTimestamp=int(now),
        )
        assert r.code == ResponseCode.SUCCESS
        await prepare(ctx, b"t8", bornTimestamp=int(now))
        assert await checks.check_round() == 1  # t8 only
        checks.clock = lambda: int(now + 61_000)
        assert await checks.check_round() == 2  # t7, then t8's copy again
        await producer.close()

    run_broker(tmp_path, scenario, transaction_check_max=2)


def test_no_live_producer_still_counts_the_check(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        producer = await ctx.connect()
        await heartbeat(producer)
        await producer.close()
        await asyncio.sleep(0.2)  # the connection's close unregisters it
        await prepare(ctx, b"t9")
        checks = ctx.replica.checks
        checks.clock = lambda: int(time.time() * 1000 + 10_000)
        assert await checks.check_round() == 1
        assert checks.checks_sent == 0
        assert await max_offset(ctx, HALF_TOPIC) == 2

    run_broker(tmp_path, scenario)


def test_the_progress_is_kept_and_a_reloaded_index_still_knows_old_ends(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        svc, checks = ctx.replica.transactions, ctx.replica.checks
        first = await prepare(ctx, b"t10")
        assert (await end(ctx, first, COMMIT)).code == ResponseCode.SUCCESS
        await prepare(ctx, b"t11")
        checks.clock = lambda: int(time.time() * 1000 + 10_000)
        assert await checks.check_round() == 1  # t11; t10 ended
        # passed: both prepares; the op of t10 ends only a half below that
        assert (svc.half_progress, svc.op_progress) == (2, 1)
        offsets = ctx.replica.offsets
        assert offsets.load(CHECK_GROUP, HALF_TOPIC, 0) == 2
        assert offsets.load(CHECK_GROUP, OP_TOPIC, 0) == 1

        checks.reset()  # as after a role change: loaded again from the offset store
        await svc.refresh()
        assert svc.op_from == 1  # t10's op is below the progress: not read at load
        log_end = ctx.replica.store.log.end_offset
        late = await end(ctx, first, COMMIT)  # an old root: the older ops are read then
        assert late.code == ResponseCode.SUCCESS and "already committed" in (late.remark or "")
        assert svc.op_from == 0
        assert ctx.replica.store.log.end_offset == log_end
        assert await checks.check_round() == 1  # only t11's copy, due again
        assert [m.body for m in await visible(ctx)] == [b"t10"]

    run_broker(tmp_path, scenario)


def test_an_end_after_the_producers_own_immunity_is_illegal_unless_a_checks_answer(
    tmp_path: Path,
) -> None:
    async def scenario(ctx: Ctx) -> None:
        immune = props(TRAN_MSG="true", PGROUP="PG", CHECK_IMMUNITY_TIME_IN_SECONDS="1")
        born = int(time.time() * 1000) - 7000  # past max(1 s, transactionTimeOut 6 s)
        sent = await ctx.send(b"t12", properties=immune, bornTimestamp=born)
        assert sent.code == ResponseCode.SUCCESS
        log_end = ctx.replica.store.log.end_offset
        late = await end(ctx, sent, COMMIT)
        assert late.code == ResponseCode.ILLEGAL_OPERATION == 604
        assert "check immunity" in (late.remark or "")
        assert ctx.replica.store.log.end_offset == log_end
        checked = await end(ctx, sent, COMMIT, fromTransactionCheck=True)
        assert checked.code == ResponseCode.SUCCESS, checked.remark
        assert [m.body for m in await visible(ctx)] == [b"t12"]

    run_broker(tmp_path, scenario)
