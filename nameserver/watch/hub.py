"""Watch (docs/semantics.md, "Watch"): the etcd v3 ``Watch`` stream, fed by this node's own apply
thread.

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
* **Compaction floor**: the compaction revision (etcd's Compact, :mod:`nameserver.kv.mvcc`),
  or, when higher, the oldest revision whose changes are all still in the segments
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

Over 500 lines: the registry of watchers, their live delivery and their replay share one
lock and one notion of where each watcher is.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, cast

from nameserver.kv import semantics as kvops
from nameserver.kv.records import KeyValue
from nameserver.kv.revision import REVISION, revision_of
from nameserver.state.image import MetadataImage
from nameserver.state.machine import CapturedImage, image_records
from nameserver.watch.events import (
    ERR_COMPACTED,
    F_HEADER,
    F_WATCH_ID,
    FRAGMENT_TRUE,
    RESPONSE_OVERHEAD_BYTES,
    Compacted,
    HubEvent,
    event_of,
    in_range,
    kv_after,
    kv_event,
    record_event,
)
from nameserver.watch.history import History, SegmentHistory, write_floor
from protos.etcdserverpb import kv_pb2, rpc_pb2
from raftlog import Change, Effect
from raftlog.entry import length_delimited, varint
from raftlog.log import Captured

log = logging.getLogger(__name__)

#: how many recent (offset, revision) marks the hub keeps at least (replays from older
#: revisions read the segments from their floor)
MARKS_KEPT = 1 << 16


def _mark_revision(mark: tuple[int, int]) -> int:
    return mark[1]


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
        #: the store revisions there (kv watchers count in revisions, the rest in offsets;
        #: the same while the store counts by offset)
        self._delivered_rev = -1  # read from the image when first asked (see below)
        self._unwatched_rev = 0
        #: ``(offset, store revision)`` after recent groups that moved the revision, once
        #: the store counts etcd's way: where a replay from a revision starts reading
        self._marks: list[tuple[int, int]] = []
        self.header = header
        self.max_response_bytes = max_response_bytes
        self._floor_path = floor_path
        self._loop: asyncio.AbstractEventLoop | None = None
        self._index: dict[str, _TypeIndex] = {}
        self.watchers = 0

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def record_types(self) -> tuple[str, ...]:
        """The record types a watcher may watch: those of the images' registry."""
        return self._image().registry.record_types

    @property
    def delivered(self) -> int:
        """The last offset whose changes went to the watchers (or that nobody watched)."""
        return max(self._delivered, self._unwatched)

    @delivered.setter
    def delivered(self, offset: int) -> None:
        self._delivered = offset

    @property
    def delivered_revision(self) -> int:
        """The store revision after the last offset delivered (what kv headers say)."""
        if self._delivered_rev < 0:  # nothing delivered since the start: the image's
            self._delivered_rev = self._revision_at(self._delivered)
        return max(self._delivered_rev, self._unwatched_rev)

    def _revision_at(self, last_offset: int) -> int:
        """The store revision of the current image, which is at ``last_offset`` (the
        offset itself while the store counts by offset)."""
        counter = self._image().store_rev.revision
        return last_offset if counter < 0 else int(counter)

    def _mark(self, last_offset: int, revision: int) -> None:
        marks = self._marks
        if revision != last_offset and (not marks or marks[-1][1] != revision):
            marks.append((last_offset, revision))
            if len(marks) > 2 * MARKS_KEPT:
                del marks[:MARKS_KEPT]

    def _scan_from(self, start: int) -> int:
        """An offset at or before the first change at revision ``start`` or later (a
        revision is never above its offset; the marks narrow it down)."""
        marks = self._marks
        i = bisect.bisect_left(marks, start, key=_mark_revision)
        return max(start, marks[i - 1][0] + 1) if i > 0 else start

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
            self._unwatched_rev = revision = self._revision_at(last_offset)
            self._mark(last_offset, revision)
            if not self.watchers:
                return
        revision = self._revision_at(last_offset)
        self._mark(last_offset, revision)
        with contextlib.suppress(RuntimeError):  # the loop closed: the node is stopping
            loop.call_soon_threadsafe(self._deliver, before, last_offset, changes, revision)

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
        revision = self._revision_at(offset)
        self._marks = []
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._installed, offset, revision)

    # ------------------------------------------------------------ event loop
    def _deliver(
        self, before: Captured, last_offset: int, changes: list[Change], revision: int = -1
    ) -> None:
        """``revision``: the store revision after ``last_offset`` (-1: that offset)."""
        if revision < 0:
            revision = last_offset
        self.delivered = max(self.delivered, last_offset)
        self._delivered_rev = max(self._delivered_rev, revision)
        if not self.watchers or not changes:
            return
        base = cast(CapturedImage, before).image.kv
        latest: dict[bytes, KeyValue | None] = {}
        out: dict[Watcher, list[HubEvent]] = {}
        kv_index = self._index.get("kv")
        for change in changes:
            rev = -1  # the change's store revision, read when a watcher wants it
            for effect in change.effects:
                if effect.type != "kv":
                    self._match_record(change.offset, effect, out)
                    continue
                key = effect.key
                groups = list(kv_index.match(key)) if kv_index is not None else []
                if groups:
                    prev = latest[key] if key in latest else base.get(key)
                    if rev < 0:
                        rev = revision_of(change.offset, change.effects)
                    event = kv_event(rev, effect, prev)
                    for g in groups:
                        for w in g.watchers:
                            if w.wants(event):
                                out.setdefault(w, []).append(event)
                latest[key] = kv_after(effect)
        for w, events in out.items():
            if w.backlog is not None:
                w.backlog.extend(events)
            else:
                self._send_events(w, events, revision if w.type == "kv" else last_offset)

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

    def _installed(self, offset: int, revision: int = -1) -> None:
        """A leader's snapshot skipped the changes up to ``offset`` (store revision
        ``revision``; -1: the offset): every watcher still owed one of them is compacted (or
        re-snapshotted), as etcd does after a restore."""
        if revision < 0:
            revision = offset
        self.delivered = max(self.delivered, offset)
        self._delivered_rev = max(self._delivered_rev, revision)
        for index in list(self._index.values()):
            for group in [*index.exact.values(), *index.ranges.values()]:
                for w in list(group.watchers):
                    upto = revision if w.type == "kv" else offset
                    if w.next_rev <= upto:
                        if w.replay is not None:
                            w.replay.cancel()
                            w.replay = None
                        self._compacted(w, upto + 1)

    def start(self, w: Watcher, start_revision: int) -> None:
        """Register ``w`` (its created response already sent) from ``start_revision``."""
        self.watchers += 1  # first: see on_applied
        delivered_offset = self.delivered
        delivered = self.delivered_revision if w.type == "kv" else delivered_offset
        w.next_rev = start_revision or delivered + 1
        self._index.setdefault(w.type, _TypeIndex()).add(w)
        if w.next_rev > delivered:
            return  # from now (or a future revision: etcd waits for it)
        # etcd cancels a watch from below the compaction revision (compact_revision set);
        # the segments' floor is an offset: a revision floor where revisions are offsets,
        # else found by the replay (it reads the segments)
        image = self._image()
        floor = image.mvcc.compact_revision
        if w.type != "kv" or image.store_rev.revision < 0:
            floor = max(floor, self.history.floor(delivered_offset))
        if w.next_rev < floor:
            self._compacted(w, floor)
            return
        w.backlog = []
        loop = asyncio.get_running_loop()
        w.replay = loop.create_task(self._replay(w, w.next_rev, delivered, delivered_offset))

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
            header = self.header(self.delivered_revision if w.type == "kv" else self.delivered)
            w.sink.send(rpc_pb2.WatchResponse(header=header, watch_id=w.id))

    async def _replay(self, w: Watcher, start: int, upto: int, upto_offset: int) -> None:
        """Replay ``w``'s events from ``start`` up to ``upto`` (revisions for a kv watcher,
        offsets for the rest), which the changes up to ``upto_offset`` hold."""
        try:
            events = await asyncio.to_thread(self._read_history, w, start, upto, upto_offset)
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
                        header=self.header(self.delivered_revision),
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
            kv = w.type == "kv"
            self._send_events(w, backlog, self.delivered_revision if kv else self.delivered)

    def _read_history(self, w: Watcher, start: int, upto: int, upto_offset: int) -> list[HubEvent]:
        """Worker thread: the watcher's events in ``[start, upto]`` from the segments up to
        ``upto_offset``, with prev_kv from the records before them (and the newest snapshot
        below where the scan starts). A kv watcher counts in store revisions: a change's is
        its counter record's (first of its effects) or, with none, its offset."""
        counting = w.type == "kv" and self._image().store_rev.revision >= 0
        first = self._scan_from(start) if counting else start
        # counting, a scan that must start below the segments' floor starts there, and the
        # first key change it meets tells whether anything at ``start`` or later was below
        # (the revisions before it all are, the counter moves one a change)
        check = False
        if counting:
            floor = self.history.floor(upto_offset)
            if first < floor:
                first, check = floor, True
        state: dict[bytes, KeyValue | None] = {}
        scan_from = first
        if w.prev_kv:
            x, base = self.history.base(first, w.type, w.key, w.end)
            state.update(base)
            floor = self.history.floor(upto_offset)
            scan_from = min(max(x + 1, floor) if x else floor, first)
        out: list[HubEvent] = []
        rev_offset, rev = 0, 0  # the last counter record read, and its offset
        for offset, effect in self.history.changes(scan_from, upto_offset):
            if effect.type == REVISION:
                rev_offset, rev = offset, revision_of(offset, (effect,))
                continue
            if rev_offset != offset and effect.type == "kv" and not effect.delete:
                # the first of its offset: a put leading its request carries the revision
                rev_offset, rev = offset, revision_of(offset, (effect,))
            at = rev if counting and rev_offset == offset else offset
            if check and effect.type == "kv":
                check = False
                if start < at:
                    raise Compacted(at)
            if effect.type != w.type or not in_range(effect.key, w.key, w.end):
                continue
            if start <= at <= upto:
                event = event_of(at, effect, state.get(effect.key))
                if w.wants(event):
                    out.append(event)
            if w.prev_kv:
                state[effect.key] = kv_after(effect)
        if check:  # no key changed since the floor: what was owed is below it
            raise Compacted(upto + 1)
        return out

    def _compacted(self, w: Watcher, floor: int) -> None:
        if w.snapshot_if_compacted:
            self._send_snapshot(w)
            return
        w.sink.send(
            rpc_pb2.WatchResponse(
                header=self.header(self.delivered_revision if w.type == "kv" else self.delivered),
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
        revision = image.revision if w.type == "kv" else image.offset  # as its events count
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
        head = length_delimited(F_HEADER, self.header(header_revision).SerializeToString())
        if w.id:
            head += varint(F_WATCH_ID << 3) + varint(w.id)
        limit = self.max_response_bytes
        batch: list[bytes] = [head]
        size = len(head)
        last_rev = 0
        for ev in events:
            data = ev.field(w.prev_kv)
            if len(batch) > 1 and size + len(data) > limit:
                if w.fragment and ev.revision == last_rev:
                    batch.append(FRAGMENT_TRUE)
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
