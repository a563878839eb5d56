"""CONSUMER_SEND_MSG_BACK (retry topic, delay levels, DLQ), delayed delivery, GET_BROKER_RUNTIME_INFO
(research/broker.md §3.3) and the Replication protocol's statuses (§0 trap 1, §3.1)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from broker.admin.processor import AdminProcessor
from broker.replication import Admission, PutStatus
from rmq.message import decode
from tests.unit.broker.front.conftest import TOPIC, Ctx, props, run_broker
from tests.unit.broker.front.test_send_pull import records

FAST = "100ms 200ms 300ms 400ms"


async def wait_pull(ctx: Ctx, topic: str, offset: int = 0, timeout: float = 10) -> list[bytes]:
    deadline = time.monotonic() + timeout
    while True:
        p = await ctx.pull(offset, topic=topic)
        if p.code == 0:
            return records(p.body)
        assert time.monotonic() < deadline, f"nothing on {topic}: {p.code} {p.remark}"
        await asyncio.sleep(0.05)


def test_send_back_goes_to_retry_after_a_delay_then_to_the_dlq(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        sent = await ctx.send(b"fail me", properties=props(TAGS="t", UNIQ_KEY="U1"))
        offset = int(sent.ext_fields["msgId"][16:], 16)
        r = await ctx.client.request(36, {"group": "CG", "delayLevel": 0, "offset": offset})
        assert r.code == 0, r.remark
        retry = decode((await wait_pull(ctx, "%RETRY%CG"))[0])
        assert retry.body == b"fail me" and retry.reconsume_times == 1
        assert retry.properties["RETRY_TOPIC"] == TOPIC
        assert retry.properties["ORIGIN_MESSAGE_ID"] == sent.ext_fields["msgId"]
        assert "DELAY" not in retry.properties and retry.properties["UNIQ_KEY"] == "U1"
        # reconsumeTimes 1 reached retryMaxTimes 1: the DLQ
        r = await ctx.client.request(
            36, {"group": "CG", "delayLevel": 0, "offset": retry.physical_offset}
        )
        assert r.code == 0
        dead = decode((await wait_pull(ctx, "%DLQ%CG"))[0])
        assert dead.body == b"fail me" and dead.properties["RETRY_TOPIC"] == TOPIC
        # a negative delay level goes straight to the DLQ; a header max overrides the group's
        r = await ctx.client.request(36, {"group": "G2", "delayLevel": -1, "offset": offset})
        assert r.code == 0 and len(await wait_pull(ctx, "%DLQ%G2")) == 1
        r = await ctx.client.request(
            36, {"group": "G3", "delayLevel": 1, "offset": offset, "maxReconsumeTimes": 5}
        )
        assert r.code == 0 and len(await wait_pull(ctx, "%RETRY%G3")) == 1
        bad = await ctx.client.request(36, {"group": "CG", "delayLevel": 0, "offset": offset + 3})
        assert bad.code == 1 and "offset" in (bad.remark or "")
        bad = await ctx.client.request(36, {"group": "CG", "delayLevel": 0, "offset": 1 << 40})
        assert bad.code == 1

    run_broker(tmp_path, scenario, retry_max_times=1, message_delay_levels=FAST)


def test_a_retry_send_past_max_reconsume_goes_to_the_dlq(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        r = await ctx.send(b"again", topic="%RETRY%CG", reconsumeTimes=3, maxReconsumeTimes=3)
        assert r.code == 0
        assert len(await wait_pull(ctx, "%DLQ%CG")) == 1

    run_broker(tmp_path, scenario)


def test_delay_property_delivers_later(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        t0 = time.monotonic()
        r = await ctx.send(b"later", properties=props(DELAY="2"))
        assert r.code == 0
        assert (await ctx.pull(0)).code == 19
        (rec,) = await wait_pull(ctx, TOPIC)
        assert time.monotonic() - t0 >= 0.15
        m = decode(rec)
        assert (
            m.body == b"later" and "REAL_TOPIC" not in m.properties and "DELAY" not in m.properties
        )

    run_broker(tmp_path, scenario, message_delay_levels=FAST)


def test_runtime_info(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        await ctx.send(b"x")
        r = await ctx.client.request(28)
        table = json.loads(r.body)["table"]
        assert all(isinstance(v, str) for v in table.values())
        assert table["putStatus_PUT_OK"] == "1" and int(table["commitLogMaxOffset"]) > 0

    run_broker(tmp_path, scenario)


def test_runtime_info_names_each_slaves_acknowledged_offset(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        assert not any(k.startswith("slaveAckOffset_") for k in AdminProcessor(ctx.replica.core).table())  # fmt: skip
        table = AdminProcessor(ctx.replica.core, lambda: {2: 42, 1: -1}).table()
        acks = {k: v for k, v in table.items() if k.startswith("slaveAckOffset_")}
        assert acks == {"slaveAckOffset_1": "-1", "slaveAckOffset_2": "42"}

    run_broker(tmp_path, scenario)


class FakeReplication:
    def __init__(self) -> None:
        self.refuse: str | None = None
        self.admission: Admission | PutStatus = Admission(2)
        self.status = PutStatus.PUT_OK
        self.limit: int | None = None
        self.waited: list[tuple[int, int, bool]] = []

    def writable(self) -> str | None:
        return self.refuse

    def admit(self, end_offset: int) -> Admission | PutStatus:
        return self.admission

    async def wait(self, next_offset: int, admission: Admission, wait_store_ok: bool) -> PutStatus:
        self.waited.append((next_offset, admission.need_acks, wait_store_ok))
        return self.status

    def readable_limit(self) -> int | None:
        return self.limit


def test_replication_decides_the_answer(tmp_path: Path) -> None:
    rep = FakeReplication()

    async def scenario(ctx: Ctx) -> None:
        # WAIT=false: not subject to the replicas' admission (J5 CommitLog.needHandleHA)
        rep.admission = PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
        ok = await ctx.send(b"a", properties=props(WAIT="false"))
        assert ok.code == 0 and rep.waited[-1][1:] == (1, False)
        rep.admission = Admission(2)
        assert (await ctx.send(b"a2")).code == 0 and rep.waited[-1][1:] == (2, True)
        rep.status = PutStatus.FLUSH_SLAVE_TIMEOUT
        r = await ctx.send(b"b")
        assert r.code == 12 and "msgId" in r.ext_fields  # stored on the master
        rep.status = PutStatus.SLAVE_NOT_AVAILABLE
        assert (await ctx.send(b"c")).code == 11
        rep.admission = PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH
        r = await ctx.send(b"d")
        assert r.code == 1 and r.remark == "in-sync replicas not enough"
        rep.refuse = "this replica is a slave"
        r = await ctx.send(b"e")
        assert r.code == 14 and r.remark == "this replica is a slave"
        # consumers see only up to the readable limit
        first = records((await ctx.pull(0)).body)
        rep.limit = len(first[0])  # ends after the first record
        p = await ctx.pull(0)
        assert len(records(p.body)) == 1 and p.ext_fields["nextBeginOffset"] == "1"
        assert (await ctx.pull(1)).code == 19

    run_broker(tmp_path, scenario, replication=rep)


def test_retention_deletes_old_segments_and_pulls_move_past_them(tmp_path: Path) -> None:
    """The replica's retention task: with 64 KiB segments and a 100 KiB size limit, the oldest
    closed segments go; a pull from offset 0 is told the queue's new minimum."""

    async def scenario(ctx: Ctx) -> None:
        for i in range(40):
            assert (await ctx.send(b"x" * 8000 + b"%02d" % i)).code == 0
        # the task checks every 50 ms and deletes oldest first, one segment at a time: wait
        # until it is done (the deadline is for a machine that is busy elsewhere)
        limit = 100 * 1024 + 65536
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            log = ctx.replica.store.log
            sizes = [(s.path, s.size) for s in log.segments()]
            if log.min_offset > 0 and sum(size for _, size in sizes) <= limit:
                break
            assert asyncio.get_running_loop().time() < deadline, (
                f"retention did not bring the log under {limit} bytes: {sizes}"
            )
            await asyncio.sleep(0.05)
        r = await ctx.pull(0)
        assert r.code == 21  # PULL_OFFSET_MOVED
        assert int(r.ext_fields["minOffset"]) > 0
        assert r.ext_fields["nextBeginOffset"] == r.ext_fields["minOffset"]
        r = await ctx.pull(int(r.ext_fields["minOffset"]))
        assert r.code == 0  # what is left is readable

    run_broker(
        tmp_path,
        scenario,
        segment_size_bytes=64 * 1024,
        retention_bytes=100 * 1024,
        retention_check_interval_ms=50,
    )
