"""Message lookup by key and by message id (issue 30): the per-replica index and its fronts.

- :mod:`broker.index.file`, :mod:`broker.index.service`: RocketMQ's index files (hash slots
  and chained entries, ``topic#KEY`` and ``topic#UNIQ_KEY`` → commit-log offset), fed by the
  store (:class:`broker.store.MessageStore` owns one), rebuilt on recovery, trimmed with
  retention.
- :mod:`broker.index.processor`: remoting QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33).
- :mod:`broker.index.cli`: ``metaledger message get --id ID | --key KEY --topic T``.

The gRPC admin service's QueryMessage is :mod:`broker.grpc.admin`. This module exports only
the index itself, which the store imports (the processor imports the store).
"""

from broker.index.service import (
    DEFAULT_QUERY_MAX_NUM,
    MAX_MSGS_NUM_BATCH,
    IndexConfig,
    IndexHits,
    IndexService,
    Record,
    index_keys,
    index_record,
)

__all__ = [
    "DEFAULT_QUERY_MAX_NUM",
    "MAX_MSGS_NUM_BATCH",
    "IndexConfig",
    "IndexHits",
    "IndexService",
    "Record",
    "index_keys",
    "index_record",
]
