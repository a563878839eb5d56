"""The route record kinds ``broker``, ``topic`` and ``kvconfig`` (RocketMQ route data),
registered in :mod:`nameserver.kinds`.

Route reads are eventual (RIP-18): any node's image, the answer carrying the node's apply
offset; clients re-read routes every 30 s, and every node converges on one log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nameserver.routing.apply import apply_routing_entry
from nameserver.routing.records import (
    Broker,
    KvConfig,
    TopicQueue,
    key_of_broker,
    key_of_kvconfig,
    key_of_topic,
)
from nameserver.state.consistency import EVENTUAL
from nameserver.state.mapdelta import RecordsDelta, RecordsImage, records_image
from nameserver.state.registry import RecordKind


def _route_kind(
    name: str,
    field: str,
    cls: Any,
    key_of: Callable[[Any], bytes],
) -> RecordKind:
    size = cls.size
    return RecordKind(
        name=name,
        field=field,
        empty=RecordsImage(),
        delta=lambda image: RecordsDelta(image, key_of, size),
        decode=cls.from_record,
        consistency=EVENTUAL,
        items=lambda image: image.data.items(),
        lookup=lambda image, key: image.get(key),
        from_items=lambda items: records_image(items, size),
        usage=lambda delta: (delta.count, delta.byte_count),
        rules={name: apply_routing_entry},  # the entry types are named as the record types
    )


BROKER = _route_kind("broker", "brokers", Broker, key_of_broker)
TOPIC = _route_kind("topic", "topics", TopicQueue, key_of_topic)
KVCONFIG = _route_kind("kvconfig", "kvconfig", KvConfig, key_of_kvconfig)
