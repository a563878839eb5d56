"""A replica that is not its group's master answers the gRPC front's message calls by
forwarding them to the master's gRPC front, so a RocketMQ 5 client holding any live replica's
address reaches the current master (what RocketMQ's proxy does: ``proxy/.../
ClusterMessageService`` resolves the master and sends there; ``ProxyStartup`` in cluster mode).

- **Where each replica's gRPC front is** (:class:`GroupFronts`): every replica publishes its
  advertised gRPC ``host:port`` in metaledger's KV at ``/brokers/<group>/grpc/<replica id>``
  (:func:`grpc_key`, a plain key beside the consumer offsets under ``/brokers/<group>/``, the
  prefix a broker's role may already write: docs/auth.md) when it takes a role. Readers fall
  back to the remoting address shifted by this replica's own gRPC minus remoting offset (the
  ``cluster up`` layout) for a replica that published nothing (an older broker, or a group
  whose prefix this broker may not read).
- **QueryRoute's endpoints** (:meth:`GroupFronts.endpoints`): every live replica's gRPC
  address (the master first), in one ``Endpoints``; the 5.x clients open one channel per
  ``Endpoints`` over all its addresses (gRPC's pick_first: the Python client's
  ``RpcEndpoints.facade``), so when the master dies the next call connects to a live replica,
  which forwards to the new master.
- **Forwarding** (:class:`Forwarding`, a server interceptor, so calls the service gains later
  are forwarded by the same code): every unary and server-streaming method but those answered
  locally (:data:`LOCAL`: routes, settings, heartbeats, assignments) goes over one reused
  grpc.aio channel per master address with the caller's remaining deadline and metadata
  (``x-mq-client-id`` ...) plus ``x-metaledger-forwarded``, which is never forwarded again (two
  replicas with stale views cannot bounce a call between them: the receiver's send path
  refuses it as a slave would). While no master is known (an election), or the master cannot
  be reached, the answer is the method's response with ``HA_NOT_AVAILABLE``: the 5.x clients
  retry it at once (``Producer.__check_send_retry_condition`` ends retries only on
  TOO_MANY_REQUESTS or when attempts run out), where TOO_MANY_REQUESTS would end them.

- **The Telemetry stream** (:class:`Relay`): relayed to the master's front as a stream of its
  own (same metadata, the marker), both directions pumped, so the master knows the client's
  settings, registers it for transaction check-backs (``recover_orphaned_transaction_command``
  comes back through the replica) and counts it; Heartbeat and NotifyClientTermination are
  forwarded as unary calls, so they reach the master that holds those settings. When the
  master dies or changes (a watch of :meth:`GroupFronts.master_of`), the relay re-attaches
  the client's stream to the new master (or to this replica's own service when it became
  the master) and writes the client's last settings there first. The client's stream is not
  ended: the 5.x Python client only logs a Telemetry read error
  (``RpcStreamStreamCall.start_stream_read``) and rebuilds the stream after its next settings
  write fails, which its 300 s sync does (``ClientTelemetryManager``), so an ended stream
  would leave the client unknown to the new master for up to 5 minutes.

QueryRoute and QueryAssignment are answered by the replica called: routes and assignments
are read from metaledger and the same on every replica. The module is over 500 lines because
the stream relay shares the unary forwarding's channels, metadata and master lookup.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from broker.quorum.role import Role, RoleManager
from nameserver.client import Client, ClientError
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc

__all__ = [
    "FORWARDED",
    "LOCAL",
    "RELAYED",
    "Forwarding",
    "GroupFronts",
    "Relay",
    "grpc_key",
    "role_view",
]

log = logging.getLogger(__name__)

#: metadata a forwarded call carries (the forwarding replica's gRPC address)
FORWARDED = "x-metaledger-forwarded"
#: answered by whichever replica the client calls
LOCAL = frozenset({"QueryRoute", "QueryAssignment"})
#: bidirectional streams relayed to the master (:class:`Relay`); others are served here
RELAYED = frozenset({"Telemetry"})
#: how long a read of the published addresses and of a group's live replicas is reused
CACHE_S = 1.0
#: a master not among the published addresses is looked up again after this long at most
MISS_S = 0.2
#: a relayed stream checks this often whether its group's master changed
WATCH_S = 1.0
#: a relayed stream whose master is unreachable or unknown tries again after this long
RETRY_S = 0.2
#: the forwarding channels reconnect quickly (gRPC's default first backoff is 1 s, up to 120)
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
]
Address = tuple[str, int]


def grpc_key(group: str, replica_id: int) -> str:
    return f"/brokers/{group}/grpc/{replica_id}"


def parse_address(text: str) -> Address:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


class GroupFronts:
    """The gRPC fronts of replica groups, as published in metaledger; the master of this
    replica's own group as its role manager last heard.

    ``master_of()`` answers, per call: None when this replica serves the call itself (it is
    the master, or runs without a group), ``NO_MASTER`` while its group has none it knows, else
    the master's gRPC address."""

    NO_MASTER: Address = ("", 0)

    def __init__(
        self,
        client: Client,
        group: str,
        own: Address,
        derive: Callable[[str], Address],
        view: Callable[[], tuple[bool, int, str] | None],
    ) -> None:
        """``derive``: a replica's gRPC address from its remoting ``host:port`` (the fallback);
        ``view``: ``(is_master, master_id, master_remoting_address)`` of this replica's group,
        None before it took a role."""
        self.client = client
        self.group = group
        self.own = own
        self.derive = derive
        self.view = view
        #: group -> (read at, replica id -> gRPC address)
        self._published: dict[str, tuple[float, dict[int, Address]]] = {}
        #: group -> (read at, [(replica id, remoting address)] of the live replicas, master first)
        self._alive: dict[str, tuple[float, list[tuple[int, str]]]] = {}
        #: one read of metaledger at a time: calls arriving together share its answer
        self._reading = asyncio.Lock()

    # ------------------------------------------------------------ publishing
    def publish(self, replica_id: int) -> None:
        """Write this replica's gRPC address under its id (blocking; ClientError)."""
        host, port = self.own
        self.client.put(grpc_key(self.group, replica_id), f"{host}:{port}")
        self._published.pop(self.group, None)

    async def keep_published(self, replica_id: int, retry_s: float = 1.0) -> None:
        """:meth:`publish` until it went through (metaledger may be briefly unreachable)."""
        while True:
            try:
                await asyncio.to_thread(self.publish, replica_id)
                log.info("broker: gRPC front %s:%d published as replica %d", *self.own, replica_id)
                return
            except ClientError as exc:
                log.warning("broker: cannot publish the gRPC front yet (retrying): %s", exc)
            await asyncio.sleep(retry_s)

    async def published(self, group: str, max_age_s: float = CACHE_S) -> dict[int, Address]:
        """Replica id -> gRPC address under ``/brokers/<group>/grpc/``, read at most
        ``max_age_s`` ago."""
        async with self._reading:
            hit = self._published.get(group)
            if hit is not None and time.monotonic() - hit[0] < max_age_s:
                return hit[1]
            return await self._read_published(group)

    async def _read_published(self, group: str) -> dict[int, Address]:
        prefix = grpc_key(group, 0)[:-1]
        try:
            kvs = (await asyncio.to_thread(self.client.get, prefix, prefix=True)).kvs
        except ClientError as exc:  # not readable (auth) or unreachable: derive them
            log.debug("broker: gRPC fronts of %s not readable: %s", group, exc)
            kvs = []
        out: dict[int, Address] = {}
        for kv in kvs:
            try:
                out[int(kv.key.decode().rsplit("/", 1)[1])] = parse_address(kv.value.decode())
            except (ValueError, UnicodeDecodeError):
                log.warning("broker: ignoring %r = %r (not an id and host:port)", kv.key, kv.value)
        self._published[group] = (time.monotonic(), out)
        return out

    # ------------------------------------------------------------ the master
    async def master_of(self) -> Address | None:
        view = self.view()
        if view is None:
            return self.NO_MASTER
        is_master, master_id, master_address = view
        if is_master:
            return None
        if not master_id:
            return self.NO_MASTER
        found = (await self.published(self.group)).get(master_id)
        if found is None:  # a new master may have published just now
            found = (await self.published(self.group, MISS_S)).get(master_id)
        return found or self.derive(master_address)

    # ------------------------------------------------------------ QueryRoute
    async def endpoints(self, group: str, master_address: str) -> list[Address]:
        """The gRPC addresses of ``group``'s live replicas, its master's first; only the
        master's when metaledger has no replica group of that name (a group without the
        controller mode)."""
        try:
            alive = await self._live(group)
        except ClientError:  # NotFound too: no replica group of that name
            alive = []
        published = await self.published(group) if alive else {}
        out: list[Address] = []
        for replica_id, address in alive:
            front = published.get(replica_id) or self.derive(address)
            if front not in out:
                out.append(front)
        return out or [self.derive(master_address)]

    async def _live(self, group: str) -> list[tuple[int, str]]:
        async with self._reading:
            hit = self._alive.get(group)
            if hit is not None and time.monotonic() - hit[0] < CACHE_S:
                return hit[1]
            return await self._read_live(group)

    async def _read_live(self, group: str) -> list[tuple[int, str]]:
        g = await asyncio.to_thread(self.client.replica_group, group)
        live = sorted(
            ((r.broker_id, r.address) for r in g.replicas if r.alive),
            key=lambda r: r[0] != g.master_id,
        )
        self._alive[group] = (time.monotonic(), live)
        return live


