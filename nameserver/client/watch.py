"""The watch surface (etcd's Watch service): :meth:`nameserver.client.Client.watch` returns a
:class:`Watch`, an iterator (and context manager) of :class:`WatchEvent`::

    with client.watch("config/", prefix=True, start_revision=rev + 1) as events:
        for ev in events:
            print(ev.type, ev.kv.key, ev.kv.value, ev.revision)

**Resume**: revisions are log offsets, the same on every node, so when the watched node fails
(the stream breaks: UNAVAILABLE, a reset connection, a server shutdown) the watch reopens on
the next endpoint from the last revision it delivered + 1. Every event arrives exactly once
and in order across the switch. It keeps trying (with backoff) for ``reconnect_timeout_s``
with no endpoint answering, then raises :class:`~nameserver.client.Unavailable`.

**Compaction**: a start revision below the oldest one a node still keeps raises
:class:`WatchCompacted` (``compact_revision`` is the oldest available), as etcd does. With
``snapshot_if_compacted=True`` the watch delivers instead the current state of the range:
PUT events whose ``snapshot_revision`` is set, then a ``SNAPSHOT_END`` event (no kv); replace
your view of the range with those PUTs, then apply the events that follow.
"""

from __future__ import annotations

import queue
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from nameserver.client.errors import (
    Cancelled,
    ClientError,
    InvalidArgument,
    Unavailable,
    WatchCompacted,
    error_from_rpc,
)
from nameserver.client.kv import Bytesish, KeyValue, key_range
from nameserver.client.transport import Transport
from protos.etcdserverpb import kv_pb2, rpc_pb2, rpc_pb2_grpc

__all__ = ["SNAPSHOT_END", "Watch", "WatchApi", "WatchEvent"]

SNAPSHOT_END = "SNAPSHOT_END"
_FILTERS = {
    "NOPUT": rpc_pb2.WatchCreateRequest.NOPUT,
    "NODELETE": rpc_pb2.WatchCreateRequest.NODELETE,
}


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """``type`` is ``PUT``, ``DELETE`` or ``SNAPSHOT_END``; ``revision`` is the change's
    revision (for a snapshot PUT: the key's mod_revision; for SNAPSHOT_END: the snapshot's)."""

    type: str
    kv: KeyValue | None
    prev_kv: KeyValue | None
    revision: int
    snapshot_revision: int = 0


def _event(ev: kv_pb2.Event, snapshot_revision: int = 0) -> WatchEvent:
    prev = KeyValue.from_proto(ev.prev_kv) if ev.HasField("prev_kv") else None
    return WatchEvent(
        kv_pb2.Event.EventType.Name(ev.type),
        KeyValue.from_proto(ev.kv),
        prev,
        ev.kv.mod_revision,
        snapshot_revision,
    )


