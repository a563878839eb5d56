"""The nameserver's remoting handlers, one test per request code, on an in-memory node
(the state machine applies proposals directly; no consensus, no sockets)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from nameserver.config import MAX_REQUEST_BYTES
from nameserver.errors import InvalidArgument, ResourceExhausted, Unavailable
from nameserver.kinds import REGISTRY
from nameserver.routing.liveness import BrokerKeeper
from nameserver.routing.ops import RoutingNode
from nameserver.routing.records import broker_key
from nameserver.routing.remoting import NameserverRemoting
from nameserver.state.image import MetadataImage
from nameserver.state.machine import MetadataStateMachine
from nameserver.state.registry import Registry
from raftlog import Applied, Entry, NotLeaderError
from rmq.codec import BadRequest, RemotingCommand, loads_lenient
from rmq.codes import RequestCode, ResponseCode
from rmq.headers import (
    BrokerHeartbeatHeader,
    BrokerIdentityHeader,
    BrokerNameHeader,
    DeleteTopicHeader,
    GetBrokerMemberGroupHeader,
    GetKvListByNamespaceHeader,
    GetRouteInfoHeader,
    GetTopicsByClusterHeader,
    KvConfigKeyHeader,
    PutKvConfigHeader,
    RegisterTopicHeader,
)
from rmq.server import Peer
from tests.remoting_client import register_request, unregister_request

PEER = Peer(1, "127.0.0.1:1")
A = "127.0.0.1:10911"


class FakeNode:
    """The part of NodeFacade the routing front uses, applying proposals at once."""

    def __init__(self) -> None:
        self.state = MetadataStateMachine.empty(REGISTRY)
        self.offset = 0
        self.clock = 1_000_000

    @property
    def registry(self) -> Registry:
        return self.state.registry

    async def read_image(self, serializable: bool) -> MetadataImage:
        assert serializable, "route reads are eventual: no read barrier"
        return self.state.image

    def check_encoded_size(self, size: int) -> None:
        if size > MAX_REQUEST_BYTES:
            raise InvalidArgument(f"etcdserver: request is too large: {size} bytes")

    async def propose(self, entry: Entry, context: Any) -> Applied:
        self.offset += 1
        e = Entry(type=entry.type, key=entry.key, value=entry.value, timestamp_ms=self.clock)
        _, result = self.state.apply(self.offset, 1, [e])
        self.state.publish()
        return Applied(self.offset, result)


class Front:
    def __init__(self) -> None:
        self.node = FakeNode()
        self.keeper = BrokerKeeper(
            None,  # type: ignore[arg-type]  # no log: the tasks are not started
            self.node.state,
            1.0,
            lambda: None,
            clock_ms=lambda: self.node.clock,
        )
        self.routes = RoutingNode(self.node, self.keeper)
        self.table = NameserverRemoting(self.routes)

    def __call__(self, request: RemotingCommand) -> RemotingCommand:
        handler = self.table.lookup(request.code)
        assert handler is not None, request.code
        reply = asyncio.run(handler(request, PEER))
        assert reply is not None
        return reply

    def register(self, *args: Any, **kw: Any) -> RemotingCommand:
        return self(register_request(*args, **kw))


@pytest.fixture
def front() -> Front:
    f = Front()
    assert f.register("broker-a", A, ["T1", "T2"]).code == ResponseCode.SUCCESS
    return f


def test_every_nameserver_code_has_a_handler() -> None:
    from nameserver.remoting.codes import NAMESERVER_REQUEST_CODES

    table = Front().table
    assert {c for c in NAMESERVER_REQUEST_CODES if table.lookup(c) is None} == set()
    assert table.lookup(RequestCode.GET_NAMESRV_CONFIG) is None  # -> REQUEST_CODE_NOT_SUPPORTED


def test_105_route_fastjson_for_old_clients_and_standard_json_for_new(front: Front) -> None:
    old = front(GetRouteInfoHeader(topic="T1").request().replace(version=121))
    assert old.code == 0 and b'"brokerAddrs":{0:"127.0.0.1:10911"}' in old.body
    new = front(GetRouteInfoHeader(topic="T1").request().replace(version=401))
    assert b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in new.body
    asked = front(
        GetRouteInfoHeader(topic="T1", accept_standard_json_only=True).request().replace(version=63)
    )
    route = json.loads(asked.body)
    assert route["queueDatas"] == [
        {
            "brokerName": "broker-a",
            "perm": 6,
            "readQueueNums": 4,
            "topicSysFlag": 0,
            "writeQueueNums": 4,
        }
    ]


def test_105_missing_topic_and_missing_field(front: Front) -> None:
    r = front(GetRouteInfoHeader(topic="Nope").request())
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    assert r.remark is not None
    assert r.remark.startswith("No topic route info in name server for the topic: Nope\nSee ")


def test_103_register_answers_master_for_slaves_and_checks_crc(front: Front) -> None:
    r = front.register("broker-a", "127.0.0.2:10911", ["T1", "T2"], broker_id=1)
    assert r.code == 0
    assert r.ext_fields == {"masterAddr": A, "haServerAddr": "127.0.0.1:10912"}
    bad = register_request("broker-b", "127.0.0.3:1", ["X", "Y"])
    bad = bad.replace(ext_fields={**bad.ext_fields, "bodyCrc32": "12345"})
    assert (front(bad).code, front(bad).remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    assert front.node.state.image.brokers.get(broker_key("broker-b", 0)) is None


@pytest.mark.parametrize(
    "field", ["brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId"]
)
def test_103_missing_required_field_is_rocketmq_system_error(front: Front, field: str) -> None:
    req = register_request("broker-b", "127.0.0.3:1", ["X", "Y"])
    fields = dict(req.ext_fields)
    del fields[field]
    handler = front.table.lookup(103)
    assert handler is not None
    with pytest.raises(BadRequest, match=f"the custom field <{field}> is null"):
        asyncio.run(handler(req.replace(ext_fields=fields), PEER))


def test_103_unchanged_reregistration_writes_nothing(front: Front) -> None:
    before = front.node.offset
    assert front.register("broker-a", A, ["T1", "T2"]).code == 0
    assert front.node.offset == before  # a heartbeat only
    assert front.register("broker-a", A, ["T1", "T2", "T3"], counter=2).code == 0
    assert front.node.offset == before + 1


def test_103_lower_state_version_is_system_error(front: Front) -> None:
    front.register("broker-a", A, ["T1", "T2"], state_version=5, counter=2)
    r = front.register("broker-a", A, ["T1", "T2"], state_version=4, counter=3)
    assert r.code == ResponseCode.SYSTEM_ERROR and r.remark is not None
    assert r.remark.startswith("register broker failed")


def test_103_body_that_is_not_json(front: Front) -> None:
    req = register_request("broker-b", "127.0.0.3:1", ["X", "Y"]).replace(body=b"\x78\x9c garbage")
    req = req.replace(ext_fields={**req.ext_fields, "bodyCrc32": "0"})
    handler = front.table.lookup(103)
    assert handler is not None
    with pytest.raises(BadRequest, match="REGISTER_BROKER body is not JSON"):
        asyncio.run(handler(req, PEER))


def test_104_unregister_removes_at_once(front: Front) -> None:
    assert front(unregister_request("broker-a", A)).code == 0
    assert front(GetRouteInfoHeader(topic="T1").request()).code == ResponseCode.TOPIC_NOT_EXIST


def test_106_cluster_info(front: Front) -> None:
    r = front(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert r.body.startswith(b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911"}')
    info = loads_lenient(r.body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}


def test_205_327_write_perm(front: Front) -> None:
    r = front(BrokerNameHeader(broker_name="broker-a").request())
    assert (r.code, r.ext_fields) == (0, {"wipeTopicCount": "2"})
    route = json.loads(front(GetRouteInfoHeader(topic="T1").request().replace(version=401)).body)
    assert route["queueDatas"][0]["perm"] == 4
    r = front(
        BrokerNameHeader(broker_name="broker-a").request(code=RequestCode.ADD_WRITE_PERM_OF_BROKER)
    )
    assert (r.code, r.ext_fields) == (0, {"addTopicCount": "2"})


def test_206_224_304_topic_lists(front: Front) -> None:
    front.register("broker-b", "127.0.0.3:1", ["X", "Y"], cluster="C2")
    r = front(RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert json.loads(r.body) == {"topicList": ["T1", "T2", "X", "Y"]}
    r = front(GetTopicsByClusterHeader(cluster="C2").request())
    assert json.loads(r.body) == {"topicList": ["X", "Y"]}
    r = front(RemotingCommand.request(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS))
    body = json.loads(r.body)
    assert body["topicList"] == ["C2", "broker-b", "DefaultCluster", "broker-a"]
    assert body["brokerAddr"] in (A, "127.0.0.3:1")


def test_216_217_topic_register_and_delete(front: Front) -> None:
    body = b'{"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}]}'
    assert front(RegisterTopicHeader(topic="New").request(body)).code == 0
    route = json.loads(front(GetRouteInfoHeader(topic="New").request().replace(version=401)).body)
    assert route["queueDatas"][0]["readQueueNums"] == 2
    bad = front(RegisterTopicHeader(topic="New2").request(body.replace(b"broker-a", b"ghost")))
    assert bad.code == ResponseCode.SYSTEM_ERROR and "broker name 'ghost' is not registered" in (
        bad.remark or ""
    )
    assert front(DeleteTopicHeader(topic="New").request()).code == 0
    assert front(GetRouteInfoHeader(topic="New").request()).code == ResponseCode.TOPIC_NOT_EXIST


def test_100_101_102_219_kv_config(front: Front) -> None:
    assert front(PutKvConfigHeader(namespace="ns", key="k", value="v").request()).code == 0
    r = front(KvConfigKeyHeader(namespace="ns", key="k").request())
    assert (r.code, r.ext_fields) == (0, {"value": "v"})
    r = front(GetKvListByNamespaceHeader(namespace="ns").request())
    assert json.loads(r.body) == {"table": {"k": "v"}}
    assert front(KvConfigKeyHeader(namespace="ns", key="k").request(code=102)).code == 0
    r = front(KvConfigKeyHeader(namespace="ns", key="k").request())
    assert (r.code, r.remark) == (
        ResponseCode.QUERY_NOT_FOUND,
        "No config item, Namespace: ns Key: k",
    )
    r = front(GetKvListByNamespaceHeader(namespace="ns").request())
    assert (r.code, r.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: ns")
    r = front(PutKvConfigHeader(namespace="", key="k", value="v").request())
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "namespace or key is null")
    # a name no client could have stored comes back as its head and length, not whole
    # (the remoting fuzz test sent a 5,000-character namespace)
    long = "9" * 5000
    r = front(GetKvListByNamespaceHeader(namespace=long).request())
    want = f"No config item, Namespace: {'9' * 128}… (5000 characters)"
    assert (r.code, r.remark) == (ResponseCode.QUERY_NOT_FOUND, want)
    r = front(KvConfigKeyHeader(namespace="ns", key=long).request())
    assert r.code == ResponseCode.QUERY_NOT_FOUND and r.remark.endswith("… (5000 characters)")


def test_103_returns_order_topic_config_to_the_broker(front: Front) -> None:
    front(PutKvConfigHeader(namespace="ORDER_TOPIC_CONFIG", key="T1", value="broker-a:4").request())
    r = front.register("broker-a", A, ["T1", "T2"], counter=5)
    assert json.loads(r.body) == {"table": {"T1": "broker-a:4"}}


def test_322_query_data_version(front: Front) -> None:
    ident = BrokerIdentityHeader(
        broker_name="broker-a", broker_addr=A, cluster_name="DefaultCluster", broker_id=0
    )
    same = front(ident.request(b'{"counter":1,"stateVersion":0,"timestamp":1}', code=322))
    assert same.ext_fields == {"changed": "false"}
    assert json.loads(same.body) == {"counter": 1, "stateVersion": 0, "timestamp": 1}
    other = front(ident.request(b'{"counter":2,"stateVersion":0,"timestamp":1}', code=322))
    assert other.ext_fields == {"changed": "true"}
    front.node.clock += 500
    front(ident.request(b"{}", code=322))
    b = front.node.state.image.brokers.get(broker_key("broker-a", 0))
    assert b is not None and front.keeper.last_seen_ms(b) == front.node.clock
    handler = front.table.lookup(322)
    assert handler is not None
    with pytest.raises(
        BadRequest, match="QUERY_DATA_VERSION body must be a JSON object, got a list"
    ):
        asyncio.run(handler(ident.request(b"[1]", code=322), PEER))


def test_901_member_group(front: Front) -> None:
    front.register("broker-a", "127.0.0.2:10911", ["T1", "T2"], broker_id=1)
    r = front(
        GetBrokerMemberGroupHeader(cluster_name="DefaultCluster", broker_name="broker-a").request()
    )
    assert r.body == (
        b'{"brokerMemberGroup":{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.2:10911"},'
        b'"brokerName":"broker-a","cluster":"DefaultCluster"}}'
    )


def test_904_heartbeat_refreshes_liveness(front: Front) -> None:
    b = front.node.state.image.brokers.get(broker_key("broker-a", 0))
    assert b is not None
    front.node.clock += 60_000
    hb = BrokerHeartbeatHeader(cluster_name="DefaultCluster", broker_addr=A, broker_name="broker-a")
    assert front(hb.request(oneway=True)).code == 0
    assert front.keeper.last_seen_ms(b) == front.node.clock
    # the leader (its leadership started long ago) finds nothing due before the timeout
    front.keeper._leader_since_ms = 0
    assert front.keeper.due_for_expiry(front.node.clock + 119_999) == []
    assert front.keeper.due_for_expiry(front.node.clock + 120_000) == [b]


def test_new_leader_grants_a_full_timeout(front: Front) -> None:
    front.keeper._leader_since_ms = front.node.clock + 500_000
    assert front.keeper.due_for_expiry(front.node.clock + 600_000) == []
    assert len(front.keeper.due_for_expiry(front.node.clock + 620_000)) == 1


def test_write_failure_is_system_error_with_the_reason(front: Front) -> None:
    async def refuse(entry: Entry, context: Any) -> Applied:
        raise Unavailable("etcdserver: no leader")

    front.node.propose = refuse  # type: ignore[method-assign]
    r = front(PutKvConfigHeader(namespace="ns", key="k", value="v").request())
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "etcdserver: no leader")


def test_raftlog_not_leader_is_system_error_worded_as_on_grpc(front: Front) -> None:
    async def refuse(entry: Entry, context: Any) -> Applied:
        raise NotLeaderError("no leader", leader_hint="10.0.0.2:2380")

    front.node.propose = refuse  # type: ignore[method-assign]
    r = front(PutKvConfigHeader(namespace="ns", key="k", value="v").request())
    assert (r.code, r.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "etcdserver: no leader (last known leader: 10.0.0.2:2380)",
    )


def test_a_rejection_answers_its_remoting_code(front: Front) -> None:
    async def refuse(entry: Entry, context: Any) -> Applied:
        raise ResourceExhausted("metaledger: quota exceeded for record type kvconfig")

    front.node.propose = refuse  # type: ignore[method-assign]
    r = front(PutKvConfigHeader(namespace="ns", key="k", value="v").request())
    assert (r.code, r.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "metaledger: quota exceeded for record type kvconfig",
    )


# --- bad input names the field; nothing is built before the request is checked (issue 14)


def queue_datas(*entries: object) -> bytes:
    return json.dumps({"queueDatas": list(entries)}).encode()


QA = {"brokerName": "broker-a", "perm": 6, "readQueueNums": 2, "writeQueueNums": 2}


def answer(front: Front, request: RemotingCommand) -> RemotingCommand | None:
    """The handler's own answer (a BadRequest it raises is left to the caller)."""
    handler = front.table.lookup(request.code)
    assert handler is not None

    async def call() -> RemotingCommand | None:
        return await handler(request, PEER)

    return asyncio.run(call())


