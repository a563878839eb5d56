"""etcd's Watch service: one :class:`WatchStream` per client stream, fed by the hub."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from nameserver.errors import UndecodableRequest
from nameserver.watch.events import (
    ERR_DUPLICATE_ID,
    NO_WATCH_ID,
    NODELETE,
    NOPUT,
    HubEvent,
    normalize_range,
)
from nameserver.watch.hub import Watcher, WatchHub
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc

log = logging.getLogger(__name__)

#: auth's check of one watch create (etcd's ``isWatchPermitted``): (key, range_end) -> None
#: when the stream's user may read the range, else the cancel reason (etcd's: the gRPC
#: error's text, "rpc error: code = PermissionDenied desc = etcdserver: permission denied")
Refusal = Callable[[bytes, bytes], "str | None"]

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

    def __init__(
        self, hub: WatchHub, progress_interval_s: float, refusal: Refusal | None = None
    ) -> None:
        self.hub = hub
        self.progress_interval_s = progress_interval_s
        self.refusal = refusal
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
                        header=self.hub.header(self.hub.delivered_revision),
                        watch_id=w.id,
                        canceled=True,
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
            rpc_pb2.WatchResponse(
                header=self.hub.header(self.hub.delivered_revision), watch_id=NO_WATCH_ID
            )
        )

    def _create(self, req: rpc_pb2.WatchCreateRequest) -> None:
        hub = self.hub
        error = ""
        if self.refusal is not None:
            # etcd checks the range first, and answers a refused create in band: the
            # stream stays open for the client's other watches (v3rpc/watch.go recvLoop)
            error = self.refusal(req.key or b"\x00", req.range_end) or ""
        key: bytes = b""
        end: bytes | None = None
        try:
            key, end = normalize_range(req.key, req.range_end)
        except ValueError as exc:
            error = error or str(exc)
        record_type = req.record_type or "kv"
        record_types = hub.record_types
        if not error and record_type not in record_types:
            error = (
                f"metaledger: unknown record_type {req.record_type!r} "
                f"(one of: {', '.join(record_types)})"
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
        header = hub.header(hub.delivered_revision)
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
    def __init__(
        self,
        hub: WatchHub,
        progress_interval_s: float,
        refusal: Callable[[Any], Refusal | None] | None = None,
    ) -> None:
        """``refusal(context)``: auth's check of the watch creates of one stream (None,
        or returning None, while auth is off)."""
        self.hub = hub
        self.progress_interval_s = progress_interval_s
        self.refusal = refusal

    async def Watch(
        self, request_iterator: AsyncIterator[rpc_pb2.WatchRequest], context: Any
    ) -> AsyncIterator[rpc_pb2.WatchResponse | bytes]:
        refusal = self.refusal(context) if self.refusal is not None else None
        stream = WatchStream(self.hub, self.progress_interval_s, refusal)
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
