"""replicator.rocketmq.wire and .routes: a pull answer's records come inflated, and records
that do not decode are BadAnswer (the records themselves: tests/unit/rmq/test_message.py);
requests parse with the broker's own header parsers; route, topic-list, pull and offset
answers in every status, and answers that are errors or do not parse."""

from __future__ import annotations

import ast
import json
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nameserver.client import BrokerGroup, QueueData, Route
from replicator.rocketmq import routes, wire
from replicator.rocketmq.client import ClusterClient, ReadQueue, read_queues
from replicator.rocketmq.errors import BadAnswer, RemotingError, TopicNotFound
from rmq.codec import RemotingCommand, decode_frame, dumps_fastjson
from rmq.codec import encode as encode_frame
from rmq.headers import (
    PullMessageHeader,
    QueryConsumerOffsetHeader,
    QueueHeader,
    SearchOffsetHeader,
    UpdateConsumerOffsetHeader,
)
from rmq.message import encode
from tests.unit.rmq.records import ALL_BYTES, stored


def answer(
    code: int, ext: dict[str, object] | None = None, body: bytes = b"", remark: str | None = None
) -> RemotingCommand:
    """An answer as it comes off the wire (through the frame codec)."""
    cmd = RemotingCommand.request(0).response(code, remark, ext, body)
    return decode_frame(encode_frame(cmd)[4:])


# --- records (decoded by rmq.message: tests/unit/rmq/test_message.py) ------------------------


def test_pull_inflates_bodies_and_bad_records_are_bad_answers() -> None:
    body = ALL_BYTES * 100
    [got] = wire.parse_pull(
        answer(0, offsets(1), encode(stored(zlib.compress(body), sysflag=1)))
    ).messages
    assert (got.body, got.sysflag, got.msg_id, got.tags, got.keys) == (
        body,
        1,
        "AB12",
        "tagA",
        "k1 k2",
    )
    raw = encode(stored())
    for bad, why in (
        (encode(stored(b"x", sysflag=0x1 | 1 << 8)), "compression type"),
        (encode(stored(b"not zlib", sysflag=0x1)), "inflate"),
        (raw[:4] + b"\x00\x00\x00\x00" + raw[8:], "record at byte 0: bad magic"),
        (raw[:60], "shorter than a header|does not fit"),
    ):
        with pytest.raises(BadAnswer, match=why):
            wire.parse_pull(answer(0, offsets(1), bad))


@given(st.binary(max_size=300), st.integers(0, 200))
def test_garbage_raises_only_bad_answer(garbage: bytes, at: int) -> None:
    raw = encode(stored(b"abc"))
    for data in (garbage, raw[:at] + garbage, raw + garbage):
        try:
            wire.parse_pull(answer(0, offsets(1), data))
        except BadAnswer:
            pass


# --- pull ------------------------------------------------------------------------------------


def test_pull_request_is_what_the_broker_parses() -> None:
    req = wire.pull_request("g", "T", 2, 17, max_msgs=5, suspend_ms=3000)
    h = PullMessageHeader.from_command(decode_frame(encode_frame(req)[4:]))
    assert (h.consumer_group, h.topic, h.queue_id, h.queue_offset) == ("g", "T", 2, 17)
    assert (h.max_msg_nums, h.suspend_timeout_ms, h.commit_offset) == (5, 3000, 0)
    assert h.sys_flag == 0x2 | 0x4 and h.subscription == "*" and h.expression_type == "TAG"


def offsets(next_: int, lo: int = 0, hi: int = 9) -> dict[str, object]:
    return {"suggestWhichBrokerId": "0", "nextBeginOffset": next_, "minOffset": lo, "maxOffset": hi}