def system_error(front: Front, request: RemotingCommand) -> str:
    """The remark of a request answered SYSTEM_ERROR (as the server answers BadRequest)."""
    try:
        reply = answer(front, request)
    except BadRequest as exc:
        return str(exc)
    assert reply is not None and reply.code == ResponseCode.SYSTEM_ERROR, reply
    assert reply.remark is not None
    return reply.remark


@pytest.mark.parametrize(
    ("topic", "body", "names"),
    [
        (
            "T" * 155_000,
            queue_datas(*[QA] * 3000),
            "topic is too long: 155000 characters > limit 127",
        ),
        ("T" * 128, queue_datas(QA), "topic is too long: 128 characters > limit 127"),
        ("a.b", queue_datas(QA), "topic 'a.b' may contain only the characters %|a-zA-Z0-9_-"),
        ("T", queue_datas(*[QA] * 1025), "queueDatas has 1025 entries > limit 1024"),
        ("T", queue_datas({**QA, "readQueueNums": 1025}), "queues[0].read_queue_nums is 1025"),
        ("T", queue_datas({**QA, "writeQueueNums": 2**31}), "writeQueueNums is out of the range"),
        ("T", queue_datas([1]), "queueDatas[0] must be a JSON object, got a list"),
        (
            "T",
            queue_datas({**QA, "perm": "six"}),
            "queueDatas[0]: perm must be an integer, got 'six'",
        ),
        ("T", queue_datas({**QA, "brokerName": 7}), "queueDatas[0].brokerName must be a string"),
        ("T", b'{"queueDatas":{}}', "queueDatas must be a JSON list, got an object"),
        ("T", b"[]", "body must be a JSON object, got a list"),
        ("T", b"", "body must be a JSON object, got null"),
        ("T", b"[" * 50_000, "body is not JSON: it is nested too deeply"),
        ("T", b'{"queueDatas":' + b"1" * 5000 + b"}", "a number in it has too many digits"),
        ("T", b"\xff", "body is not JSON: it is not UTF-8 (bad byte at offset 0)"),
    ],
    ids=lambda v: str(v)[:20],
)
def test_217_register_topic_bad_input(front: Front, topic: str, body: bytes, names: str) -> None:
    before = front.node.offset
    remark = system_error(front, RegisterTopicHeader(topic=topic).request(body))
    assert names in remark
    assert len(remark) < 300
    assert front.node.offset == before  # nothing was proposed


