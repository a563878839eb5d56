"""Watch (DESIGN.md §5): the etcd v3 ``Watch`` stream, fed by this node's own apply thread.

Data flow::

    apply thread ── ApplyObserver.on_applied(before, last, changes) ──call_soon_threadsafe──▶
    WatchHub._deliver (event loop): match each effect against the watched ranges, build
    mvccpb.Events once, batch them per watcher ──▶ WatchStream.send ──▶ gRPC response stream

* **Index**: watchers are grouped by identical ``(type, key, range_end)``; a single-key group
  is found with one dict lookup, range groups are scanned once per event (not once per
  watcher), so a thousand watchers of one prefix cost one range check per event.
* **Replay**: a watcher whose ``start_revision`` is at or below what the hub has delivered
  reads the change-log segments (:class:`SegmentHistory`) up to exactly that revision in a
  worker thread, while live batches for it are held back; then the replay goes out, then the
  held-back batches, then live ones. Every offset at or below the delivered one is complete in
  the segments (the observer is called after the append), every later one arrives live, and
  ``Watcher.next_rev`` drops anything below the first revision still owed: no gap, no
  duplicate.
* **Compaction floor**: the oldest revision whose changes are all still in the segments
  (segments below the oldest kept snapshot get deleted; a snapshot installed from the leader
  skips the changes it covers, and that floor is kept in ``<data-dir>/watch_floor`` across
  restarts). A start below it gets etcd's compacted response, or with the metaledger extension
  ``snapshot_if_compacted`` the current state of the range and then live changes.
* **Any record type** (metaledger extension ``WatchCreateRequest.record_type``, "" = kv): the
  hub indexes watchers per record type. ``kv`` effects are etcd events; an effect of any other
  type is an event whose ``kv.key`` is the record key, ``kv.value`` the record (the effect's
  value, a ``records.proto`` message) and ``kv.mod_revision`` the offset of the change
  (:func:`record_event`); replay from the segments and ``snapshot_if_compacted`` honour the
  type. ``prev_kv`` is kv-only (refused at create for other types).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import grpc

from nameserver import kv as kvops
from nameserver.errors import UndecodableRequest
from nameserver.image import RECORD_TYPES, KeyValue, MetadataImage
from nameserver.state import CapturedImage, image_records
from protos.etcdserverpb import kv_pb2, rpc_pb2, rpc_pb2_grpc
from raftlog import Change, Effect, SegmentLog
from raftlog.log import Captured
from snapshots import FileSnapshotStore, open_snapshot

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
def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field_bytes(tag: int, data: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2): tag, length, data."""
    return _varint(tag << 3 | 2) + _varint(len(data)) + data


#: WatchResponse field numbers (protos/etcdserverpb/rpc.proto)
_HEADER, _WATCH_ID, _FRAGMENT, _EVENTS = 1, 2, 7, 11
_FRAGMENT_TRUE = _varint(_FRAGMENT << 3) + b"\x01"


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
                self._with_prev = _field_bytes(_EVENTS, event.SerializeToString())
            return self._with_prev
        if not self._plain:
            event = kv_pb2.Event(type=self.type, kv=self.kv)
            self._plain = _field_bytes(_EVENTS, event.SerializeToString())
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


def _after(effect: Effect) -> KeyValue | None:
    return None if effect.delete else KeyValue.from_record(effect.value)


# --------------------------------------------------------------------------- watchers
class WatchSink(Protocol):
    def send(self, response: rpc_pb2.WatchResponse) -> None:
        """Queue a response for the client (never blocks)."""

    def send_events(self, w: Watcher, events: list[HubEvent], header_revision: int) -> None:
        """Queue events for ``w`` (never blocks). A sink may merge them into events of ``w``
        it has queued but not yet sent (see :class:`WatchStream`)."""


