"""Route records under random operation sequences: the image round-trips through snapshot
records and through its change-log effects, and queue data never outlive their brokers."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nameserver.errors import Rejected
from nameserver.kinds import REGISTRY
from nameserver.routing import apply as routing
from nameserver.routing.records import prefix_range
from nameserver.state.image import MetadataDelta, MetadataImage
from nameserver.state.machine import (
    MetadataStateMachine,
    diff_images,
    image_from_records,
    image_records,
)
from protos import records_pb2
from raftlog import Entry

NAMES = st.sampled_from(["a", "b", "c"])
TOPICS = st.lists(st.sampled_from(["T1", "T2", "T3", "T4"]), min_size=0, max_size=4, unique=True)
ADDRS = st.sampled_from(["h1:1", "h2:1", "h3:1"])


def _register(draw: Any) -> records_pb2.RoutingOperation:
    op = records_pb2.RegisterBrokerOp(
        cluster=draw(st.sampled_from(["C1", "C2"])),
        broker_name=draw(NAMES),
        broker_id=draw(st.integers(0, 2)),
        addr=draw(ADDRS),
        data_version=records_pb2.DataVersionRecord(
            counter=draw(st.integers(0, 3)), state_version=draw(st.integers(0, 2))
        ),
        heartbeat_timeout_ms=draw(st.sampled_from([0, 1000])),
    )
    for t in draw(TOPICS):
        op.topics.add(
            topic=t, read_queue_nums=4, write_queue_nums=4, perm=draw(st.sampled_from([2, 4, 6]))
        )
    return records_pb2.RoutingOperation(register_broker=op)


@st.composite
def operations(draw: Any) -> records_pb2.RoutingOperation:
    kind = draw(
        st.sampled_from(
            [
                "register",
                "register",
                "unregister",
                "expire",
                "perm",
                "create",
                "delete",
                "kv",
                "kvdel",
            ]
        )
    )
    if kind == "register":
        return _register(draw)
    if kind == "unregister":
        return records_pb2.RoutingOperation(
            unregister_broker=records_pb2.UnregisterBrokerOp(
                broker_name=draw(NAMES), addr=draw(ADDRS)
            )
        )
    if kind == "expire":
        op = records_pb2.RoutingOperation()
        op.expire_brokers.brokers.add(
            broker_name=draw(NAMES),
            broker_id=draw(st.integers(0, 2)),
            registered_offset=draw(st.integers(1, 30)),
        )
        return op
    if kind == "perm":
        return records_pb2.RoutingOperation(
            write_perm=records_pb2.WritePermOp(broker_name=draw(NAMES), wipe=draw(st.booleans()))
        )
    if kind == "create":
        op = records_pb2.RoutingOperation()
        op.create_topic.topic = draw(st.sampled_from(["T1", "T5"]))
        op.create_topic.queues.add(
            broker_name=draw(NAMES), read_queue_nums=1, write_queue_nums=1, perm=6
        )
        return op
    if kind == "delete":
        return records_pb2.RoutingOperation(
            delete_topic=records_pb2.DeleteTopicOp(
                topic=draw(st.sampled_from(["T1", "T2", "T5"])),
                cluster=draw(st.sampled_from(["", "C1"])),
            )
        )
    if kind == "kv":
        return records_pb2.RoutingOperation(
            put_kv_config=records_pb2.KvConfigRecord(
                namespace=draw(NAMES), key=draw(NAMES), value=draw(st.text(max_size=5))
            )
        )
    return records_pb2.RoutingOperation(
        delete_kv_config=records_pb2.DeleteKvConfigOp(namespace=draw(NAMES), key=draw(NAMES))
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(operations(), max_size=30))
def test_routes_round_trip_and_queue_data_never_outlive_brokers(
    ops: list[records_pb2.RoutingOperation],
) -> None:
    sm = MetadataStateMachine.empty(REGISTRY)
    effects = []
    for offset, op in enumerate(ops, start=1):
        e = routing.routing_entry(op)
        try:
            out, _ = sm.apply(
                offset, 1, [Entry(type=e.type, value=e.value, timestamp_ms=offset * 1000)]
            )
        except Rejected:
            out = []
        effects.extend(out)
        sm.publish()
    image = sm.image
    for q in image.topics.values():
        assert list(image.brokers.range(*prefix_range(q.broker_name))), q
    back = image_from_records(list(image_records(image)), image.revision, 1, REGISTRY)
    assert diff_images(image, back) == []
    assert (back.brokers.value_bytes, back.topics.value_bytes, back.kvconfig.value_bytes) == (
        image.brokers.value_bytes,
        image.topics.value_bytes,
        image.kvconfig.value_bytes,
    )
    delta = MetadataDelta(MetadataImage.empty(REGISTRY))
    for ef in effects:
        delta.replay(ef.type, ef.key, ef.value, ef.delete)
    assert diff_images(image, delta.build()) == []
