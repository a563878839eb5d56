"""Route data apply rules (RocketMQ's RouteInfoManager, research note §1.4) driven through
the state machine with plain entries, and the route queries on the resulting image."""

from __future__ import annotations

from typing import Any

import pytest

from nameserver.errors import Rejected
from nameserver.kinds import REGISTRY
from nameserver.routing import apply as routing
from nameserver.routing import queries
from nameserver.routing.records import DataVersion, broker_key, topic_key
from nameserver.routing.remoting import route_json
from nameserver.state.image import MetadataDelta, MetadataImage
from nameserver.state.machine import (
    MetadataStateMachine,
    diff_images,
    image_from_records,
    image_records,
)
from protos import records_pb2
from raftlog import Entry


def register(
    name: str = "broker-a",
    broker_id: int = 0,
    addr: str = "127.0.0.1:10911",
    topics: tuple[str, ...] = ("T1", "T2"),
    cluster: str = "DefaultCluster",
    counter: int = 1,
    state_version: int = 0,
    ts: int = 1000,
    **kw: Any,
) -> Entry:
    op = records_pb2.RoutingOperation(
        register_broker=records_pb2.RegisterBrokerOp(
            cluster=cluster,
            broker_name=name,
            broker_id=broker_id,
            addr=addr,
            ha_addr=addr.replace("10911", "10912"),
            data_version=records_pb2.DataVersionRecord(
                counter=counter, state_version=state_version, timestamp=7
            ),
            topics=[
                records_pb2.TopicConfigRecord(
                    topic=t, read_queue_nums=4, write_queue_nums=4, perm=6
                )
                for t in topics
            ],
            **kw,
        )
    )
    e = routing.routing_entry(op)
    return Entry(type=e.type, value=e.value, timestamp_ms=ts)


def op_entry(ts: int = 1000, **kw: Any) -> Entry:
    e = routing.routing_entry(records_pb2.RoutingOperation(**kw))
    return Entry(type=e.type, value=e.value, timestamp_ms=ts)


class Machine:
    def __init__(self) -> None:
        self.sm = MetadataStateMachine.empty(REGISTRY)
        self.offset = 0
        self.effects: list[Any] = []

    def apply(self, *entries: Entry) -> Any:
        self.offset += 1
        effects, result = self.sm.apply(self.offset, 1, list(entries))
        self.sm.publish()
        self.effects.extend(effects)
        return result

    @property
    def image(self) -> MetadataImage:
        return self.sm.image


def test_register_master_creates_broker_queue_data_and_route() -> None:
    m = Machine()
    result = m.apply(register())
    assert isinstance(result, routing.Registered) and result.changed
    route = queries.pick_route(m.image, "T1")
    assert route is not None and route_json(route) == {
        "brokerDatas": [
            {
                "brokerAddrs": {0: "127.0.0.1:10911"},
                "brokerName": "broker-a",
                "cluster": "DefaultCluster",
                "enableActingMaster": False,
            }
        ],
        "filterServerTable": {},
        "queueDatas": [
            {
                "brokerName": "broker-a",
                "perm": 6,
                "readQueueNums": 4,
                "topicSysFlag": 0,
                "writeQueueNums": 4,
            }
        ],
    }
    assert queries.pick_route(m.image, "Missing") is None
    assert queries.clusters(m.image) == {"DefaultCluster": ["broker-a"]}
    assert queries.all_topics(m.image) == ["T1", "T2"]


def test_unchanged_reregistration_leaves_no_effect() -> None:
    m = Machine()
    m.apply(register())
    before = len(m.effects)
    result = m.apply(register(ts=5000))
    assert not result.changed and len(m.effects) == before
    # the stored registration is still the first one (liveness is the leader's memory)
    assert result.broker.registered_ms == 1000


def test_lower_state_version_is_rejected_and_changes_nothing() -> None:
    m = Machine()
    m.apply(register(state_version=3))
    with pytest.raises(Rejected, match="register broker failed: stateVersion 2"):
        m.apply(register(state_version=2, counter=9, topics=("T1", "T2", "T3")))
    assert queries.all_topics(m.image) == ["T1", "T2"]


def test_single_topic_registration_must_follow_a_full_one() -> None:
    m = Machine()
    with pytest.raises(Rejected, match="single-topic"):
        m.apply(register(topics=("T1",)))
    m.apply(register())
    m.apply(register(topics=("T9",), counter=2))  # now allowed
    assert "T9" in queries.all_topics(m.image)


