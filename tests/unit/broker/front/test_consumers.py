"""HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, LOCK/UNLOCK_BATCH_MQ and the offset
codes (research/broker.md §3, §3.2, §3.4, traps 10 and 12)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from broker.state.offsets import InMemoryOffsetStore
from tests.unit.broker.front.conftest import TOPIC, Ctx, run_broker

CPP_HEARTBEAT = {  # C++ 1.x: enum ordinals, subVersion as a string, codeSet = atoi(tag)
    "clientID": "127.0.0.1@1",
    "consumerDataSet": [
        {
            "consumeFromWhere": 0,
            "consumeType": 1,
            "groupName": "CG",
            "messageModel": 1,
            "subscriptionDataSet": [
                {"classFilterMode": False, "codeSet": [0], "subString": "b", "subVersion": "1",
                 "tagsSet": ["b"], "topic": TOPIC}
            ],
            "unitMode": False,
        }
    ],
    "producerDataSet": [{"groupName": "PG"}],
}  # fmt: skip
ONS_HEARTBEAT = {  # ali-ons: enum names
    "clientID": "10.0.0.1@2",
    "consumerDataSet": [
        {"groupName": "CG", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
         "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
         "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "expressionType": "TAG"}]}
    ],
}  # fmt: skip


def test_heartbeat_registers_groups_and_notifies_members(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        r = await ctx.client.request(34, body=json.dumps(CPP_HEARTBEAT).encode())
        assert r.code == 0
        assert ctx.replica.topics.get("%RETRY%CG") is not None
        listed = await ctx.client.request(38, {"consumerGroup": "CG"})
        assert json.loads(listed.body) == {"consumerIdList": ["127.0.0.1@1"]}
        sub = ctx.replica.core.consumers.subscription("CG", TOPIC)
        assert sub is not None and sub.tags == frozenset({"b"})
        other = await ctx.connect()
        assert (await other.request(34, body=json.dumps(ONS_HEARTBEAT).encode())).code == 0
        deadline = time.monotonic() + 5
        while not any(n.code == 40 for n in ctx.client.notifications):
            assert time.monotonic() < deadline, "no NOTIFY_CONSUMER_IDS_CHANGED"
            await asyncio.sleep(0.02)
        assert ctx.client.notifications[0].ext_fields == {"consumerGroup": "CG"}
        listed = await ctx.client.request(38, {"consumerGroup": "CG"})
        assert json.loads(listed.body)["consumerIdList"] == ["10.0.0.1@2", "127.0.0.1@1"]
        await other.close()
        while ctx.replica.core.consumers.client_ids("CG") != ["127.0.0.1@1"]:
            assert time.monotonic() < deadline + 5
            await asyncio.sleep(0.02)
        r = await ctx.client.request(35, {"clientID": "127.0.0.1@1", "consumerGroup": "CG"})
        assert r.code == 0
        gone = await ctx.client.request(38, {"consumerGroup": "CG"})
        assert gone.code == 1 and "no consumer" in (gone.remark or "")
        # a heartbeat without its subscription's tags hash: pull without SUBSCRIPTION uses it
        await ctx.client.request(34, body=json.dumps(CPP_HEARTBEAT).encode())
        await ctx.send(b"a", properties="TAGS\x01a\x02")
        await ctx.send(b"b", properties="TAGS\x01b\x02")
        p = await ctx.pull(0, sys_flag=0)
        assert p.code == 0 and b"TAGS\x01b" in p.body and b"TAGS\x01a" not in p.body

    run_broker(tmp_path, scenario)


def test_bad_heartbeats_are_refused_clearly(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        for body, words in [
            (b"not json", "not JSON"),
            (b"[1,2]", "JSON object"),
            (b"{}", "clientID"),
            (json.dumps({"clientID": "c", "consumerDataSet": [5]}).encode(), "objects"),
            (json.dumps({"clientID": "c", "consumerDataSet": [{"x": 1}]}).encode(), "groupName"),
        ]:
            r = await ctx.client.request(34, body=body)
            assert r.code == 1 and words in (r.remark or ""), (body, r.remark)

    run_broker(tmp_path, scenario)


def test_queue_locks(tmp_path: Path) -> None:
    mqs = [{"topic": TOPIC, "brokerName": "broker-a", "queueId": q} for q in range(2)]

    async def scenario(ctx: Ctx) -> None:
        def body(client: str, mq: list[dict[str, object]]) -> bytes:
            return json.dumps({"consumerGroup": "CG", "clientId": client, "mqSet": mq}).encode()

        r = await ctx.client.request(41, body=body("c1", mqs))
        assert json.loads(r.body)["lockOKMQSet"] == mqs
        r = await ctx.client.request(41, body=body("c2", mqs))
        assert json.loads(r.body)["lockOKMQSet"] == []
        assert (await ctx.client.request(42, body=body("c1", mqs[:1]))).code == 0
        r = await ctx.client.request(41, body=body("c2", mqs))
        assert json.loads(r.body)["lockOKMQSet"] == mqs[:1]
        r = await ctx.client.request(41, body=json.dumps({"consumerGroup": "CG"}).encode())
        assert r.code == 1 and "clientId" in (r.remark or "")
        r = await ctx.client.request(41, body=body("c1", [{"topic": TOPIC, "queueId": "x"}]))
        assert r.code == 1 and "queueId" in (r.remark or "")

    run_broker(tmp_path, scenario)


def test_lock_expiry() -> None:
    from broker.state.locks import LockManager

    locks = LockManager(expiry_ms=1000)
    assert locks.try_lock("g", [("t", 0)], "a", now_ms=0) == [("t", 0)]
    assert locks.try_lock("g", [("t", 0)], "b", now_ms=999) == []
    assert locks.try_lock("g", [("t", 0)], "b", now_ms=2001) == [("t", 0)]
    assert locks.holder("g", "t", 0, now_ms=2001) == "b"


def test_offsets(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        q = {"consumerGroup": "CG", "topic": TOPIC, "queueId": 0}
        r = await ctx.client.request(14, q)
        assert r.code == 0 and r.ext_fields["offset"] == "0"  # trap 12: young queue
        await ctx.client.oneway(15, {**q, "commitOffset": 7})
        deadline = time.monotonic() + 5
        while (await ctx.client.request(14, q)).ext_fields.get("offset") != "7":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert (await ctx.client.request(15, {**q, "commitOffset": 3})).code == 0
        assert (await ctx.client.request(14, q)).ext_fields["offset"] == "7"  # only raised
        await ctx.pull(0, sys_flag=0x1 | 0x4, commit_offset=9)
        assert (await ctx.client.request(14, q)).ext_fields["offset"] == "9"
        r = await ctx.client.request(14, {"consumerGroup": "CG", "topic": TOPIC})
        assert r.code == 1 and "queueId" in (r.remark or "")
        t0 = int(time.time() * 1000)
        for i in range(3):
            await ctx.send(bytes([i]))
        mx = await ctx.client.request(30, {"topic": TOPIC, "queueId": 0})
        mn = await ctx.client.request(31, {"topic": TOPIC, "queueId": 0})
        assert (mx.ext_fields["offset"], mn.ext_fields["offset"]) == ("3", "0")
        s = await ctx.client.request(29, {"topic": TOPIC, "queueId": 0, "timestamp": t0 - 1000})
        assert s.ext_fields["offset"] == "0"
        s = await ctx.client.request(29, {"topic": TOPIC, "queueId": 0, "timestamp": t0 + 10**7})
        assert s.ext_fields["offset"] == "3"

    run_broker(tmp_path, scenario)


def test_query_offset_of_a_new_group_on_an_old_queue_is_not_found(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        store = ctx.replica.store
        store.min_offset = lambda topic, qid: 5  # type: ignore[method-assign]
        r = await ctx.client.request(14, {"consumerGroup": "new", "topic": TOPIC, "queueId": 0})
        assert r.code == 22

    run_broker(tmp_path, scenario)


def test_in_memory_offsets_only_rise() -> None:
    s = InMemoryOffsetStore()
    assert s.load("g", "t", 0) is None
    s.commit("g", "t", 0, 5)
    s.commit("g", "t", 0, 2)
    assert s.load("g", "t", 0) == 5


def test_query_offset_is_refused_until_the_offsets_are_loaded(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        offsets = ctx.replica.core.offsets
        assert isinstance(offsets, InMemoryOffsetStore)
        offsets._loaded = False  # as a KvOffsetStore whose metaledger was down at start
        q = {"consumerGroup": "CG", "topic": TOPIC, "queueId": 0}
        r = await ctx.client.request(14, q)
        assert r.code == 1 and "not loaded" in (r.remark or "")
        offsets._loaded = True
        assert (await ctx.client.request(14, q)).code == 0

    run_broker(tmp_path, scenario)


def test_kv_offsets_load_before_the_first_flush() -> None:
    from broker.state.offsets import KvOffsetStore
    from nameserver.client import KeyValue, RangeResult, TxnResult, Unavailable

    class Kv:
        down = True
        txns: list[object] = []

        def get(self, key: str, prefix: bool = False) -> RangeResult:
            if self.down:
                raise Unavailable("metaledger down")
            kv = KeyValue(b"/brokers/b/offsets/g/t/0", b"9", 1, 5, 1, 0)
            return RangeResult(5, [kv], False, 1)

        def txn(self, compares: object, success: object = ()) -> TxnResult:
            self.txns.append(success)
            return TxnResult(6, True, [])

    kv = Kv()
    store = KvOffsetStore(kv, "b")  # type: ignore[arg-type]
    assert not store.loaded
    store.commit("g", "t", 0, 4)
    with pytest.raises(Unavailable):
        store.flush()
    kv.down = False
    store.flush()  # loads first: the stored 9 wins over the 4 committed meanwhile
    assert store.loaded and store.load("g", "t", 0) == 9 and kv.txns == []


def test_registry_reports_member_and_subscription_changes_only() -> None:
    from broker.state.consumers import ConsumerRegistry
    from rmq.server import Peer

    reg = ConsumerRegistry()
    peer = Peer(1, "127.0.0.1:5")
    data = CPP_HEARTBEAT["consumerDataSet"][0]  # type: ignore[index]
    assert reg.heartbeat("c1", peer, data, 0) == ["CG"]  # joined
    assert reg.heartbeat("c1", peer, data, 1) == []  # the same again: nothing to tell
    other = {**data, "subscriptionDataSet": [{"topic": TOPIC, "subString": "x || y"}]}
    assert reg.heartbeat("c1", peer, other, 2) == ["CG"]  # resubscribed
    assert reg.heartbeat("c1", Peer(2, "127.0.0.1:6"), other, 3) == ["CG"]  # reconnected
    assert reg.expire(3 + 120_001) == ["CG"] and reg.client_ids("CG") == []