@dataclass(eq=False)
class Watcher:
    id: int
    sink: WatchSink
    key: bytes
    end: bytes | None
    type: str = "kv"
    prev_kv: bool = False
    fragment: bool = False
    progress_notify: bool = False
    snapshot_if_compacted: bool = False
    no_put: bool = False
    no_delete: bool = False
    #: the first revision this watcher is still owed; anything below is dropped
    next_rev: int = 0
    #: events held back while a replay runs (None once live)
    backlog: list[HubEvent] | None = None
    #: events sent since the last progress tick (etcd notifies only idle watchers)
    active: bool = False
    canceled: bool = False
    replay: asyncio.Task[None] | None = field(default=None, repr=False)

    def wants(self, event: HubEvent) -> bool:
        if event.revision < self.next_rev:
            return False
        if event.type == kv_pb2.Event.PUT:
            return not self.no_put
        return not self.no_delete


class _Group:
    """Watchers of one identical range."""

    __slots__ = ("end", "key", "watchers")

    def __init__(self, key: bytes, end: bytes | None) -> None:
        self.key = key
        self.end = end
        self.watchers: list[Watcher] = []


class _TypeIndex:
    """The watched ranges of one record type."""

    def __init__(self) -> None:
        self.exact: dict[bytes, _Group] = {}
        self.ranges: dict[tuple[bytes, bytes], _Group] = {}

    def add(self, w: Watcher) -> None:
        if w.end is None:
            group = self.exact.get(w.key)
            if group is None:
                group = self.exact[w.key] = _Group(w.key, None)
        else:
            group = self.ranges.get((w.key, w.end))
            if group is None:
                group = self.ranges[(w.key, w.end)] = _Group(w.key, w.end)
        group.watchers.append(w)

    def remove(self, w: Watcher) -> None:
        if w.end is None:
            group = self.exact.get(w.key)
            if group is not None and w in group.watchers:
                group.watchers.remove(w)
                if not group.watchers:
                    del self.exact[w.key]
            return
        group = self.ranges.get((w.key, w.end))
        if group is not None and w in group.watchers:
            group.watchers.remove(w)
            if not group.watchers:
                del self.ranges[(w.key, w.end)]

    def match(self, key: bytes) -> Iterator[_Group]:
        group = self.exact.get(key)
        if group is not None:
            yield group
        for g in self.ranges.values():
            if in_range(key, g.key, g.end):
                yield g

    def __len__(self) -> int:
        return len(self.exact) + len(self.ranges)


# --------------------------------------------------------------------------- history
class History(Protocol):
    """Past changes, for replay (the change-log segments on a server)."""

    def floor(self, delivered: int) -> int:
        """The oldest revision whose changes are all available (``delivered + 1`` if none)."""

    def changes(self, start: int, upto: int) -> Iterator[tuple[int, Effect]]:
        """``(offset, effect)`` for ``start <= offset <= upto`` in order. Raises
        :class:`Compacted` when ``start`` is (or became) below the floor. Blocking."""

    def base(
        self, before: int, type_: str, key: bytes, end: bytes | None
    ) -> tuple[int, dict[bytes, KeyValue]]:
        """``(X, state)``: the range's records at the newest kept snapshot ``X < before``,
        or ``(0, {})`` when there is none. Blocking."""


class SegmentHistory:
    """Replay from this node's change-log segments and snapshot store."""

    def __init__(self, segments: SegmentLog, store: FileSnapshotStore, floor_path: str) -> None:
        self.segments = segments
        self.store = store
        self.floor_path = floor_path
        self.installed_floor = read_floor(floor_path)

    def floor(self, delivered: int) -> int:
        if not self.store.list() and not self.installed_floor:
            return 1  # never snapshotted: no segment was ever deleted, history is complete
        first = self.segments.first_offset or delivered + 1
        return max(first, self.installed_floor)

    def changes(self, start: int, upto: int) -> Iterator[tuple[int, Effect]]:
        try:
            records = self.segments.read_from(start)
        except ValueError as exc:  # closed: the node is stopping
            raise Compacted(self.floor(upto)) from exc
        # read_from fixed its view of the segments: if the floor is still at or below start
        # now, it was when the view was taken (the floor only rises)
        floor = self.floor(upto)
        if start < floor:
            raise Compacted(floor)
        try:
            for record in records:
                if record.offset > upto:
                    return
                yield record.offset, Effect.decode(record.payload)
        except FileNotFoundError as exc:  # retention deleted a segment under us
            raise Compacted(self.floor(upto)) from exc

    def base(
        self, before: int, type_: str, key: bytes, end: bytes | None
    ) -> tuple[int, dict[bytes, KeyValue]]:
        below = [i for i in self.store.list() if i.last_offset < before and i.path is not None]
        if not below:
            return 0, {}
        info = max(below, key=lambda i: i.last_offset)
        state: dict[bytes, KeyValue] = {}
        try:
            with open_snapshot(str(info.path)) as reader:
                for t, k, v in reader.iter_records(False):
                    if t == type_ and in_range(k, key, end):
                        state[k] = KeyValue.from_record(v)
        except OSError:  # deleted meanwhile (keep): fall back to the segments alone
            return 0, {}
        return info.last_offset, state