def test_pull_found() -> None:
    body = b"".join(encode(stored(queue_offset=i)) for i in (4, 5))
    r = wire.parse_pull(answer(0, offsets(6), body))
    assert r.status is wire.PullStatus.FOUND
    assert (r.next_offset, r.min_offset, r.max_offset) == (6, 0, 9)
    assert [m.queue_offset for m in r.messages] == [4, 5]


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (19, wire.PullStatus.NO_NEW_MSG),
        (20, wire.PullStatus.NO_MATCHED_MSG),
        (21, wire.PullStatus.OFFSET_ILLEGAL),
    ],
)
def test_pull_statuses_without_messages(code: int, status: wire.PullStatus) -> None:
    r = wire.parse_pull(answer(code, offsets(3, 2, 8), remark="whatever"))
    assert (r.status, r.next_offset, r.min_offset, r.max_offset, r.messages) == (
        status,
        3,
        2,
        8,
        [],
    )


def test_pull_errors() -> None:
    with pytest.raises(RemotingError) as err:
        wire.parse_pull(answer(17, remark="topic[T] not exist"))
    assert (err.value.code, err.value.remark, err.value.retriable) == (
        17,
        "topic[T] not exist",
        True,
    )
    with pytest.raises(RemotingError) as err:
        wire.parse_pull(answer(24, remark="subscription"))
    assert not err.value.retriable
    with pytest.raises(BadAnswer, match="nextBeginOffset"):
        wire.parse_pull(answer(19, {"minOffset": 0, "maxOffset": 0}))
    for bad in ("x", "--5", "\u00b2", "", "1e3"):
        with pytest.raises(BadAnswer, match="maxOffset"):
            wire.parse_pull(answer(19, {**offsets(1), "maxOffset": bad}))
    with pytest.raises(BadAnswer, match="suggestWhichBrokerId"):
        wire.parse_pull(answer(19, {**offsets(1), "suggestWhichBrokerId": "?"}))
    assert (
        wire.parse_pull(answer(19, {**offsets(1), "suggestWhichBrokerId": "1"})).suggest_broker_id
        == 1
    )


# --- offsets ---------------------------------------------------------------------------------


def test_offset_requests_are_what_the_broker_parses() -> None:
    def back(req: RemotingCommand) -> RemotingCommand:
        return decode_frame(encode_frame(req)[4:])

    for req, code in ((wire.min_offset_request("T", 1), 31), (wire.max_offset_request("T", 1), 30)):
        assert req.code == code and QueueHeader.from_command(back(req)) == QueueHeader("T", 1)
    s = back(wire.search_offset_request("T", 2, 1_700_000_000_000))
    assert s.code == 29 and SearchOffsetHeader.from_command(s) == SearchOffsetHeader(
        "T", 2, 1_700_000_000_000
    )
    q = back(wire.query_consumer_offset_request("g", "T", 3))
    assert q.code == 14
    assert QueryConsumerOffsetHeader.from_command(q) == QueryConsumerOffsetHeader("g", "T", 3)
    u = back(wire.update_consumer_offset_request("g", "T", 3, 99))
    assert u.code == 15 and not u.is_oneway
    assert UpdateConsumerOffsetHeader.from_command(u) == UpdateConsumerOffsetHeader("g", "T", 3, 99)


def test_offset_answers() -> None:
    assert wire.parse_offset(answer(0, {"offset": "123"})) == 123
    assert wire.parse_consumer_offset(answer(0, {"offset": "0"})) == 0
    assert wire.parse_consumer_offset(answer(22, remark="Not found")) is None
    with pytest.raises(RemotingError) as err:
        wire.parse_offset(answer(1, remark="not loaded, retry"))
    assert err.value.retriable
    with pytest.raises(BadAnswer):
        wire.parse_offset(answer(0))
    wire.parse_ok(answer(0), "x")
    with pytest.raises(RemotingError, match="code 16"):
        wire.parse_ok(answer(16), "x")


# --- create topic ----------------------------------------------------------------------------


