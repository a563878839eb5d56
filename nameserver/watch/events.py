"""Watch events and key ranges: etcd's error texts, range matching, and :class:`HubEvent`
(an event encoded once, shared by every watcher it goes to).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from nameserver.kv import semantics as kvops
from nameserver.kv.records import KeyValue
from protos.etcdserverpb import kv_pb2, rpc_pb2
from raftlog import Effect
from raftlog.entry import length_delimited, varint

log = logging.getLogger(__name__)

#: etcd's error texts (mvcc/watcher.go, etcdserver/api/v3rpc/rpctypes)
ERR_EMPTY_RANGE = "mvcc: watcher range is empty"
ERR_DUPLICATE_ID = "mvcc: duplicate watch ID provided on the WatchStream"
ERR_COMPACTED = "etcdserver: mvcc: required revision has been compacted"
ERR_EMPTY_KEY = "etcdserver: key is not provided"
#: the watch id of a response that belongs to no watcher (a failed create, a progress reply)
NO_WATCH_ID = -1
#: range_end meaning "every key >= key"
FROM_KEY = b"\x00"
#: estimated bytes a WatchResponse adds around its events (header, ids, flags)
RESPONSE_OVERHEAD_BYTES = 64
FLOOR_FILE = "watch_floor"

NOPUT = rpc_pb2.WatchCreateRequest.NOPUT
NODELETE = rpc_pb2.WatchCreateRequest.NODELETE


class Compacted(Exception):
    """The requested revision is below the compaction floor."""

    def __init__(self, floor: int) -> None:
        super().__init__(f"{ERR_COMPACTED} (oldest available revision {floor})")
        self.floor = floor


# --------------------------------------------------------------------------- ranges
def in_range(key: bytes, start: bytes, end: bytes | None) -> bool:
    """etcd range semantics: ``end`` None = the key ``start`` only, ``FROM_KEY`` = every key
    >= ``start``, else ``start <= key < end``."""
    if end is None:
        return key == start
    return key >= start and (end == FROM_KEY or key < end)


def normalize_range(key: bytes, range_end: bytes) -> tuple[bytes, bytes | None]:
    """A create request's range, validated the way etcd 3.4 does; raises ValueError with
    etcd's text for an empty key or a range_end not after key."""
    if not key:
        raise ValueError(ERR_EMPTY_KEY)
    if not range_end:
        return key, None
    if range_end == FROM_KEY:
        return key, FROM_KEY
    if range_end <= key:
        raise ValueError(ERR_EMPTY_RANGE)
    return key, range_end


# --------------------------------------------------------------------------- events
#: WatchResponse field numbers (protos/etcdserverpb/rpc.proto)
F_HEADER, F_WATCH_ID, F_FRAGMENT, F_EVENTS = 1, 2, 7, 11
FRAGMENT_TRUE = varint(F_FRAGMENT << 3) + b"\x01"


@dataclass(slots=True)
class HubEvent:
    """One change to deliver: built once, shared by every watcher it matches. Its encoding
    as a ``WatchResponse.events`` field is cached too, so a response to each of many watchers
    is a concatenation of bytes, not a copy of protobuf messages (see
    :meth:`WatchHub.responses`)."""

    revision: int
    type: kv_pb2.Event.EventType  # PUT / DELETE
    kv: kv_pb2.KeyValue
    prev: KeyValue | None
    _plain: bytes = b""
    _with_prev: bytes = b""

    def field(self, prev_kv: bool) -> bytes:
        """The event as an encoded ``events`` field of a WatchResponse."""
        if prev_kv and self.prev is not None:
            if not self._with_prev:
                event = kv_pb2.Event(type=self.type, kv=self.kv, prev_kv=kvops.to_pb(self.prev))
                self._with_prev = length_delimited(F_EVENTS, event.SerializeToString())
            return self._with_prev
        if not self._plain:
            event = kv_pb2.Event(type=self.type, kv=self.kv)
            self._plain = length_delimited(F_EVENTS, event.SerializeToString())
        return self._plain


def kv_event(revision: int, effect: Effect, prev: KeyValue | None) -> HubEvent:
    """The etcd event of a ``kv`` effect: PUT with the stored key-value, DELETE with only the
    key and ``mod_revision`` = the deleting revision (what etcd sends)."""
    if effect.delete:
        kv = kv_pb2.KeyValue(key=effect.key, mod_revision=revision)
        return HubEvent(revision, kv_pb2.Event.DELETE, kv, prev)
    return HubEvent(
        revision, kv_pb2.Event.PUT, kvops.to_pb(KeyValue.from_record(effect.value)), prev
    )


def record_event(revision: int, effect: Effect) -> HubEvent:
    """The event of an effect of a record type other than ``kv``: the record key and bytes,
    ``mod_revision`` = the offset of the change; a DELETE carries the key only."""
    if effect.delete:
        kv = kv_pb2.KeyValue(key=effect.key, mod_revision=revision)
        return HubEvent(revision, kv_pb2.Event.DELETE, kv, None)
    kv = kv_pb2.KeyValue(key=effect.key, value=effect.value, mod_revision=revision)
    return HubEvent(revision, kv_pb2.Event.PUT, kv, None)


def event_of(revision: int, effect: Effect, prev: KeyValue | None) -> HubEvent:
    if effect.type == "kv":
        return kv_event(revision, effect, prev)
    return record_event(revision, effect)


def kv_after(effect: Effect) -> KeyValue | None:
    return None if effect.delete else KeyValue.from_record(effect.value)