def test_only_the_master_updates_queue_data_and_only_when_the_version_changed() -> None:
    m = Machine()
    m.apply(register())
    m.apply(register(broker_id=1, addr="127.0.0.2:10911", topics=("S1", "S2"), counter=5))
    assert queries.all_topics(m.image) == ["T1", "T2"]
    # same data version, other topics: ignored (RocketMQ's isTopicConfigChanged)
    m.apply(register(topics=("T1", "T2", "T3")))
    assert queries.all_topics(m.image) == ["T1", "T2"]
    m.apply(register(topics=("T1", "T2", "T3"), counter=2))
    assert queries.all_topics(m.image) == ["T1", "T2", "T3"]
    route = queries.pick_route(m.image, "T3")
    assert route is not None
    assert route.groups[0].addrs == {0: "127.0.0.1:10911", 1: "127.0.0.2:10911"}


def test_slave_registration_answers_master_addresses() -> None:
    m = Machine()
    m.apply(register())
    r = m.apply(register(broker_id=1, addr="127.0.0.2:10911"))
    assert (r.master_addr, r.ha_server_addr) == ("127.0.0.1:10911", "127.0.0.1:10912")


def test_same_address_under_a_new_id_replaces_the_old_id() -> None:
    m = Machine()
    m.apply(register())
    m.apply(register(broker_id=1, addr="127.0.0.2:10911"))
    # the slave becomes master: same address, id 0
    m.apply(register(broker_id=0, addr="127.0.0.2:10911", counter=3))
    assert [(b.broker_id, b.addr) for b in queries.brokers_of(m.image, "broker-a")] == [
        (0, "127.0.0.2:10911")
    ]


def test_broker_name_keeps_its_cluster() -> None:
    m = Machine()
    m.apply(register())
    with pytest.raises(Rejected, match="belongs to cluster 'DefaultCluster'"):
        m.apply(register(broker_id=1, addr="x:1", cluster="Other"))


def test_unregister_last_broker_removes_queue_data_and_cluster() -> None:
    m = Machine()
    m.apply(register())
    m.apply(register(broker_id=1, addr="127.0.0.2:10911"))
    unreg = records_pb2.UnregisterBrokerOp(
        cluster="DefaultCluster", broker_name="broker-a", broker_id=0, addr="127.0.0.1:10911"
    )
    assert m.apply(op_entry(unregister_broker=unreg)) == 1
    # a slave remains: the route stays (readable from the slave)
    route = queries.pick_route(m.image, "T1")
    assert route is not None and route.groups[0].addrs == {1: "127.0.0.2:10911"}
    unreg.broker_id, unreg.addr = 1, "127.0.0.2:10911"
    assert m.apply(op_entry(unregister_broker=unreg)) == 1
    assert queries.pick_route(m.image, "T1") is None
    assert len(m.image.topics) == 0 and queries.clusters(m.image) == {}
    # unregistering again is a no-op
    assert m.apply(op_entry(unregister_broker=unreg)) == 0


def test_expiry_needs_the_same_registration_and_a_passed_deadline() -> None:
    m = Machine()
    m.apply(register(heartbeat_timeout_ms=3000))
    b = m.image.brokers.get(broker_key("broker-a", 0))
    assert b is not None and b.heartbeat_timeout_ms == 3000
    stale = records_pb2.ExpiredBroker(broker_name="broker-a", broker_id=0, registered_offset=99)
    fresh = records_pb2.ExpiredBroker(
        broker_name="broker-a", broker_id=0, registered_offset=b.registered_offset
    )
    assert (
        m.apply(op_entry(ts=9000, expire_brokers=records_pb2.ExpireBrokersOp(brokers=[stale])))
        == []
    )
    # too early by the entry's own timestamp
    assert (
        m.apply(op_entry(ts=3999, expire_brokers=records_pb2.ExpireBrokersOp(brokers=[fresh])))
        == []
    )
    assert m.apply(
        op_entry(ts=4000, expire_brokers=records_pb2.ExpireBrokersOp(brokers=[fresh]))
    ) == ["broker-a[0]@127.0.0.1:10911"]
    assert queries.pick_route(m.image, "T1") is None


def test_write_perm_wipe_and_add() -> None:
    m = Machine()
    m.apply(register())
    assert (
        m.apply(op_entry(write_perm=records_pb2.WritePermOp(broker_name="broker-a", wipe=True)))
        == 2
    )
    assert {q.perm for q in m.image.topics.values()} == {4}
    assert m.apply(op_entry(write_perm=records_pb2.WritePermOp(broker_name="broker-a"))) == 2
    assert {q.perm for q in m.image.topics.values()} == {6}
    assert m.apply(op_entry(write_perm=records_pb2.WritePermOp(broker_name="nobody"))) == 0