def test_217_topic_names_rocketmq_accepts(front: Front) -> None:
    for topic in ("%RETRY%group-1", "a|b", "T" * 127, "rmq_sys_X"):
        reply = front(RegisterTopicHeader(topic=topic).request(queue_datas(QA)))
        assert reply.code == 0, reply.remark


@pytest.mark.parametrize(
    ("table", "names"),
    [
        (
            {"T": {"attributes": []}},
            "topic config 'T': attributes must be a JSON object, got a list",
        ),
        ({"T": []}, "topic config 'T' must be a JSON object, got a list"),
        ({"T": {"readQueueNums": [1]}}, "topic config 'T': readQueueNums must be an integer"),
        (
            {"T": {"topicName": {"a": 1}}},
            "topic config 'T': topicName must be a string, got an object",
        ),
        ({"T": {"order": "maybe"}}, "topic config 'T': order must be true or false, got 'maybe'"),
        ({"T": {"attributes": {"k": {"x": 1}}}}, "attributes.'k' must be a string, got an object"),
    ],
)
def test_103_register_body_fields_are_named(
    front: Front, table: dict[str, Any], names: str
) -> None:
    body = json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table}}).encode()
    request = register_request("broker-b", "127.0.0.3:1", ["X", "Y"]).replace(body=body)
    request = request.replace(ext_fields={**request.ext_fields, "bodyCrc32": "0"})
    assert names in system_error(front, request)


