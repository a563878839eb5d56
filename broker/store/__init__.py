"""The broker's message store: RocketMQ's commit log, consume queues, flush, recovery, retention.

MessageStore(root, StoreConfig(...))
    .put(rmq.message.StoredMessage) -> PutResult(status, physical_offset, queue_offset, size)
    .get(topic, queue_id, offset, max_msgs, tags=None) -> GetResult(status, messages, next_offset, ...)
    .max_offset / .min_offset (topic, queue_id); .search_offset_by_timestamp(...)
    .checkpoint(); .delete_expired(RetentionPolicy); .close()
"""

from broker.store.errors import (
    DamagedRecordError,
    DecodeError,
    DiskFullError,
    StoreCorruptionError,
    StoreError,
)
from broker.store.flush import FlushMode
from broker.store.retention import RetentionPolicy
from broker.store.store import GetResult, MessageStore, PutResult, StoreConfig

__all__ = [
    "DamagedRecordError",
    "DecodeError",
    "DiskFullError",
    "FlushMode",
    "GetResult",
    "MessageStore",
    "PutResult",
    "RetentionPolicy",
    "StoreConfig",
    "StoreCorruptionError",
    "StoreError",
]