def read_floor(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def write_floor(path: str, floor: int) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{floor}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# --------------------------------------------------------------------------- hub
class WatchHub:
    """Every watcher of this node, fed by the apply thread (an :class:`ApplyObserver`).

    Everything but ``on_applied``/``on_installed`` runs on the event loop."""

    def __init__(
        self,
        history: History,
        image: Callable[[], MetadataImage],
        delivered: int,
        header: Callable[[int], rpc_pb2.ResponseHeader],
        max_response_bytes: int,
        floor_path: str | None = None,
    ) -> None:
        self.history = history
        self._image = image
        self._delivered = delivered  # last offset whose changes went to the watchers
        #: the last offset of a group the apply thread did not hand over (nobody watched)
        self._unwatched = 0
        self.header = header
        self.max_response_bytes = max_response_bytes
        self._floor_path = floor_path
        self._loop: asyncio.AbstractEventLoop | None = None
        self._index: dict[str, _TypeIndex] = {}
        self.watchers = 0

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def delivered(self) -> int:
        """The last offset whose changes went to the watchers (or that nobody watched)."""
        return max(self._delivered, self._unwatched)

    @delivered.setter
    def delivered(self, offset: int) -> None:
        self._delivered = offset

    # ------------------------------------------------------------ apply thread
    def on_applied(self, before: Captured, last_offset: int, changes: list[Change]) -> None:
        loop = self._loop
        if loop is None:
            return
        if not self.watchers:
            # Nobody watches: do not wake the event loop for every apply group (a write to
            # its self-pipe, then a callback; most of the observer's cost). The order keeps
            # watchers gap-free: ``start`` counts its watcher before it reads ``delivered``,
            # and this publishes the offset before it looks again, so either the new
            # watcher starts after this group (which is in the segments already), or this
            # sees the watcher and hands the group over as usual.
            self._unwatched = last_offset
            if not self.watchers:
                return
        with contextlib.suppress(RuntimeError):  # the loop closed: the node is stopping
            loop.call_soon_threadsafe(self._deliver, before, last_offset, changes)

    def on_installed(self, offset: int) -> None:
        if self._floor_path is not None:
            try:
                write_floor(self._floor_path, offset + 1)
            except OSError:
                log.exception("cannot record the watch floor %d", offset + 1)
        if isinstance(self.history, SegmentHistory):
            self.history.installed_floor = max(self.history.installed_floor, offset + 1)
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._installed, offset)

    # ------------------------------------------------------------ event loop
    def _deliver(self, before: Captured, last_offset: int, changes: list[Change]) -> None:
        self.delivered = max(self.delivered, last_offset)
        if not self.watchers or not changes:
            return
        base = cast(CapturedImage, before).image.kv
        latest: dict[bytes, KeyValue | None] = {}
        out: dict[Watcher, list[HubEvent]] = {}
        kv_index = self._index.get("kv")
        for change in changes:
            for effect in change.effects:
                if effect.type != "kv":
                    self._match_record(change.offset, effect, out)
                    continue
                key = effect.key
                groups = list(kv_index.match(key)) if kv_index is not None else []
                if groups:
                    prev = latest[key] if key in latest else base.get(key)
                    event = kv_event(change.offset, effect, prev)
                    for g in groups:
                        for w in g.watchers:
                            if w.wants(event):
                                out.setdefault(w, []).append(event)
                latest[key] = _after(effect)
        for w, events in out.items():
            if w.backlog is not None:
                w.backlog.extend(events)
            else:
                self._send_events(w, events, last_offset)

    def _match_record(
        self, offset: int, effect: Effect, out: dict[Watcher, list[HubEvent]]
    ) -> None:
        """Queue the event of a non-kv effect for the watchers of its type and key."""
        index = self._index.get(effect.type)
        if index is None:
            return
        groups = list(index.match(effect.key))
        if not groups:
            return
        event = record_event(offset, effect)
        for g in groups:
            for w in g.watchers:
                if w.wants(event):
                    out.setdefault(w, []).append(event)

    def _installed(self, offset: int) -> None:
        """A leader's snapshot skipped the changes up to ``offset``: every watcher still owed
        one of them is compacted (or re-snapshotted), as etcd does after a restore."""
        self.delivered = max(self.delivered, offset)
        for index in list(self._index.values()):
            for group in [*index.exact.values(), *index.ranges.values()]:
                for w in list(group.watchers):
                    if w.next_rev <= offset:
                        if w.replay is not None:
                            w.replay.cancel()
                            w.replay = None
                        self._compacted(w, offset + 1)

    def start(self, w: Watcher, start_revision: int) -> None:
        """Register ``w`` (its created response already sent) from ``start_revision``."""
        self.watchers += 1  # first: see on_applied
        delivered = self.delivered
        w.next_rev = start_revision or delivered + 1
        self._index.setdefault(w.type, _TypeIndex()).add(w)
        if w.next_rev > delivered:
            return  # from now (or a future revision: etcd waits for it)
        floor = self.history.floor(delivered)
        if w.next_rev < floor:
            self._compacted(w, floor)
            return
        w.backlog = []
        loop = asyncio.get_running_loop()
        w.replay = loop.create_task(self._replay(w, w.next_rev, delivered))

    def remove(self, w: Watcher) -> None:
        if w.canceled:
            return
        w.canceled = True
        if w.replay is not None:
            w.replay.cancel()
            w.replay = None
        index = self._index.get(w.type)
        if index is not None:
            index.remove(w)
        self.watchers -= 1

    def progress(self, w: Watcher) -> None:
        """An empty response with the delivered revision (a live watcher has seen all of it)."""
        if w.backlog is None and not w.canceled:
            w.sink.send(rpc_pb2.WatchResponse(header=self.header(self.delivered), watch_id=w.id))

    async def _replay(self, w: Watcher, start: int, upto: int) -> None:
        try:
            events = await asyncio.to_thread(self._read_history, w, start, upto)
        except Compacted as exc:
            if not w.canceled:
                w.replay = None
                self._compacted(w, exc.floor)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("watch %d: replay from %d failed", w.id, start)
            if not w.canceled:
                w.sink.send(
                    rpc_pb2.WatchResponse(
                        header=self.header(self.delivered),
                        watch_id=w.id,
                        canceled=True,
                        cancel_reason=f"metaledger: replay from revision {start} failed: {exc}",
                    )
                )
                self.remove(w)
            return
        if w.canceled:
            return
        w.replay = None
        w.next_rev = upto + 1
        backlog, w.backlog = w.backlog or [], None
        self._send_events(w, events, upto)
        if backlog:
            self._send_events(w, backlog, self.delivered)

    def _read_history(self, w: Watcher, start: int, upto: int) -> list[HubEvent]:
        """Worker thread: the watcher's events in ``[start, upto]`` from the segments, with
        prev_kv from the records before them (and the newest snapshot below ``start``)."""
        state: dict[bytes, KeyValue | None] = {}
        scan_from = start
        if w.prev_kv:
            x, base = self.history.base(start, w.type, w.key, w.end)
            state.update(base)
            scan_from = max(x + 1, self.history.floor(upto)) if x else self.history.floor(upto)
            scan_from = min(scan_from, start)
        out: list[HubEvent] = []
        for offset, effect in self.history.changes(scan_from, upto):
            if effect.type != w.type or not in_range(effect.key, w.key, w.end):
                continue
            if offset >= start:
                event = event_of(offset, effect, state.get(effect.key))
                if w.wants(event):
                    out.append(event)
            if w.prev_kv:
                state[effect.key] = _after(effect)
        return out

    def _compacted(self, w: Watcher, floor: int) -> None:
        if w.snapshot_if_compacted:
            self._send_snapshot(w)
            return
        w.sink.send(
            rpc_pb2.WatchResponse(
                header=self.header(self.delivered),
                watch_id=w.id,
                canceled=True,
                compact_revision=floor,
                cancel_reason=ERR_COMPACTED,
            )
        )
        self.remove(w)

    def _send_snapshot(self, w: Watcher) -> None:
        """metaledger's extension: the range's current state, then live changes after it."""
        image = self._image()
        revision = image.revision
        if w.type == "kv":
            events = [
                kv_pb2.Event(type=kv_pb2.Event.PUT, kv=kvops.to_pb(kv))
                for kv in kvops.select(image.kv, w.key, w.end if w.end is not None else b"")
            ]
        else:
            events = [
                kv_pb2.Event(
                    type=kv_pb2.Event.PUT,
                    kv=kv_pb2.KeyValue(key=k, value=v, mod_revision=revision),
                )
                for t, k, v in image_records(image)
                if t == w.type and in_range(k, w.key, w.end)
            ]
        header = self.header(revision)
        chunks = list(_chunks(events, self.max_response_bytes))
        for i, chunk in enumerate(chunks):
            w.sink.send(
                rpc_pb2.WatchResponse(
                    header=header,
                    watch_id=w.id,
                    events=chunk,
                    snapshot_revision=revision,
                    fragment=i < len(chunks) - 1,
                )
            )
        w.backlog = None
        w.next_rev = revision + 1
        w.active = True

    def _send_events(self, w: Watcher, events: list[HubEvent], header_revision: int) -> None:
        if events:
            w.active = True
            w.sink.send_events(w, events, header_revision)

    def responses(
        self, w: Watcher, events: list[HubEvent], header_revision: int
    ) -> Iterator[bytes]:
        """The encoded WatchResponses carrying ``events`` to ``w``: one, split when it would
        exceed ``max_response_bytes``: at revision boundaries, or anywhere with ``fragment``
        flags when the watcher allows it (etcd's fragmentation, reassembled by its clients).

        Built from bytes (the stream's serializer passes bytes through): header and watch id,
        then each event's cached field, which is what the protobuf encoder would write."""
        head = _field_bytes(_HEADER, self.header(header_revision).SerializeToString())
        if w.id:
            head += _varint(_WATCH_ID << 3) + _varint(w.id)
        limit = self.max_response_bytes
        batch: list[bytes] = [head]
        size = len(head)
        last_rev = 0
        for ev in events:
            data = ev.field(w.prev_kv)
            if len(batch) > 1 and size + len(data) > limit:
                if w.fragment and ev.revision == last_rev:
                    batch.append(_FRAGMENT_TRUE)
                    yield b"".join(batch)
                    batch, size = [head], len(head)
                elif ev.revision != last_rev:
                    yield b"".join(batch)
                    batch, size = [head], len(head)
            batch.append(data)
            size += len(data)
            last_rev = ev.revision
        yield b"".join(batch)


