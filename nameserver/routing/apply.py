"""RocketMQ route data: the apply rules of ``broker``/``topic``/``kvconfig`` entries
(docs/semantics.md, "RocketMQ routes"); the queries both fronts answer from an image are
:mod:`nameserver.routing.queries`.

The rules are RocketMQ's ``namesrv/.../routeinfo/RouteInfoManager.java``, decided inside apply
against the image as the entry finds it, so every node decides alike. Like the rest of the
state machine this module reads no clock (time comes from ``entry.timestamp_ms``) and
imports nothing from gRPC or asyncio.

Register (``RegisterBrokerOp``), in order:

1. names are well formed (non-empty, no NUL, at most 1,024 bytes), ids >= 0;
2. a broker name keeps the cluster it was first registered in (FAILED_PRECONDITION);
3. a re-registration whose DataVersion ``stateVersion`` is lower than the stored one is
   rejected ("register broker failed", as RocketMQ answers SYSTEM_ERROR);
4. a registration carrying exactly one topic from a broker id never registered is rejected
   (RocketMQ: single-topic registration must follow a full one);
5. another id of the same broker name with the same address is removed (slave -> master);
6. the broker record is written only if something changed (address, HA address, zone,
   data version, timeout, enableActingMaster): an unchanged re-registration is only a
   heartbeat and leaves no effect, so the log records changes of state only;
7. only the master (id 0) updates queue data, and only on its first registration (or a
   new address) or when its DataVersion changed. Topics a broker stops listing are kept
   (RocketMQ's ``deleteTopicWithBrokerRegistration`` defaults to false).

Unregister and expiry remove the broker record; when the last broker of a name goes, the
name's queue data goes with it (``removeTopicByBrokerName``) and its cluster, being
derived, disappears. An expiry names the registration it saw (``registered_offset``): a
re-registration applied in between wins. A route (``pick_route``) exists only when the
topic has queue data and at least one of its broker names has a broker
(``pickupTopicRouteData``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from nameserver.checks import check_name, check_non_negative, invalid
from nameserver.errors import FailedPrecondition, NotFound
from nameserver.routing.records import (
    DEFAULT_HEARTBEAT_TIMEOUT_MS,
    Broker,
    DataVersion,
    KvConfig,
    TopicQueue,
    broker_key,
    kvconfig_key,
    prefix_range,
)
from nameserver.state.image import MetadataDelta
from nameserver.state.mapdelta import RecordsDelta
from protos import records_pb2
from raftlog import Effect, Entry
from rmq.codes import PERM_READ, PERM_WRITE

#: The KV config namespace whose items are the order config of topics (RocketMQ's
#: ``NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG``).
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"

#: Which operations each entry type carries.
ROUTING_ENTRY_TYPES: dict[str, frozenset[str]] = {
    "broker": frozenset({"register_broker", "unregister_broker", "expire_brokers", "write_perm"}),
    "topic": frozenset({"create_topic", "delete_topic"}),
    "kvconfig": frozenset({"put_kv_config", "delete_kv_config"}),
}


def check_queue(field: str, read: int, write: int, perm: int) -> None:
    check_non_negative(f"{field}.read_queue_nums", read)
    check_non_negative(f"{field}.write_queue_nums", write)
    if not 0 <= perm <= 0xF:
        raise invalid(f"{field}.perm must be a permission bit set 0..15 (perm: {perm})")


def check_register(op: records_pb2.RegisterBrokerOp) -> None:
    check_name("cluster", op.cluster)
    check_name("broker_name", op.broker_name)
    check_name("broker_addr", op.addr)
    check_non_negative("broker_id", op.broker_id)
    check_non_negative("heartbeat_timeout_ms", op.heartbeat_timeout_ms)
    for t in op.topics:
        check_name("topic", t.topic)
        check_queue(f"topic {t.topic!r}", t.read_queue_nums, t.write_queue_nums, t.perm)


#: RocketMQ's ``TopicValidator``: a topic name is at most 127 characters of ``%|a-zA-Z0-9_-``.
TOPIC_MAX_LENGTH = 127
_TOPIC_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")
#: A CreateTopic names at most this many broker names, each with at most this many read and
#: write queues (RocketMQ sets no limit; clients build one queue object per queue, and no
#: deployment runs anywhere near this many).
MAX_TOPIC_BROKERS = 1024
MAX_QUEUE_NUMS = 1024


def check_topic_name(field: str, topic: str) -> None:
    """A topic name as RocketMQ's TopicValidator accepts it, checked on requests that create
    topics (apply keeps :func:`check_create_topic`'s older rule: entries already in a log
    must apply as they did)."""
    if not topic:
        raise invalid(f"{field} must not be empty")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise invalid(
            f"{field} is too long: {len(topic)} characters > limit {TOPIC_MAX_LENGTH} "
            "(RocketMQ's topic name limit)"
        )
    if not _TOPIC_NAME.fullmatch(topic):
        raise invalid(f"{field} {topic!r} may contain only the characters %|a-zA-Z0-9_-")


def check_create_topic_request(topic: str, queue_count: int) -> None:
    """What a CreateTopic request must pass before anything is built from it: its size is
    then bounded, so a rejected request costs no memory in proportion to what it claims."""
    check_topic_name("topic", topic)
    if queue_count > MAX_TOPIC_BROKERS:
        raise invalid(f"queues names {queue_count} brokers > limit {MAX_TOPIC_BROKERS} per topic")


def check_queue_nums(op: records_pb2.CreateTopicOp) -> None:
    """The request-side bound on queue counts (on top of :func:`check_create_topic`)."""
    for i, q in enumerate(op.queues):
        for name in ("read_queue_nums", "write_queue_nums"):
            value = getattr(q, name)
            if value > MAX_QUEUE_NUMS:
                raise invalid(
                    f"queues[{i}].{name} is {value} > limit {MAX_QUEUE_NUMS} queues per broker"
                )


def check_create_topic(op: records_pb2.CreateTopicOp) -> None:
    check_name("topic", op.topic)
    if not op.queues:
        raise invalid("queues must name at least one broker")
    for q in op.queues:
        check_name("queues.broker_name", q.broker_name)
        check_queue(f"queues[{q.broker_name!r}]", q.read_queue_nums, q.write_queue_nums, q.perm)


def check_kv(namespace: str, key: str) -> None:
    check_name("namespace", namespace)
    check_name("key", key)


# ------------------------------------------------------------------------ apply
@dataclass(frozen=True)
class Registered:
    """The result of a registration: the broker as stored, whether the log changed, and
    for a slave its master's address and HA address (REGISTER_BROKER's answer)."""

    broker: Broker
    changed: bool
    master_addr: str = ""
    ha_server_addr: str = ""


def apply_routing_entry(delta: MetadataDelta, e: Entry, rev: int, effects: list[Effect]) -> Any:
    """One ``broker``, ``topic`` or ``kvconfig`` entry (the registry's rule)."""
    op = records_pb2.RoutingOperation.FromString(e.value)
    return apply_routing(delta, op, e.type, e.timestamp_ms, rev, effects)


def apply_routing(
    delta: MetadataDelta,
    op: records_pb2.RoutingOperation,
    entry_type: str,
    timestamp_ms: int,
    rev: int,
    effects: list[Effect],
) -> Any:
    which = op.WhichOneof("op")
    if which is None or which not in ROUTING_ENTRY_TYPES[entry_type]:
        raise invalid(f"{entry_type} entry carries no {entry_type} operation ({which})")
    if which == "register_broker":
        return register_broker(delta, op.register_broker, rev, timestamp_ms, effects)
    if which == "unregister_broker":
        return unregister_broker(delta, op.unregister_broker, effects)
    if which == "expire_brokers":
        return expire_brokers(delta, op.expire_brokers, timestamp_ms, effects)
    if which == "write_perm":
        return write_perm(delta, op.write_perm.broker_name, op.write_perm.wipe, effects)
    if which == "create_topic":
        return create_topic(delta, op.create_topic, effects)
    if which == "delete_topic":
        return delete_topic(delta, op.delete_topic.topic, op.delete_topic.cluster, effects)
    if which == "put_kv_config":
        c = op.put_kv_config
        check_kv(c.namespace, c.key)
        item = KvConfig(c.namespace, c.key, c.value)
        _put(delta.kvconfig, item, item.record_key, "kvconfig", effects)
        return item
    d = op.delete_kv_config
    check_kv(d.namespace, d.key)
    return _delete(delta.kvconfig, kvconfig_key(d.namespace, d.key), "kvconfig", effects)


def _put(
    records: RecordsDelta[Any], value: Any, key: bytes, type_: str, effects: list[Effect]
) -> bool:
    if records.get(key) == value:
        return False
    records.put(value)
    effects.append(Effect(type_, key, value.to_record()))
    return True


def _delete(records: RecordsDelta[Any], key: bytes, type_: str, effects: list[Effect]) -> bool:
    if records.get(key) is None:
        return False
    records.delete(key)
    effects.append(Effect(type_, key, delete=True))
    return True


def register_broker(
    delta: MetadataDelta,
    op: records_pb2.RegisterBrokerOp,
    rev: int,
    timestamp_ms: int,
    effects: list[Effect],
) -> Registered:
    check_register(op)
    siblings = delta.brokers.range(*prefix_range(op.broker_name))
    for s in siblings:
        if s.cluster != op.cluster:
            raise FailedPrecondition(
                f"metaledger: broker name {op.broker_name!r} belongs to cluster {s.cluster!r}, "
                f"not {op.cluster!r}",
            )
    key = broker_key(op.broker_name, op.broker_id)
    old = delta.brokers.get(key)
    version = DataVersion.from_pb(op.data_version)
    if old is not None and old.data_version.state_version > version.state_version:
        raise FailedPrecondition(
            f"register broker failed: stateVersion {version.state_version} of "
            f"{op.broker_name}[{op.broker_id}] is lower than the registered "
            f"{old.data_version.state_version}",
        )
    if old is None and len(op.topics) == 1:
        raise FailedPrecondition(
            f"register broker failed: {op.broker_name}[{op.broker_id}] is not registered, "
            "so a single-topic registration cannot come first",
        )
    for s in siblings:
        if s.broker_id != op.broker_id and s.addr == op.addr:
            _delete(delta.brokers, s.key, "broker", effects)
    new = Broker(
        cluster=op.cluster,
        broker_name=op.broker_name,
        broker_id=op.broker_id,
        addr=op.addr,
        ha_addr=op.ha_addr,
        zone=op.zone,
        data_version=version,
        heartbeat_timeout_ms=op.heartbeat_timeout_ms or DEFAULT_HEARTBEAT_TIMEOUT_MS,
        enable_acting_master=(
            op.enable_acting_master if op.HasField("enable_acting_master") else None
        ),
        registered_offset=rev,
        registered_ms=timestamp_ms,
    )
    same = (
        old is not None and replace(old, registered_offset=rev, registered_ms=timestamp_ms) == new
    )
    if same:
        assert old is not None
        new = old
    else:
        delta.brokers.put(new)
        effects.append(Effect("broker", key, new.to_record()))
    first = old is None or old.addr != op.addr
    if op.broker_id == 0 and (first or old is None or old.data_version != version):
        for t in op.topics:
            q = TopicQueue(
                t.topic,
                op.broker_name,
                t.read_queue_nums,
                t.write_queue_nums,
                t.perm,
                t.topic_sys_flag,
                t.order,
            )
            _put(delta.topics, q, q.key, "topic", effects)
    master = delta.brokers.get(broker_key(op.broker_name, 0)) if op.broker_id else None
    return Registered(
        new,
        not same,
        master.addr if master else "",
        master.ha_addr if master else "",
    )


def remove_broker(delta: MetadataDelta, broker: Broker, effects: list[Effect]) -> None:
    """Drop a broker; the last one of its name takes the name's queue data along."""
    _delete(delta.brokers, broker.key, "broker", effects)
    if delta.brokers.range(*prefix_range(broker.broker_name)):
        return
    for q in delta.topics.values():
        if q.broker_name == broker.broker_name:
            _delete(delta.topics, q.key, "topic", effects)


def unregister_broker(
    delta: MetadataDelta, op: records_pb2.UnregisterBrokerOp, effects: list[Effect]
) -> int:
    """Remove the brokers of ``broker_name`` at ``addr`` (RocketMQ 5 removes by address);
    without an address, the one with ``broker_id``. Returns how many were removed."""
    check_name("broker_name", op.broker_name)
    removed = 0
    for b in delta.brokers.range(*prefix_range(op.broker_name)):
        if (op.addr and b.addr == op.addr) or (not op.addr and b.broker_id == op.broker_id):
            remove_broker(delta, b, effects)
            removed += 1
    return removed


def expire_brokers(
    delta: MetadataDelta, op: records_pb2.ExpireBrokersOp, timestamp_ms: int, effects: list[Effect]
) -> list[str]:
    expired = []
    for e in op.brokers:
        b = delta.brokers.get(broker_key(e.broker_name, e.broker_id))
        # re-checked with the entry's time: a registration applied since wins
        if b is None or b.registered_offset != e.registered_offset:
            continue
        if timestamp_ms < b.deadline_ms:
            continue
        remove_broker(delta, b, effects)
        expired.append(f"{b.broker_name}[{b.broker_id}]@{b.addr}")
    return expired


def write_perm(delta: MetadataDelta, broker_name: str, wipe: bool, effects: list[Effect]) -> int:
    """WIPE/ADD_WRITE_PERM_OF_BROKER: clear the write bit of every topic's queue data on
    ``broker_name``, or set it back to read+write; returns the number of topics."""
    check_name("broker_name", broker_name)
    count = 0
    for q in delta.topics.values():
        if q.broker_name != broker_name:
            continue
        perm = q.perm & ~PERM_WRITE if wipe else PERM_READ | PERM_WRITE
        _put(delta.topics, replace(q, perm=perm), q.key, "topic", effects)
        count += 1
    return count


def create_topic(
    delta: MetadataDelta, op: records_pb2.CreateTopicOp, effects: list[Effect]
) -> list[TopicQueue]:
    check_create_topic(op)
    out = []
    for r in op.queues:
        if not delta.brokers.range(*prefix_range(r.broker_name)):
            raise NotFound(f"metaledger: broker name {r.broker_name!r} is not registered")
        q = replace(TopicQueue.from_pb(r), topic=op.topic)
        _put(delta.topics, q, q.key, "topic", effects)
        out.append(q)
    return out


def delete_topic(delta: MetadataDelta, topic: str, cluster: str, effects: list[Effect]) -> int:
    """Delete a topic's queue data (only on the brokers of ``cluster`` when given)."""
    check_name("topic", topic)
    names = broker_names_of_cluster(delta.brokers.values(), cluster) if cluster else None
    deleted = 0
    for q in delta.topics.range(*prefix_range(topic)):
        if names is None or q.broker_name in names:
            deleted += _delete(delta.topics, q.key, "topic", effects)
    return deleted


# ---------------------------------------------------------------------- helpers
def broker_names_of_cluster(brokers: Iterable[Broker], cluster: str) -> set[str]:
    return {b.broker_name for b in brokers if b.cluster == cluster}


# ---------------------------------------------------------------------- entries
_FAMILY = {op: family for family, ops in ROUTING_ENTRY_TYPES.items() for op in ops}


def routing_entry(op: records_pb2.RoutingOperation, key: bytes = b"") -> Entry:
    """The log entry carrying ``op`` (its type is the operation's family)."""
    which = op.WhichOneof("op")
    if which is None:
        raise invalid("routing operation carries no operation")
    return Entry(type=_FAMILY[which], key=key, value=op.SerializeToString())