class Watch:
    """One watched range, following the cluster across node failures (see the module doc)."""

    _BACKOFF_FIRST_S = 0.05
    _BACKOFF_MAX_S = 0.5

    def __init__(
        self,
        client: Transport,
        key: Bytesish,
        *,
        prefix: bool = False,
        range_end: Bytesish | None = None,
        start_revision: int = 0,
        prev_kv: bool = False,
        filters: Iterable[str] = (),
        snapshot_if_compacted: bool = False,
        progress_notify: bool = False,
        reconnect_timeout_s: float = 30.0,
        record_type: str = "",
    ) -> None:
        k, end = key_range(key, range_end, prefix)
        if start_revision < 0:
            raise InvalidArgument(f"start_revision must be >= 0 (got {start_revision})")
        try:
            codes = [_FILTERS[f.upper()] for f in filters]
        except KeyError as exc:
            raise InvalidArgument(
                f"filters: unknown filter {exc.args[0]!r} (NOPUT, NODELETE)"
            ) from None
        self._client = client
        self._create = rpc_pb2.WatchCreateRequest(
            key=k,
            range_end=end,
            prev_kv=prev_kv,
            filters=codes,
            snapshot_if_compacted=snapshot_if_compacted,
            progress_notify=progress_notify,
            record_type=record_type,
        )
        self._start = start_revision
        self.reconnect_timeout_s = reconnect_timeout_s
        #: the last revision delivered (0: none yet); a resume starts after it
        self.last_revision = 0
        #: the endpoint currently streaming
        self.endpoint: str | None = None
        self.reconnects = 0
        self._ready: deque[WatchEvent] = deque()
        self._requests: queue.SimpleQueue[rpc_pb2.WatchRequest | None] | None = None
        self._responses: Any = None
        self._watch_id: int | None = None
        self._in_snapshot = False
        self._closed = False

    # ------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[WatchEvent]:
        return self

    def __next__(self) -> WatchEvent:
        while not self._ready:
            if self._closed:
                raise StopIteration
            if self._responses is None:
                self._connect()
            try:
                response = next(self._responses)
            except StopIteration:
                self._drop("the server ended the stream")
                continue
            except grpc.RpcError as err:
                exc = error_from_rpc(err, self.endpoint)
                if self._closed:
                    raise StopIteration from None
                if isinstance(exc, Cancelled | Unavailable) or exc.retriable:
                    self._drop(str(exc))
                    continue
                raise exc from None
            self._handle(response)
        return self._ready.popleft()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        self._hang_up()

    # ------------------------------------------------------------ plumbing
    def _handle(self, r: rpc_pb2.WatchResponse) -> None:
        if r.created:
            if r.canceled:
                raise InvalidArgument(r.cancel_reason or "watch refused", self.endpoint)
            self._watch_id = r.watch_id
            if not self.last_revision and not self._start:
                self.last_revision = r.header.revision  # "from now" means after this
            return
        if r.watch_id not in (self._watch_id, -1):
            return
        if r.canceled:
            self._closed = True
            self._hang_up()
            if r.compact_revision:
                raise WatchCompacted(
                    f"{r.cancel_reason or 'required revision has been compacted'} "
                    f"(oldest available revision {r.compact_revision})",
                    r.compact_revision,
                    self.endpoint,
                )
            raise ClientError(r.cancel_reason or "the server canceled the watch", self.endpoint)
        if r.snapshot_revision:
            self._in_snapshot = True
            self._ready.extend(_event(ev, r.snapshot_revision) for ev in r.events)
            if not r.fragment:
                self._in_snapshot = False
                self._ready.append(
                    WatchEvent(SNAPSHOT_END, None, None, r.snapshot_revision, r.snapshot_revision)
                )
                self.last_revision = r.snapshot_revision
            return
        for ev in r.events:
            event = _event(ev)
            self._ready.append(event)
            self.last_revision = max(self.last_revision, event.revision)
        if not r.events and not r.fragment:  # progress: everything up to it was delivered
            self.last_revision = max(self.last_revision, r.header.revision)

    def _connect(self) -> None:
        """Open the stream on the current endpoint, or the next ones, until one answers."""
        client = self._client
        deadline = time.monotonic() + self.reconnect_timeout_s
        backoff = self._BACKOFF_FIRST_S
        failures: dict[str, str] = {}
        while True:
            endpoint = client.endpoints[client._current]
            start = self.last_revision + 1 if self.last_revision else self._start
            create = rpc_pb2.WatchCreateRequest()
            create.CopyFrom(self._create)
            create.start_revision = start
            requests: queue.SimpleQueue[rpc_pb2.WatchRequest | None] = queue.SimpleQueue()
            requests.put(rpc_pb2.WatchRequest(create_request=create))
            stub = rpc_pb2_grpc.WatchStub(client._stubs_for(endpoint).channel)
            responses = stub.Watch(iter(requests.get, None))
            try:
                first = next(responses)
            except grpc.RpcError as err:
                failures[endpoint] = error_from_rpc(err, endpoint).message
                responses.cancel()
                client._current = (client._current + 1) % len(client.endpoints)
                if time.monotonic() + backoff >= deadline:
                    tried = "; ".join(f"{ep}: {msg}" for ep, msg in failures.items())
                    raise Unavailable(f"watch: no endpoint answered ({tried})") from None
                time.sleep(backoff)
                backoff = min(backoff * 2, self._BACKOFF_MAX_S)
                continue
            self._requests, self._responses, self.endpoint = requests, responses, endpoint
            self._handle(first)
            return

    def _drop(self, why: str) -> None:
        """The stream broke: move to the next endpoint. A snapshot cut short is sent again
        whole (same start revision, so compacted again) under its new snapshot_revision."""
        self._hang_up()
        self._in_snapshot = False
        client = self._client
        client._current = (client._current + 1) % len(client.endpoints)
        self.reconnects += 1

    def _hang_up(self) -> None:
        if self._requests is not None:
            self._requests.put(None)
            self._requests = None
        if self._responses is not None:
            self._responses.cancel()
            self._responses = None
        self._watch_id = None


class WatchApi(Transport):
    """``watch()``: one :class:`Watch` per call, sharing the client's channels."""

    def watch(
        self,
        key: Bytesish,
        prefix: bool = False,
        range_end: Bytesish | None = None,
        start_revision: int = 0,
        prev_kv: bool = False,
        filters: Iterable[str] = (),
        snapshot_if_compacted: bool = False,
        progress_notify: bool = False,
        record_type: str = "",
    ) -> Watch:
        """Watch a key or range: an iterator of events that resumes on another endpoint from
        the last revision + 1 when its node fails (see the module docstring).
        ``record_type`` watches records of another type than kv (e.g. ``replica_group``:
        key = broker name, value = ``records.ReplicaGroupRecord`` bytes)."""
        return Watch(
            self,
            key,
            prefix=prefix,
            range_end=range_end,
            start_revision=start_revision,
            prev_kv=prev_kv,
            filters=filters,
            snapshot_if_compacted=snapshot_if_compacted,
            progress_notify=progress_notify,
            record_type=record_type,
        )
