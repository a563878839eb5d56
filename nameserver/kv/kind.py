"""The ``kv`` record kinds, registered in :mod:`nameserver.kinds`: ``kv`` (etcd key-value
pairs), ``mvcc`` (the kv store's compaction revision) and ``revision`` (its revision
counter)."""

from __future__ import annotations

from nameserver.kv.apply import apply_kv_entry, apply_txn_entry
from nameserver.kv.mvcc import apply_compact_entry
from nameserver.kv.records import (
    COMPACT_KEY,
    REVISION_KEY,
    Compaction,
    KeyValue,
    KvDelta,
    KvImage,
    MvccDelta,
    MvccImage,
    RevisionDelta,
    RevisionImage,
    StoreRevision,
)
from nameserver.kv.revision import (
    COUNT_REVISIONS,
    REVISION,
    after_request,
    apply_count_entry,
    image_revision,
    kv_replayed,
)
from nameserver.state.consistency import AS_REQUESTED
from nameserver.state.registry import RecordKind


def _from_items(items: list[tuple[bytes, KeyValue]]) -> KvImage:
    items.sort(key=lambda item: item[0])
    return KvImage.from_sorted_items(items)


KV = RecordKind(
    name="kv",
    field="kv",
    empty=KvImage(),
    delta=KvDelta,
    decode=KeyValue.from_record,
    consistency=AS_REQUESTED,  # etcd's ``serializable`` flag picks a local read
    items=lambda image: image.data.items(),
    lookup=lambda image, key: image.get(key),
    from_items=_from_items,
    from_columns=KvImage.from_records,
    usage=lambda delta: (delta.key_count, delta.byte_count),
    rules={"kv": apply_kv_entry, "txn": apply_txn_entry},
    replayed=kv_replayed,
)


MVCC = RecordKind(
    name="mvcc",
    field="mvcc",
    empty=MvccImage(),
    delta=MvccDelta,
    decode=Compaction.from_record,
    consistency=AS_REQUESTED,  # read with the kv store it belongs to
    items=lambda image: [(COMPACT_KEY, image.compaction)] if image.compaction else [],
    lookup=lambda image, key: image.get(key),
    rules={"compact": apply_compact_entry},
)
"""The kv store's compaction revision (etcd's Compact): :mod:`nameserver.kv.mvcc`."""


REVISION_KIND = RecordKind(
    name=REVISION,
    field="store_rev",
    empty=RevisionImage(),
    delta=RevisionDelta,
    decode=StoreRevision.from_record,
    consistency=AS_REQUESTED,  # read with the kv store it belongs to
    items=lambda image: [(REVISION_KEY, image.counter)] if image.counter else [],
    lookup=lambda image, key: image.get(key),
    rules={COUNT_REVISIONS: apply_count_entry},
    revision=image_revision,
    after_request=after_request,
)
"""The kv store's revision counter (etcd's count): :mod:`nameserver.kv.revision`."""