def _chunks(events: list[kv_pb2.Event], limit: int) -> Iterator[list[kv_pb2.Event]]:
    """Split events into lists of at most ``limit`` bytes (one always, possibly empty)."""
    batch: list[kv_pb2.Event] = []
    size = RESPONSE_OVERHEAD_BYTES
    for ev in events:
        n = ev.ByteSize() + 8
        if batch and size + n > limit:
            yield batch
            batch, size = [], RESPONSE_OVERHEAD_BYTES
        batch.append(ev)
        size += n
    yield batch


# --------------------------------------------------------------------------- stream
#: At most this many events are merged into one queued, unsent batch of a watcher.
MAX_MERGED_EVENTS = 1000


@dataclass(eq=False, slots=True)
class PendingEvents:
    """Events of one watcher queued on a stream, turned into responses only when the stream
    writes them: until then, later events of the same watcher join them (see
    :meth:`WatchStream.send_events`)."""

    watcher: Watcher
    events: list[HubEvent]
    header_revision: int


class WatchStream:
    """One client's Watch stream: its watch ids, its outgoing queue, its progress ticks.

    **Merging under load.** A watcher's events wait in the queue as one :class:`PendingEvents`
    until the stream writes them; events that arrive meanwhile join it instead of queueing
    another response. An idle stream still sends every apply group at once; a stream that
    cannot keep up (many watchers, a slow client) sends fewer, larger responses, as etcd
    does for watchers that fell behind, instead of one gRPC message per watcher per write."""

    def __init__(self, hub: WatchHub, progress_interval_s: float) -> None:
        self.hub = hub
        self.progress_interval_s = progress_interval_s
        self.out: asyncio.Queue[rpc_pb2.WatchResponse | PendingEvents | None] = asyncio.Queue()
        self.watchers: dict[int, Watcher] = {}
        self._open: dict[int, PendingEvents] = {}  # watch id -> its queued, unsent events
        self._next_id = 0
        self._progress_wanted = False

    def send(self, response: rpc_pb2.WatchResponse) -> None:
        self._open.pop(response.watch_id, None)  # later events must follow this response
        self.out.put_nowait(response)
        if response.canceled:
            self.watchers.pop(response.watch_id, None)

    def send_events(self, w: Watcher, events: list[HubEvent], header_revision: int) -> None:
        pending = self._open.get(w.id)
        if pending is not None and len(pending.events) < MAX_MERGED_EVENTS:
            pending.events.extend(events)
            pending.header_revision = header_revision
            return
        pending = self._open[w.id] = PendingEvents(w, list(events), header_revision)
        self.out.put_nowait(pending)

    def expand(
        self, item: rpc_pb2.WatchResponse | PendingEvents
    ) -> Iterator[rpc_pb2.WatchResponse | bytes]:
        """The responses of a queue item (called when the stream writes it)."""
        if isinstance(item, PendingEvents):
            if self._open.get(item.watcher.id) is item:
                del self._open[item.watcher.id]
            yield from self.hub.responses(item.watcher, item.events, item.header_revision)
        else:
            yield item

    def handle(self, request: rpc_pb2.WatchRequest) -> None:
        which = request.WhichOneof("request_union")
        if which == "create_request":
            self._create(request.create_request)
        elif which == "cancel_request":
            w = self.watchers.pop(request.cancel_request.watch_id, None)
            if w is not None:  # etcd ignores the cancel of an unknown id
                self.hub.remove(w)
                self.out.put_nowait(
                    rpc_pb2.WatchResponse(
                        header=self.hub.header(self.hub.delivered), watch_id=w.id, canceled=True
                    )
                )
        elif which == "progress_request":
            self._progress_wanted = True
            self._answer_progress()

    def _answer_progress(self) -> None:
        """etcd 3.4: one response with watch id -1 and the current revision. Held back while a
        watcher of this stream is replaying, so the revision never runs ahead of its events."""
        if not self._progress_wanted:
            return
        if any(w.backlog is not None for w in self.watchers.values()):
            asyncio.get_running_loop().call_later(0.05, self._answer_progress)
            return
        self._progress_wanted = False
        self.out.put_nowait(
            rpc_pb2.WatchResponse(header=self.hub.header(self.hub.delivered), watch_id=NO_WATCH_ID)
        )

    def _create(self, req: rpc_pb2.WatchCreateRequest) -> None:
        hub = self.hub
        error = ""
        try:
            key, end = normalize_range(req.key, req.range_end)
        except ValueError as exc:
            error = str(exc)
        record_type = req.record_type or "kv"
        if not error and record_type not in RECORD_TYPES:
            error = (
                f"metaledger: unknown record_type {req.record_type!r} "
                f"(one of: {', '.join(RECORD_TYPES)})"
            )
        if not error and record_type != "kv" and req.prev_kv:
            error = f"metaledger: prev_kv is only supported for record_type kv, not {record_type}"
        if not error and req.start_revision < 0:
            error = f"metaledger: start_revision must be >= 0 (got {req.start_revision})"
        if not error and not set(req.filters) <= {NOPUT, NODELETE}:
            bad = sorted(set(req.filters) - {NOPUT, NODELETE})
            error = f"metaledger: filters: {bad} not among NOPUT ({NOPUT}), NODELETE ({NODELETE})"
        watch_id = req.watch_id
        if not error:
            if watch_id == 0:
                while self._next_id in self.watchers:
                    self._next_id += 1
                watch_id = self._next_id
                self._next_id += 1
            elif watch_id in self.watchers:
                error = ERR_DUPLICATE_ID
            elif watch_id < 0:
                error = f"metaledger: watch_id must be >= 0 (got {watch_id})"
        header = hub.header(hub.delivered)
        if error:
            self.out.put_nowait(
                rpc_pb2.WatchResponse(
                    header=header,
                    watch_id=NO_WATCH_ID,
                    created=True,
                    canceled=True,
                    cancel_reason=error,
                )
            )
            return
        filters = set(req.filters)
        w = Watcher(
            id=watch_id,
            sink=self,
            key=key,
            end=end,
            type=record_type,
            prev_kv=req.prev_kv,
            fragment=req.fragment,
            progress_notify=req.progress_notify,
            snapshot_if_compacted=req.snapshot_if_compacted,
            no_put=NOPUT in filters,
            no_delete=NODELETE in filters,
        )
        self.watchers[watch_id] = w
        self.out.put_nowait(rpc_pb2.WatchResponse(header=header, watch_id=watch_id, created=True))
        hub.start(w, req.start_revision)

    async def tick(self) -> None:
        """etcd's progress_notify: every interval, an empty response to each watcher that
        asked for it and got no events since the previous tick."""
        while True:
            await asyncio.sleep(self.progress_interval_s)
            self.notify_progress()

    def notify_progress(self) -> None:
        """One progress tick: idle watchers that asked get an empty response."""
        for w in list(self.watchers.values()):
            if w.progress_notify and not w.active:
                self.hub.progress(w)
            w.active = False

    def close(self) -> None:
        for w in self.watchers.values():
            self.hub.remove(w)
        self.watchers.clear()


