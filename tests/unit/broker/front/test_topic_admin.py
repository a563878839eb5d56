"""UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21), DELETE_TOPIC_IN_BROKER (215) on an
in-process broker (no routes): validation names the field, nothing changes on a refusal, the
table is saved, and the send path sees the new queue numbers and permissions at once."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from broker.admin.topics import CreateTopicHeader, InvalidTopicRequest
from broker.topics import TopicTable
from rmq.codec import RemotingCommand
from tests.unit.broker.front.conftest import Ctx, run_broker


def create_fields(name: str, **over: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "topic": name,
        "defaultTopic": "TBW102",
        "readQueueNums": 4,
        "writeQueueNums": 4,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
    fields.update(over)
    return {k: v for k, v in fields.items() if v is not None}


async def all_configs(ctx: Ctx) -> dict[str, Any]:
    r = await ctx.client.request(21, {})
    assert r.code == 0, r.remark
    doc: dict[str, Any] = json.loads(r.body)
    assert set(doc) == {"topicConfigTable", "dataVersion"}
    assert isinstance(doc["dataVersion"]["counter"], int)
    table: dict[str, Any] = doc["topicConfigTable"]
    return table


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"topic": "bad topic"}, "topic"),
        ({"topic": "a" * 128}, "topic"),
        ({"topic": "TBW102"}, "topic"),
        ({"topic": "SCHEDULE_TOPIC_XXXX"}, "topic"),
        ({"topic": "rmq_sys_x"}, "topic"),
        ({"readQueueNums": 0}, "readQueueNums"),
        ({"writeQueueNums": 1025}, "writeQueueNums"),
        ({"writeQueueNums": -3}, "writeQueueNums"),
        ({"perm": 16}, "perm"),
        ({"perm": -1}, "perm"),
        ({"topicFilterType": "SQL92"}, "topicFilterType"),
        ({"topicSysFlag": -1}, "topicSysFlag"),
    ],
)
def test_an_invalid_header_names_the_field(over: dict[str, Any], field: str) -> None:
    fields = create_fields("T", **over)
    request = RemotingCommand.request(17, fields)
    with pytest.raises(InvalidTopicRequest, match=f"^{field}:"):
        CreateTopicHeader.from_command(request).config()


def test_a_valid_header_gives_its_config() -> None:
    request = RemotingCommand.request(17, create_fields("T-1%x|y", perm=4, order=True))
    c = CreateTopicHeader.from_command(request).config()
    assert (c.topic, c.read_queue_nums, c.write_queue_nums, c.perm, c.order) == (
        "T-1%x|y",
        4,
        4,
        4,
        True,
    )
    # the fields the Java admin may leave out take RocketMQ's defaults
    bare = create_fields("T", topicSysFlag=None, order=None, topicFilterType=None)
    c = CreateTopicHeader.from_command(RemotingCommand.request(17, bare)).config()
    assert (c.topic_sys_flag, c.order, c.topic_filter_type) == (0, False, "SINGLE_TAG")


def test_create_update_delete_over_the_wire(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        # refused: the field named, nothing created, the connection still serves
        for over, field in (
            ({"perm": 99}, "perm"),
            ({"readQueueNums": 0}, "readQueueNums"),
            ({"topic": "broker-a"}, "topic"),  # the broker's own name topic
            ({"readQueueNums": "many"}, "readQueueNums"),  # not a number: the codec's error
            ({"readQueueNums": None}, "readQueueNums"),  # missing
        ):
            r = await ctx.client.request(17, create_fields("New", **over))
            assert r.code == 1 and field in (r.remark or ""), (over, r.code, r.remark)
        assert "New" not in await all_configs(ctx)
        assert (await ctx.send(b"x", topic="New")).code == 17

        r = await ctx.client.request(17, create_fields("New", readQueueNums=2, writeQueueNums=2))
        assert r.code == 0, r.remark
        table = await all_configs(ctx)
        assert table["New"] == {
            "topicName": "New",
            "readQueueNums": 2,
            "writeQueueNums": 2,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
            "attributes": {},
        }
        sent = await ctx.send(b"hello", topic="New", queue_id=1)
        assert sent.code == 0 and sent.ext_fields["queueOffset"] == "0"
        assert (await ctx.send(b"x", topic="New", queue_id=5)).code == 1  # only 2 queues

        # update: 8 queues, read-only, orderly
        r = await ctx.client.request(
            17, create_fields("New", readQueueNums=8, writeQueueNums=8, perm=4, order=True)
        )
        assert r.code == 0, r.remark
        t = (await all_configs(ctx))["New"]
        assert (t["readQueueNums"], t["writeQueueNums"], t["perm"], t["order"]) == (8, 8, 4, True)
        refused = await ctx.send(b"x", topic="New", queue_id=5)
        assert refused.code == 16, refused.remark  # NO_PERMISSION
        assert (await ctx.pull(0, topic="New", queue_id=1)).code == 0  # still readable

        # saved: a table loaded from topics.json holds the update
        saved = TopicTable(str(tmp_path / "broker" / "topics.json")).get("New")
        assert saved is not None and saved.perm == 4 and saved.write_queue_nums == 8

        r = await ctx.client.request(215, {"topic": "New"})
        assert r.code == 0, r.remark
        assert "New" not in await all_configs(ctx)
        assert (await ctx.send(b"x", topic="New")).code == 17
        r = await ctx.client.request(215, {"topic": "TBW102"})
        assert r.code == 1 and "topic" in (r.remark or "")

    run_broker(tmp_path, scenario, auto_create_topic=False)  # a send to New: TOPIC_NOT_EXIST


@pytest.mark.parametrize(
    "text, field_problem",
    [
        ("replica.of=A", "is not +name=value"),
        ("+replica.of", "is not +name=value"),
        ("+colour=red", "not a supported attribute"),
        ("+replica.of=a b", "not a valid replica.of"),
        ("+message.type=WEIRD", "not a valid message.type"),
    ],
)
def test_bad_attributes_are_refused_naming_the_field(text: str, field_problem: str) -> None:
    header = CreateTopicHeader.from_command(
        RemotingCommand.request(17, create_fields("Attr", attributes=text))
    )
    with pytest.raises(InvalidTopicRequest, match=f"attributes: .*{re.escape(field_problem)}"):
        header.config()


def test_a_replica_topic_takes_only_replicated_messages(tmp_path: Path) -> None:
    """``+replica.of=A``: a plain producer's send is NO_PERMISSION; a message whose
    ROCKETMQ_REPLICATOR_SOURCE lists A (exactly: not "AB") is stored; ``-replica.of``
    makes the topic writable for everyone again; the attribute survives other updates."""

    async def scenario(ctx: Ctx) -> None:
        r = await ctx.client.request(17, create_fields("Mirror", attributes="+replica.of=A"))
        assert r.code == 0, r.remark
        plain = await ctx.send(b"x", topic="Mirror")
        assert plain.code == 16 and "replica of cluster A" in (plain.remark or ""), plain
        other = await ctx.send(
            b"x", topic="Mirror", properties="ROCKETMQ_REPLICATOR_SOURCE\x01AB\x02"
        )
        assert other.code == 16
        ok = await ctx.send(
            b"x", topic="Mirror", properties="ROCKETMQ_REPLICATOR_SOURCE\x01C,A\x02"
        )
        assert ok.code == 0, ok.remark
        r = await ctx.client.request(17, create_fields("Mirror", readQueueNums=8))
        assert r.code == 0
        assert (await all_configs(ctx))["Mirror"]["attributes"] == {"replica.of": "A"}
        r = await ctx.client.request(17, create_fields("Mirror", attributes="-replica.of"))
        assert r.code == 0
        assert (await ctx.send(b"x", topic="Mirror")).code == 0

    run_broker(tmp_path, scenario)