def role_view(roles: RoleManager) -> tuple[bool, int, str] | None:
    """:class:`GroupFronts`' view of a replica's role: ``(is_master, master_id,
    master_address)``, None before it heard of its group."""
    view = roles.view
    if roles.role is Role.MASTER or (view is not None and view.is_master):
        return True, roles.broker_id, ""
    if view is None:
        return None
    return False, view.master_id, view.master_address


def _response_type(method: str) -> Any:
    m = svc.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name[method]
    return getattr(svc, m.output_type.name)


def unavailable(method: str, message: str) -> Any:
    """``method``'s response with HA_NOT_AVAILABLE (retried at once by the 5.x clients)."""
    out = _response_type(method)()
    if "status" in out.DESCRIPTOR.fields_by_name:
        out.status.code = v2.HA_NOT_AVAILABLE
        out.status.message = message
    return out


def _passed_metadata(context: Any, own: str) -> list[tuple[str, str | bytes]]:
    out: list[tuple[str, str | bytes]] = []
    for key, value in context.invocation_metadata() or ():
        if key.startswith((":", "grpc-")) or key in ("user-agent", FORWARDED):
            continue
        out.append((key, value))
    out.append((FORWARDED, own))
    return out


def _was_forwarded(context: Any) -> bool:
    return any(key == FORWARDED for key, _ in context.invocation_metadata() or ())