def test_103_filter_servers_and_data_version_are_typed(front: Front) -> None:
    def body(obj: object) -> RemotingCommand:
        req = register_request("broker-b", "127.0.0.3:1", ["X", "Y"])
        return req.replace(
            body=json.dumps(obj).encode(), ext_fields={**req.ext_fields, "bodyCrc32": "0"}
        )

    assert "filterServerList must be a JSON list, got 5" in system_error(
        front, body({"filterServerList": 5})
    )
    assert "dataVersion: counter is out of the range of a Java long" in system_error(
        front, body({"topicConfigSerializeWrapper": {"dataVersion": {"counter": 2**64}}})
    )


def test_header_numbers_and_text_are_checked(front: Front) -> None:
    ident = BrokerIdentityHeader(
        broker_name="broker-a", broker_addr=A, cluster_name="DefaultCluster", broker_id=0
    ).request(code=104)
    huge = ident.replace(ext_fields={**ident.ext_fields, "brokerId": str(2**64)})
    assert system_error(front, huge) == "the custom field <brokerId> is out of the range of a long"
    surrogate = ident.replace(ext_fields={**ident.ext_fields, "brokerName": "a\ud800"})
    assert system_error(front, surrogate) == (
        "the custom field <brokerName> is not valid UTF-8 text (a lone surrogate)"
    )