def _serialize(response: rpc_pb2.WatchResponse | bytes) -> bytes:
    if isinstance(response, bytes):
        return response  # already encoded (event responses, WatchHub.responses)
    data: bytes = response.SerializeToString()
    return data


def add_watch_service(service: WatchService, server: Any) -> None:
    """Register ``service`` as ``etcdserverpb.Watch`` with a serializer that passes
    pre-encoded responses through (the generated ``add_WatchServicer_to_server`` would not)."""
    handler = grpc.stream_stream_rpc_method_handler(
        service.Watch,
        request_deserializer=rpc_pb2.WatchRequest.FromString,
        response_serializer=_serialize,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("etcdserverpb.Watch", {"Watch": handler}),)
    )


class WatchService(rpc_pb2_grpc.WatchServicer):  # type: ignore[misc]
    def __init__(self, hub: WatchHub, progress_interval_s: float) -> None:
        self.hub = hub
        self.progress_interval_s = progress_interval_s

    async def Watch(
        self, request_iterator: AsyncIterator[rpc_pb2.WatchRequest], context: Any
    ) -> AsyncIterator[rpc_pb2.WatchResponse | bytes]:
        stream = WatchStream(self.hub, self.progress_interval_s)
        loop = asyncio.get_running_loop()

        async def read() -> None:
            try:
                async for request in request_iterator:
                    stream.handle(request)
            except UndecodableRequest as exc:  # the client's mistake: answered by the guard
                log.debug("watch stream ended: %s", exc)
                stream.out.put_nowait(None)
            except Exception:  # the client went away mid-message, or a bug: end the stream
                log.warning("watch stream ended on an error", exc_info=True)
                stream.out.put_nowait(None)
            # a half-closed stream stays open (etcd does the same): events keep coming

        reader = loop.create_task(read())
        ticker = loop.create_task(stream.tick())
        try:
            while True:
                item = await stream.out.get()
                if item is None:
                    return
                for response in stream.expand(item):
                    yield response
        finally:
            reader.cancel()
            ticker.cancel()
            stream.close()