def test_create_topic_request_as_the_java_admin_sends_it() -> None:
    spec = wire.TopicSpec("Dest", 8, 4, perm=6, topic_sys_flag=0, order=True)
    req = decode_frame(encode_frame(wire.create_topic_request(spec))[4:])
    assert req.code == 17 and not req.is_response
    assert req.ext_fields == {
        "topic": "Dest",
        "defaultTopic": "TBW102",
        "readQueueNums": "8",
        "writeQueueNums": "4",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "true",
    }


# --- routes and topics -----------------------------------------------------------------------

FASTJSON_ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},'
    b'"brokerName":"broker-b","cluster":"DefaultCluster","enableActingMaster":false},'
    b'{"brokerAddrs":{1:"127.0.0.1:20921"},"brokerName":"broker-a","cluster":"DefaultCluster",'
    b'"enableActingMaster":true,"zoneName":"z1"}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSysFlag":0,'
    b'"writeQueueNums":2},{"brokerName":"broker-a","perm":4,"readQueueNums":3,"topicSysFlag":0,'
    b'"writeQueueNums":1}]}'
)
EXPECTED_ROUTE = Route(
    "T",
    [
        BrokerGroup(
            "DefaultCluster", "broker-b", {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}, "", False
        ),
        BrokerGroup("DefaultCluster", "broker-a", {1: "127.0.0.1:20921"}, "z1", True),
    ],
    [QueueData("broker-b", 2, 2, 6, 0), QueueData("broker-a", 3, 1, 4, 0)],
    "",
    0,
)


def test_route_fastjson_unquoted_integer_keys() -> None:
    assert wire.parse_route("T", answer(0, body=FASTJSON_ROUTE)) == EXPECTED_ROUTE


def test_route_standard_json_and_the_nameservers_own_writer() -> None:
    quoted = (
        FASTJSON_ROUTE.replace(b"{0:", b'{"0":').replace(b",1:", b',"1":').replace(b"{1:", b'{"1":')
    )
    assert wire.parse_route("T", answer(0, body=quoted)) == EXPECTED_ROUTE
    doc = {
        "brokerDatas": [
            {
                "brokerAddrs": {0: "h:1"},
                "brokerName": "b",
                "cluster": "C",
                "enableActingMaster": False,
            }
        ],
        "filterServerTable": {},
        "orderTopicConf": "b:4",
        "queueDatas": [
            {
                "brokerName": "b",
                "perm": 6,
                "readQueueNums": 4,
                "topicSysFlag": 0,
                "writeQueueNums": 4,
            }
        ],
    }
    for standard in (False, True):
        r = wire.parse_route("X", answer(0, body=dumps_fastjson(doc, standard=standard)))
        assert r.brokers[0].addrs == {0: "h:1"} and r.order_topic_conf == "b:4"
        assert r.queues == [QueueData("b", 4, 4, 6, 0)]


def test_route_errors() -> None:
    with pytest.raises(TopicNotFound) as nf:
        wire.parse_route(
            "T", answer(17, remark="No topic route info in name server for the topic: T")
        )
    assert nf.value.topic == "T" and not nf.value.retriable
    with pytest.raises(RemotingError) as err:
        wire.parse_route("T", answer(1, remark="name server not ready"))
    assert err.value.code == 1
    for body in (b"", b"{", b"[]", b'{"brokerDatas":{}}', b'{"queueDatas":[{"brokerName":"b"}]}',
                 b'{"brokerDatas":[{"brokerName":"b","brokerAddrs":{"x":"h:1"}}]}',
                 b'{"brokerDatas":[{"brokerName":"b","brokerAddrs":{0:5}}]}',
                 b'{"brokerDatas":[{"brokerName":"b","brokerAddrs":{"--1":"h:1"}}]}',
                 b'{"queueDatas":[{"brokerName":"b","perm":"--6","readQueueNums":1,"writeQueueNums":1}]}',
                 b'{"queueDatas":[{"brokerName":"b","perm":true,"readQueueNums":1,"writeQueueNums":1}]}',
                 b"\xff\xfe"):  # fmt: skip
        with pytest.raises(BadAnswer):
            wire.parse_route("T", answer(0, body=body))


