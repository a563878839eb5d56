"""Topics created on first send (RocketMQ's ``autoCreateTopicEnable``, issue 30): the default
topic TBW102 in the table and the routes while on, a send to an unknown topic creating it with
``min(defaultTopicQueueNums, TBW102's write queues)`` queues; off: TOPIC_NOT_EXIST, no TBW102."""

from __future__ import annotations

import json
from pathlib import Path

from broker.config import BrokerConfig
from broker.routes import RouteRegistrar
from broker.topics import AUTO_CREATE_PERM, TopicConfig, TopicTable
from rmq.codes import PERM_INHERIT, PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from tests.unit.broker.front.conftest import Ctx, run_broker


async def table(ctx: Ctx) -> dict[str, dict[str, object]]:
    r = await ctx.client.request(RequestCode.GET_ALL_TOPIC_CONFIG, {})
    assert r.code == ResponseCode.SUCCESS, r.remark
    doc: dict[str, dict[str, object]] = json.loads(r.body)["topicConfigTable"]
    return doc


def test_create_from_default_caps_queues_and_drops_inherit() -> None:
    t = TopicTable(None)
    assert t.create_from_default("A", "TBW102", 4) is None  # no default topic
    t.keep_default_topic(True, 8)
    assert t.get("TBW102") == TopicConfig("TBW102", 8, 8, AUTO_CREATE_PERM)
    assert t.create_from_default("A", "TBW102", 4) == TopicConfig("A", 4, 4, PERM_READ | PERM_WRITE)
    assert t.create_from_default("B", "TBW102", 16) == TopicConfig("B", 8, 8)  # capped
    assert t.create_from_default("C", "TBW102", None) == TopicConfig("C", 8, 8)
    assert t.create_from_default("D", "TBW102", 0) == TopicConfig("D", 1, 1)  # at least one
    assert t.create_from_default("A", "TBW102", 2) == TopicConfig("A", 4, 4)  # kept as it is
    t.put(TopicConfig("NoInherit", 4, 4))
    assert t.create_from_default("E", "NoInherit", 4) is None
    t.keep_default_topic(False, 8)
    assert t.get("TBW102") is None


def test_the_registration_carries_tbw102() -> None:
    config = BrokerConfig(broker_name="broker-a", data_dir="/nonexistent")
    topics = TopicTable(None)
    topics.keep_default_topic(config.auto_create_topic, config.default_queue_nums)
    request = RouteRegistrar(object(), config, topics).request()  # type: ignore[arg-type]
    tbw = [t for t in request.topics if t.topic == "TBW102"]
    assert len(tbw) == 1 and tbw[0].perm == PERM_INHERIT | PERM_READ | PERM_WRITE
    assert tbw[0].write_queue_nums == config.default_queue_nums


def test_a_send_to_an_unknown_topic_creates_it(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        assert (await table(ctx))["TBW102"]["perm"] == AUTO_CREATE_PERM
        r = await ctx.send(b"first", topic="Fresh", queue_id=-1, defaultTopicQueueNums=2)
        assert r.code == ResponseCode.SUCCESS, r.remark
        fresh = (await table(ctx))["Fresh"]
        assert (fresh["readQueueNums"], fresh["writeQueueNums"], fresh["perm"]) == (2, 2, 6)
        pulled = await ctx.pull(0, topic="Fresh", queue_id=int(r.ext_fields["queueId"]))
        assert pulled.code == ResponseCode.SUCCESS, pulled.remark

        # capped by TBW102's queues; V2 short names too
        r = await ctx.client.request(
            RequestCode.SEND_MESSAGE_V2,
            {"a": "PG", "b": "Wide", "c": "TBW102", "d": 64, "e": 0, "f": 0, "g": 1, "h": 0},
            b"x",
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert (await table(ctx))["Wide"]["writeQueueNums"] == 4

        # names RocketMQ would not create: refused, and the remark says why
        for name in ("rmq_sys_mine", "broker-a", "SELF_TEST_TOPIC"):
            r = await ctx.send(b"x", topic=name)
            assert r.code == ResponseCode.TOPIC_NOT_EXIST, (name, r.code)
            assert "not created automatically" in (r.remark or "")
        # a default topic that is not here
        r = await ctx.send(b"x", topic="Other", defaultTopic="NoSuchDefault")
        assert r.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchDefault" in (r.remark or "")

    run_broker(tmp_path, scenario)


def test_off_answers_topic_not_exist_and_drops_tbw102(tmp_path: Path) -> None:
    saved = TopicTable(str(tmp_path / "broker" / "topics.json"))
    (tmp_path / "broker").mkdir()
    saved.keep_default_topic(True, 4)  # a table saved while auto-creation was on

    async def scenario(ctx: Ctx) -> None:
        assert "TBW102" not in await table(ctx)
        r = await ctx.send(b"x", topic="Fresh")
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        assert r.remark == "topic[Fresh] not exist, apply first please!"
        assert "Fresh" not in await table(ctx)

    run_broker(tmp_path, scenario, auto_create_topic=False)
