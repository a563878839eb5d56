"""etcd's HashKV at a revision: a CRC-32 of the kv store as it was at that revision plus the
compaction revision in force there, the same on every member at the same revision.

The kv records are hashed as :func:`nameserver.state.image_hash.kv_hash` hashes them (type,
key and ``KvRecord``, each length-prefixed, in key order), then one ``mvcc`` record holding
the compaction revision (:class:`~nameserver.kv.mvcc.Compaction`): two members that hold
the same keys at a revision but disagree on what was compacted differ too.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from nameserver.kv.records import COMPACT_KEY, Compaction, KeyValue
from nameserver.state.image_hash import records_hash


def kv_hash_at(items: Iterable[tuple[bytes, KeyValue]], compact_revision: int) -> int:
    """The hash of ``(key, KeyValue)`` items in key order and the compaction revision."""
    kvs = (("kv", key, kv.to_record()) for key, kv in items)
    mvcc = ("mvcc", COMPACT_KEY, Compaction(compact_revision).to_record())
    return records_hash(itertools.chain(kvs, (mvcc,)))