def test_request_frames() -> None:
    r = wire.route_request("T")
    assert r.code == 105 and r.ext_fields == {"topic": "T", "acceptStandardJsonOnly": "true"}
    assert wire.topic_list_request().code == 206
    by_cluster = wire.topic_list_request("C")
    assert by_cluster.code == 224 and by_cluster.ext_fields == {"cluster": "C"}
    assert wire.cluster_info_request().code == 106


def test_topic_list() -> None:
    body = dumps_fastjson({"topicList": ["A", "%RETRY%g", "ü"]}, standard=False)
    assert wire.parse_topic_list(answer(0, body=body)) == ["A", "%RETRY%g", "ü"]
    assert wire.parse_topic_list(answer(0, body=b'{"topicList":[],"brokerAddr":"h:1"}')) == []
    with pytest.raises(RemotingError):
        wire.parse_topic_list(answer(1, remark="disable"))
    with pytest.raises(BadAnswer):
        wire.parse_topic_list(answer(0, body=b'{"topicList":[1]}'))


def test_cluster_info() -> None:
    body = (
        b'{"brokerAddrTable":{"b2":{"brokerAddrs":{0:"h:2"},"brokerName":"b2","cluster":"C"},'
        b'"b1":{"brokerAddrs":{0:"h:1",1:"h:11"},"brokerName":"b1","cluster":"D"}},'
        b'"clusterAddrTable":{"C":["b2"],"D":["b1"]}}'
    )
    groups = wire.parse_cluster_info(answer(0, body=body))
    assert [(g.broker_name, g.cluster, dict(g.addrs)) for g in groups] == [
        ("b1", "D", {0: "h:1", 1: "h:11"}),
        ("b2", "C", {0: "h:2"}),
    ]


# --- read queues, sources, addresses ---------------------------------------------------------


def test_read_queues_order_perm_and_masters() -> None:
    qs = read_queues(EXPECTED_ROUTE)
    assert qs == [
        ReadQueue("T", "broker-a", 0, None),
        ReadQueue("T", "broker-a", 1, None),
        ReadQueue("T", "broker-a", 2, None),
        ReadQueue("T", "broker-b", 0, "127.0.0.1:10911"),
        ReadQueue("T", "broker-b", 1, "127.0.0.1:10911"),
    ]
    assert qs[3].partition == "T/broker-b/0"
    write_only = Route("W", [], [QueueData("b", 4, 4, 2)], "", 0)
    assert read_queues(write_only) == []


def test_source_property() -> None:
    assert wire.SOURCE_PROPERTY == "ROCKETMQ_REPLICATOR_SOURCE"
    assert wire.parse_sources(None) == wire.parse_sources("") == []
    assert wire.parse_sources("a,b") == ["a", "b"]
    assert wire.with_source(None, "a") == "a"
    assert wire.with_source("a", "b") == "a,b"
    assert wire.with_source("a,b", "a") == "a,b"


def test_nameserver_addresses() -> None:
    assert ClusterClient("h1:1; h2:2;").namesrv == ["h1:1", "h2:2"]
    for bad in ("", ";", "h1", "h1:x", ":9"):
        with pytest.raises(ValueError):
            ClusterClient(bad)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v).encode()), JSON, JSON)
def test_any_route_body_parses_or_is_a_bad_answer(
    raw: bytes, brokers: object, queues: object
) -> None:
    shaped = json.dumps({"brokerDatas": [{"brokerAddrs": brokers}], "queueDatas": [queues]})
    for body in (raw, shaped.encode()):
        for parse in (
            lambda a: wire.parse_route("T", a),
            wire.parse_topic_list,
            wire.parse_cluster_info,
        ):
            try:
                parse(answer(0, body=body))
            except BadAnswer:
                pass


def test_wire_and_routes_do_no_io() -> None:
    for module in (wire, routes):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not names & {"socket", "asyncio", "selectors"}, module.__name__
        assert not any(n.startswith("broker") for n in names), module.__name__
