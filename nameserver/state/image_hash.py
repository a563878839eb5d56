"""Content hashes of an image, for etcd's ``Hash`` and ``HashKV`` (compare nodes' images).

Both are CRC-32 (zlib's polynomial, as the field is etcd's uint32) over the image's
records in a fixed order: for each record its type, key and value, each preceded by its
length as 4 bytes big-endian. The order is the image's own, which is the same on every
node: key order within a record type, record types in the order of
:func:`nameserver.state.machine.image_records`. The value is the record as snapshots store it
(``KvRecord`` for a key: value, create and mod revisions, version and lease), so two nodes
at the same apply offset give the same hash, and any difference in any field shows.

- :func:`kv_hash`: the ``kv`` records only (etcd's HashKV: the key-value store);
- :func:`image_hash`: every record of every type (etcd's Hash: the whole backend).

Neither depends on the node (no member id, no term, no time). Pure functions over an
immutable image: callers run them on a thread.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from nameserver.state.image import MetadataImage
from nameserver.state.machine import image_records


def _frame(parts: Iterable[bytes]) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def records_hash(records: Iterable[tuple[str, bytes, bytes]]) -> int:
    """CRC-32 of ``(type, key, value)`` records, each field length-prefixed, in order."""
    crc = 0
    for type_, key, value in records:
        crc = zlib.crc32(_frame((type_.encode(), key, value)), crc)
    return crc


def kv_hash(image: MetadataImage) -> int:
    """The ``kv`` records' hash, in key order."""
    return records_hash(("kv", key, kv.to_record()) for key, kv in image.kv.data.items())


def image_hash(image: MetadataImage) -> int:
    """Every record's hash, in :func:`nameserver.state.machine.image_records` order."""
    return records_hash(image_records(image))