def test_create_and_delete_topic() -> None:
    m = Machine()
    m.apply(register())
    m.apply(register(name="broker-b", addr="127.0.0.3:10911", cluster="C2"))
    q = records_pb2.TopicQueueRecord(
        broker_name="broker-b", read_queue_nums=2, write_queue_nums=2, perm=6
    )
    m.apply(op_entry(create_topic=records_pb2.CreateTopicOp(topic="New", queues=[q])))
    assert m.image.topics.get(topic_key("New", "broker-b")) is not None
    with pytest.raises(Rejected, match="broker name 'ghost' is not registered"):
        q.broker_name = "ghost"
        m.apply(op_entry(create_topic=records_pb2.CreateTopicOp(topic="New", queues=[q])))
    with pytest.raises(Rejected, match="queues must name at least one broker"):
        m.apply(op_entry(create_topic=records_pb2.CreateTopicOp(topic="New")))
    assert queries.all_topics(m.image, "C2") == ["New", "T1", "T2"]
    # delete only on cluster C2's brokers
    assert m.apply(op_entry(delete_topic=records_pb2.DeleteTopicOp(topic="T1", cluster="C2"))) == 1
    assert [q.broker_name for q in queries.queues_of(m.image, "T1")] == ["broker-a"]
    assert m.apply(op_entry(delete_topic=records_pb2.DeleteTopicOp(topic="T1"))) == 1
    assert queries.pick_route(m.image, "T1") is None


def test_kv_config_and_order_topic_conf() -> None:
    m = Machine()
    m.apply(register())
    put = records_pb2.KvConfigRecord(
        namespace=routing.ORDER_TOPIC_CONFIG, key="T1", value="broker-a:4"
    )
    m.apply(op_entry(put_kv_config=put))
    assert queries.kv_list(m.image, routing.ORDER_TOPIC_CONFIG) == {"T1": "broker-a:4"}
    route = queries.pick_route(m.image, "T1")
    assert route is not None and route.order_topic_conf == "broker-a:4"
    assert route_json(route)["orderTopicConf"] == "broker-a:4"
    delete = records_pb2.DeleteKvConfigOp(namespace=routing.ORDER_TOPIC_CONFIG, key="T1")
    assert m.apply(op_entry(delete_kv_config=delete)) is True
    assert m.apply(op_entry(delete_kv_config=delete)) is False
    with pytest.raises(Rejected, match="namespace must not be empty"):
        m.apply(op_entry(put_kv_config=records_pb2.KvConfigRecord(key="k", value="v")))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"name": ""}, "broker_name must not be empty"),
        ({"cluster": ""}, "cluster must not be empty"),
        ({"addr": ""}, "broker_addr must not be empty"),
        ({"broker_id": -1}, "broker_id must be >= 0"),
        ({"name": "a\x00b"}, "broker_name must not contain a NUL"),
        ({"topics": ("", "x")}, "topic must not be empty"),
    ],
)
def test_bad_registrations_are_rejected_whole(kw: dict[str, Any], message: str) -> None:
    m = Machine()
    with pytest.raises(Rejected, match=message):
        m.apply(register(**kw))
    assert len(m.image.brokers) == 0 and len(m.image.topics) == 0


def test_entry_type_must_match_its_operation() -> None:
    m = Machine()
    e = register()
    with pytest.raises(Rejected, match="topic entry carries no topic operation"):
        m.apply(Entry(type="topic", value=e.value, timestamp_ms=1))


def test_routes_round_trip_through_snapshot_records_and_effects() -> None:
    m = Machine()
    m.apply(register())
    m.apply(register(broker_id=1, addr="127.0.0.2:10911", enable_acting_master=True, zone="z1"))
    m.apply(op_entry(put_kv_config=records_pb2.KvConfigRecord(namespace="ns", key="k", value="v")))
    image = m.image
    back = image_from_records(list(image_records(image)), image.revision, 1, REGISTRY)
    assert diff_images(image, back) == []
    assert back.brokers.value_bytes == image.brokers.value_bytes
    # replaying the effects onto an empty image rebuilds it
    d = MetadataDelta(MetadataImage.empty(REGISTRY))
    for e in m.effects:
        d.replay(e.type, e.key, e.value, e.delete)
    assert diff_images(image, d.build()) == []
    b = back.brokers.get(broker_key("broker-a", 1))
    assert b is not None and b.enable_acting_master is True and b.zone == "z1"
    assert b.data_version == DataVersion(1, 0, 7)


def test_route_types_have_quotas() -> None:
    m = Machine()
    m.apply(op_entry(put_kv_config=records_pb2.KvConfigRecord(namespace="ns", key="k", value="v")))
    m.apply(
        Entry(
            type="quota",
            value=records_pb2.QuotaRecord(record_type="topic", max_keys=1).SerializeToString(),
        )
    )
    with pytest.raises(Rejected, match="quota exceeded for record type topic: 2 keys > limit 1"):
        m.apply(register())
    assert len(m.image.brokers) == 0
