"""The records of RocketMQ's route data in the metadata image (docs/semantics.md, "RocketMQ
routes").

Three record types, each one effect per (type, key) so the change log stays a compacted
topic (last write per key wins):

* ``broker``   key ``broker name NUL broker id`` -- one broker replica as registered
  (:class:`Broker`: cluster, address, HA address, zone, data version, heartbeat timeout,
  enableActingMaster, and the offset and time of the registration that made it);
* ``topic``    key ``topic NUL broker name`` -- a topic's queue data on one broker name
  (:class:`TopicQueue`);
* ``kvconfig`` key ``namespace NUL key`` -- one KV config item (:class:`KvConfig`).

Clusters are not records: a cluster is the set of broker names whose brokers name it, as
RocketMQ's ``clusterAddrTable`` is kept in step with ``brokerAddrTable``. Deriving it
keeps one truth and one delete (the last broker of a name leaving empties its cluster).

This module holds only value classes (no rules; those are :mod:`nameserver.routing.apply`), so
the image can import it without a cycle. Names may not contain NUL (checked by the rules).
"""

from __future__ import annotations

from dataclasses import dataclass

from protos import records_pb2

SEP = b"\x00"
#: RocketMQ's DEFAULT_BROKER_CHANNEL_EXPIRED_TIME: a broker's liveness timeout when it
#: sends no ``heartbeatTimeoutMillis``.
DEFAULT_HEARTBEAT_TIMEOUT_MS = 120_000


def broker_key(broker_name: str, broker_id: int) -> bytes:
    return broker_name.encode() + SEP + str(broker_id).encode()


def topic_key(topic: str, broker_name: str) -> bytes:
    return topic.encode() + SEP + broker_name.encode()


def kvconfig_key(namespace: str, key: str) -> bytes:
    return namespace.encode() + SEP + key.encode()


def prefix_range(name: str) -> tuple[bytes, bytes]:
    """The [start, end) key range of every record whose key starts with ``name NUL``."""
    return name.encode() + SEP, name.encode() + b"\x01"


@dataclass(frozen=True, slots=True)
class DataVersion:
    """RocketMQ's DataVersion; equality is RocketMQ's ``isTopicConfigChanged`` test."""

    counter: int = 0
    state_version: int = 0
    timestamp: int = 0

    def to_pb(self) -> records_pb2.DataVersionRecord:
        return records_pb2.DataVersionRecord(
            counter=self.counter, state_version=self.state_version, timestamp=self.timestamp
        )

    @staticmethod
    def from_pb(r: records_pb2.DataVersionRecord) -> DataVersion:
        return DataVersion(r.counter, r.state_version, r.timestamp)

    def to_json(self) -> dict[str, int]:
        return {
            "counter": self.counter,
            "stateVersion": self.state_version,
            "timestamp": self.timestamp,
        }


@dataclass(frozen=True, slots=True)
class Broker:
    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    ha_addr: str = ""
    zone: str = ""
    data_version: DataVersion = DataVersion()
    heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS
    enable_acting_master: bool | None = None
    registered_offset: int = 0
    registered_ms: int = 0

    @property
    def key(self) -> bytes:
        return broker_key(self.broker_name, self.broker_id)

    @property
    def deadline_ms(self) -> int:
        """When it expires if no heartbeat arrives after its registration."""
        return self.registered_ms + self.heartbeat_timeout_ms

    def size(self) -> int:
        return len(self.key) + len(self.addr) + len(self.ha_addr) + len(self.cluster)

    def to_record(self) -> bytes:
        r = records_pb2.BrokerRecord(
            cluster=self.cluster,
            broker_name=self.broker_name,
            broker_id=self.broker_id,
            addr=self.addr,
            ha_addr=self.ha_addr,
            zone=self.zone,
            data_version=self.data_version.to_pb(),
            heartbeat_timeout_ms=self.heartbeat_timeout_ms,
            registered_offset=self.registered_offset,
            registered_ms=self.registered_ms,
        )
        if self.enable_acting_master is not None:
            r.enable_acting_master = self.enable_acting_master
        data: bytes = r.SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> Broker:
        r = records_pb2.BrokerRecord.FromString(data)
        return Broker(
            r.cluster,
            r.broker_name,
            r.broker_id,
            r.addr,
            r.ha_addr,
            r.zone,
            DataVersion.from_pb(r.data_version),
            r.heartbeat_timeout_ms,
            r.enable_acting_master if r.HasField("enable_acting_master") else None,
            r.registered_offset,
            r.registered_ms,
        )


@dataclass(frozen=True, slots=True)
class TopicQueue:
    """RocketMQ's QueueData of one topic on one broker name (plus the topic's order flag)."""

    topic: str
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0
    order: bool = False

    @property
    def key(self) -> bytes:
        return topic_key(self.topic, self.broker_name)

    def size(self) -> int:
        return len(self.key) + 16

    def to_pb(self) -> records_pb2.TopicQueueRecord:
        return records_pb2.TopicQueueRecord(
            topic=self.topic,
            broker_name=self.broker_name,
            read_queue_nums=self.read_queue_nums,
            write_queue_nums=self.write_queue_nums,
            perm=self.perm,
            topic_sys_flag=self.topic_sys_flag,
            order=self.order,
        )

    def to_record(self) -> bytes:
        data: bytes = self.to_pb().SerializeToString()
        return data

    @staticmethod
    def from_pb(r: records_pb2.TopicQueueRecord) -> TopicQueue:
        return TopicQueue(
            r.topic,
            r.broker_name,
            r.read_queue_nums,
            r.write_queue_nums,
            r.perm,
            r.topic_sys_flag,
            r.order,
        )

    @staticmethod
    def from_record(data: bytes) -> TopicQueue:
        return TopicQueue.from_pb(records_pb2.TopicQueueRecord.FromString(data))

    def to_json(self) -> dict[str, object]:
        """RocketMQ's QueueData as fastjson writes it (properties in alphabetical order)."""
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass(frozen=True, slots=True)
class KvConfig:
    namespace: str
    key: str
    value: str

    @property
    def record_key(self) -> bytes:
        return kvconfig_key(self.namespace, self.key)

    def size(self) -> int:
        return len(self.record_key) + len(self.value.encode())

    def to_record(self) -> bytes:
        data: bytes = records_pb2.KvConfigRecord(
            namespace=self.namespace, key=self.key, value=self.value
        ).SerializeToString()
        return data

    @staticmethod
    def from_record(data: bytes) -> KvConfig:
        r = records_pb2.KvConfigRecord.FromString(data)
        return KvConfig(r.namespace, r.key, r.value)


def key_of_broker(b: Broker) -> bytes:
    return b.key


def key_of_topic(q: TopicQueue) -> bytes:
    return q.key


def key_of_kvconfig(c: KvConfig) -> bytes:
    return c.record_key