class Forwarding(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The gRPC front's interceptor: MessagingService calls not in :data:`LOCAL` go to the
    master when this replica is not it."""

    SERVICE = "/apache.rocketmq.v2.MessagingService/"

    def __init__(self, where: Callable[[], Awaitable[Address | None]], own: Address) -> None:
        """``where``: :meth:`GroupFronts.master_of`."""
        self.where = where
        self.own = f"{own[0]}:{own[1]}"
        self._channels: dict[Address, grpc.aio.Channel] = {}
        self.forwarded = 0

    def channel(self, address: Address) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            host, port = address
            target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            ch = self._channels[address] = grpc.aio.insecure_channel(target, CHANNEL_OPTIONS)
        return ch

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for ch in channels:
            await ch.close()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        path: str = details.method
        if handler is None or not path.startswith(self.SERVICE):
            return handler
        name = path[len(self.SERVICE) :]
        if name in RELAYED and handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(
                self._relay(name, path, handler.stream_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if name in LOCAL or handler.request_streaming:
            return handler
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(name, path, handler.unary_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return grpc.unary_unary_rpc_method_handler(
            self._unary(name, path, handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    async def _target(self, name: str, context: Any) -> Address | Any | None:
        """None: serve here; an address: forward there; else the answer to give."""
        if _was_forwarded(context):
            return None
        target = await self.where()
        if target == GroupFronts.NO_MASTER:
            return unavailable(name, "no master in this replica group now (election): retry")
        return target

    def _call_args(self, context: Any) -> dict[str, Any]:
        return {
            "timeout": context.time_remaining(),
            "metadata": _passed_metadata(context, self.own),
        }

    def _unary(
        self, name: str, path: str, local: Callable[[Any, Any], Awaitable[Any]]
    ) -> Callable[[Any, Any], Awaitable[Any]]:
        deserialize = _response_type(name).FromString

        async def call(request: Any, context: Any) -> Any:
            target = await self._target(name, context)
            if target is None:
                return await local(request, context)
            if not isinstance(target, tuple):
                return target
            stub = self.channel(target).unary_unary(
                path, request_serializer=_serialize, response_deserializer=deserialize
            )
            self.forwarded += 1
            try:
                return await stub(request, **self._call_args(context))
            except grpc.aio.AioRpcError as exc:
                return await self._failed(name, target, exc, context)

        return call

    def _stream(
        self, name: str, path: str, local: Callable[[Any, Any], Any]
    ) -> Callable[[Any, Any], AsyncIterator[Any]]:
        deserialize = _response_type(name).FromString

        async def call(request: Any, context: Any) -> AsyncIterator[Any]:
            target = await self._target(name, context)
            if target is None:
                answer = local(request, context)
                if hasattr(answer, "__aiter__"):
                    async for item in answer:
                        yield item
                else:  # a handler writing with context.write
                    await answer
                return
            if not isinstance(target, tuple):
                yield target
                return
            stub = self.channel(target).unary_stream(
                path, request_serializer=_serialize, response_deserializer=deserialize
            )
            self.forwarded += 1
            answered = False
            try:
                async for item in stub(request, **self._call_args(context)):
                    answered = True
                    yield item
            except grpc.aio.AioRpcError as exc:
                if answered:  # the stream broke half way: say so as the master did
                    await context.abort(exc.code(), exc.details() or "")
                yield await self._failed(name, target, exc, context)

        return call

    def _relay(
        self, name: str, path: str, local: Callable[[Any, Any], AsyncIterator[Any]]
    ) -> Callable[[Any, Any], AsyncIterator[Any]]:
        async def call(requests: Any, context: Any) -> AsyncIterator[Any]:
            target = None if _was_forwarded(context) else await self.where()
            if target is None:
                async for item in local(requests, context):
                    yield item
                return
            async for item in Relay(self, name, path, local, requests, context).run(target):
                yield item

        return call

    async def _failed(
        self, name: str, target: Address, exc: grpc.aio.AioRpcError, context: Any
    ) -> Any:
        """A forwarded call the master did not answer: unreachable is HA_NOT_AVAILABLE (an
        election is likely under way); anything else is passed on as it came."""
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            return unavailable(
                name, f"the master's gRPC front {target[0]}:{target[1]} is unreachable: retry"
            )
        await context.abort(exc.code(), exc.details() or "")


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())


class _Moved:
    """The relayed stream's group has another master now."""


@dataclass(frozen=True)
class _Ended:
    """The master's side of a relayed stream ended (``error`` None: with OK)."""

    error: grpc.aio.AioRpcError | None


class Relay:
    """One client's bidirectional stream (Telemetry), relayed by a replica that is not its
    group's master to the master's front, re-attached to the next master when this one dies
    or steps down.

    The client's commands are read once (``_inbox``) and written to whichever master the
    stream is attached to; the last ``settings`` command is kept and written first to a new
    master. Upstream ending with UNAVAILABLE (the master died) or CANCELLED is a reason to
    re-attach; another error code is passed on to the client as it came; OK ends the
    client's stream too (the master ended it: the client half-closed)."""

    def __init__(
        self,
        forwarding: Forwarding,
        name: str,
        path: str,
        local: Callable[[Any, Any], AsyncIterator[Any]],
        requests: AsyncIterator[Any],
        context: Any,
    ) -> None:
        self.forwarding = forwarding
        self.name = name
        self.path = path
        self.local = local
        self.context = context
        self.deserialize = _response_type(name).FromString
        #: the client's last settings command, written first to a new master
        self.settings: Any | None = None
        self._inbox: asyncio.Queue[Any | None] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read(requests))
        #: the master's side ended the stream (or the client's ended): no re-attaching
        self.finished = False

    async def _read(self, requests: AsyncIterator[Any]) -> None:
        try:
            async for command in requests:
                if command.WhichOneof("command") == "settings":
                    self.settings = command
                self._inbox.put_nowait(command)
        finally:
            self._inbox.put_nowait(None)

    async def run(self, target: Address | None) -> AsyncIterator[Any]:
        """What the client gets: the answers of each master the stream is attached to."""
        where = self.forwarding.where
        replay = False
        try:
            while True:
                if target is None:  # this replica is the master now: its own service
                    async for item in self.local(self._commands(replay), self.context):
                        yield item
                    return
                if target != GroupFronts.NO_MASTER:
                    async for item in self._attached(target, replay):
                        yield item
                    if self.finished:
                        return
                    replay = True
                await asyncio.sleep(RETRY_S)
                target = await where()
        finally:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    async def _commands(self, replay: bool) -> AsyncIterator[Any]:
        if replay and self.settings is not None:
            yield self.settings
        while (command := await self._next()) is not None:
            yield command

    async def _next(self) -> Any | None:
        """The client's next command; None (for every later reader too) once it half-closed."""
        command = await self._inbox.get()
        if command is None:
            self._inbox.put_nowait(None)
        return command

    async def _attached(self, target: Address, replay: bool) -> AsyncIterator[Any]:
        """One upstream stream to ``target``: its answers, until it ends or the master moved."""
        fwd = self.forwarding
        call = fwd.channel(target).stream_stream(
            self.path, request_serializer=_serialize, response_deserializer=self.deserialize
        )(metadata=_passed_metadata(self.context, fwd.own))
        fwd.forwarded += 1
        outbox: asyncio.Queue[Any] = asyncio.Queue()
        tasks = [
            asyncio.create_task(self._up(call, replay)),
            asyncio.create_task(self._down(call, outbox)),
            asyncio.create_task(self._watch(target, outbox)),
        ]
        try:
            while True:
                item = await outbox.get()
                if isinstance(item, _Moved):
                    return
                if isinstance(item, _Ended):
                    await self._ended(target, item.error)
                    return
                if replay:  # the new master answered the client's settings
                    log.info("broker: %s stream re-attached to %s:%d", self.name, *target)
                    replay = False
                yield item
        finally:
            call.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _up(self, call: Any, replay: bool) -> None:
        """The client's commands to the master (its last settings first on a new master)."""
        try:
            if replay and self.settings is not None:
                await call.write(self.settings)
            while (command := await self._next()) is not None:
                await call.write(command)
            await call.done_writing()
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
            log.debug("broker: relayed %s write failed: %s", self.name, exc)

    async def _down(self, call: Any, outbox: asyncio.Queue[Any]) -> None:
        try:
            while (item := await call.read()) is not grpc.aio.EOF:
                outbox.put_nowait(item)
            outbox.put_nowait(_Ended(None))
        except grpc.aio.AioRpcError as exc:
            outbox.put_nowait(_Ended(exc))

    async def _watch(self, target: Address, outbox: asyncio.Queue[Any]) -> None:
        while await self.forwarding.where() == target:
            await asyncio.sleep(WATCH_S)
        outbox.put_nowait(_Moved())

    async def _ended(self, target: Address, error: grpc.aio.AioRpcError | None) -> None:
        if error is None:
            self.finished = True
        elif error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
            self.finished = True
            await self.context.abort(error.code(), error.details() or "")
        else:
            log.debug("broker: relayed %s to %s:%d ended: %s", self.name, *target, error.code())