def test_322_body_fields_are_named(front: Front) -> None:
    ident = BrokerIdentityHeader(
        broker_name="broker-a", broker_addr=A, cluster_name="DefaultCluster", broker_id=0
    )
    remark = system_error(front, ident.request(b'{"counter":"many"}', code=322))
    assert remark == "QUERY_DATA_VERSION body: counter must be an integer, got 'many'"


def test_a_bug_answers_a_generic_remark_and_logs_one_error(
    front: Front, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(what: str) -> MetadataImage:
        raise AttributeError("'list' object has no attribute 'items'")

    front.routes.read = broken  # type: ignore[method-assign]
    with caplog.at_level("INFO"):
        r = front(GetRouteInfoHeader(topic="T1").request())
    assert (r.code, r.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "metaledger: internal error serving request code 105; see the server log",
    )
    errors = [rec for rec in caplog.records if rec.levelname == "ERROR"]
    assert len(errors) == 1 and "AttributeError" in errors[0].getMessage()
    assert errors[0].exc_info is None  # one line, no traceback at ERROR


def test_103_a_registration_over_max_request_bytes_never_reaches_the_log(front: Front) -> None:
    before = front.node.offset
    topics = [f"Topic{i:06d}-{'x' * 40}" for i in range(60_000)]
    r = front.register("broker-big", "127.0.0.9:1", topics)
    assert r.code == ResponseCode.SYSTEM_ERROR and r.remark is not None
    assert r.remark.startswith("etcdserver: request is too large: ")
    assert front.node.offset == before
