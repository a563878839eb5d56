"""A transaction's prepare half is refused, not stored (issue 30): NO_PERMISSION with RocketMQ's
``rejectTransactionMessage`` remark for ``TRAN_MSG=true`` or a prepared-type sysflag, single and
batch, on every send code; END_TRANSACTION (37) says what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.send.processor import is_half_message
from rmq.batch import BatchItem, encode_batch
from rmq.codes import RequestCode, ResponseCode
from tests.unit.broker.front.conftest import TOPIC, Ctx, props, run_broker

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


def test_half_messages_are_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        log_end = ctx.replica.store.log.end_offset
        tran = props(TRAN_MSG="true", PGROUP="PG")
        refusals = [
            await ctx.send(b"half", properties=tran),
            await ctx.send(b"half", properties=tran, code=RequestCode.SEND_MESSAGE_V2),
            await ctx.send(b"half", sysFlag=0x4),
            await ctx.send(b"half", topic="NeverCreated", properties=tran),
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
        assert await max_offset(ctx) == 0
        assert ctx.replica.topics.get("NeverCreated") is None  # nor a topic created for it

        # ordinary sends still go through, on the same connection
        ok = await ctx.send(b"plain", properties=props(TRAN_MSG="false"))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        assert await max_offset(ctx) == 1

    run_broker(tmp_path, scenario)


def test_end_transaction_names_what_is_missing(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        r = await ctx.client.request(
            RequestCode.END_TRANSACTION,
            {"producerGroup": "PG", "tranStateTableOffset": 0, "commitLogOffset": 0},
        )
        assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        remark = r.remark or ""
        assert "END_TRANSACTION" in remark and "transactional messages" in remark

    run_broker(tmp_path, scenario)
