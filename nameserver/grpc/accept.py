"""Several pending accepts per hot method on a grpc.aio server.

grpc.aio (1.85) accepts calls in one coroutine, ``AioServer._server_main_loop``. It keeps
one pending "next call" request per registered method plus one for every generic method,
and for each call it gets it ``asyncio.wait``s on all of them, starts a task that asks
gRPC core for the next call and only then can see the next one: three or four event-loop
turns and two extra tasks per call, one call at a time, in front of every handler. Under
load that coroutine is a queue. At 64 clients on 2 cores the leader's requests waited
there longer than in Raft: items carried 14 of the 64 clients' requests, the other 50
were on their way in or out.

:class:`Acceptors` registers a few hot unary methods with the server, so that gRPC core
routes their calls to requests made for them by name, and keeps ``per_method`` such
requests pending for each. Each lives in a coroutine that hands the call it gets to
gRPC's own per-call code (``_handle_rpc`` under ``_schedule_rpc_coro``, exactly as the
main loop does: status codes, cancellation and deadlines stay gRPC's) and asks for the
next. The main loop goes on accepting everything else (streams, the other methods) and
its share of the hot ones. Measured (bench/results/; docs/performance.md): puts at 64 clients +10-18 %,
the leader's CPU per put -20-29 %. The server must not set ``maximum_concurrent_rpcs``:
calls taken here are not counted against it.

This reaches into grpc's private Cython API; grpcio is pinned (``pyproject.toml``).
:func:`unsupported` checks every name and signature used, and without them (another
grpcio) the server runs as gRPC ships it, as it does with ``per_method=0``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from nameserver.grpc.guard import guard_handler

log = logging.getLogger(__name__)

#: The unary methods clients call most: etcd's KV and lease grants and revokes.
HOT_METHODS: tuple[str, ...] = (
    "/etcdserverpb.KV/Range",
    "/etcdserverpb.KV/Put",
    "/etcdserverpb.KV/DeleteRange",
    "/etcdserverpb.KV/Txn",
    "/etcdserverpb.Lease/LeaseGrant",
    "/etcdserverpb.Lease/LeaseRevoke",
)

#: Pending accepts per hot method. Against none, 2-16 all gained about the same puts/s on
#: 2 cores (4.2-4.5k against 3.6-4.0k); in CPU per call, at 64 clients, the do-nothing server
#: (bench/noop_kv.py) spent 117-130 µs with 2, 99-108 with 8 and 87-93 with 16, 32 or 64:
#: with as many pending accepts as calls in flight, a call rarely waits for one.
DEFAULT_PER_METHOD = 32

#: cygrpc functions used, with the parameters they must have (grpcio 1.85.1)
_SIGNATURES = {
    "_handle_rpc": (
        "method_name",
        "method_resolver",
        "interceptors",
        "rpc_state",
        "loop",
        "concurrency_exceeded",
    ),
    "_schedule_rpc_coro": ("rpc_coro", "rpc_state", "loop", "method_name"),
}


def _cygrpc() -> Any:
    from grpc._cython import cygrpc

    return cygrpc


def unsupported() -> str | None:
    """Why this grpcio cannot take extra acceptors (None: it can)."""
    try:
        cygrpc = _cygrpc()
    except ImportError as exc:  # pragma: no cover - grpcio always ships it
        return f"grpc._cython.cygrpc: {exc}"
    for name, params in _SIGNATURES.items():
        code = getattr(getattr(cygrpc, name, None), "__code__", None)
        if code is None or tuple(code.co_varnames[: code.co_argcount]) != params:
            return f"grpc._cython.cygrpc.{name} is missing or takes other parameters"
    if not hasattr(cygrpc, "_MethodResolver"):
        return "grpc._cython.cygrpc._MethodResolver is missing"
    for name in ("_request_registered_call", "is_running"):
        if not hasattr(cygrpc.AioServer, name):
            return f"grpc._cython.cygrpc.AioServer.{name} is missing"
    if not hasattr(grpc.aio.Server, "add_registered_method_handlers"):
        return "grpc.aio.Server.add_registered_method_handlers is missing"
    return None


class Acceptors:
    """Extra pending accepts for ``methods`` (path → handler) on ``server``.

    :meth:`register` before ``server.start()``, :meth:`start` after it, :meth:`stop`
    after ``server.stop()``. ``generic`` are the server's generic handlers (gRPC's own
    lookup falls back to them, as for any call)."""

    def __init__(
        self,
        server: grpc.aio.Server,
        methods: Mapping[str, grpc.RpcMethodHandler],
        generic: Sequence[grpc.GenericRpcHandler],
        per_method: int = DEFAULT_PER_METHOD,
    ) -> None:
        for path, handler in methods.items():
            if handler.request_streaming or handler.response_streaming:
                raise ValueError(f"methods: {path} streams; only unary methods are accepted here")
        self._server = server
        # guarded (idempotent: the method table's are already): an undecodable request is
        # INVALID_ARGUMENT whichever accept takes it, never UNKNOWN with a logged traceback
        self._methods = {path: guard_handler(h, path) for path, h in methods.items()}
        self._generic = list(generic)
        self.per_method = per_method
        self.reason = unsupported() if per_method > 0 and methods else None
        self.enabled = per_method > 0 and bool(methods) and self.reason is None
        self.accepted = 0  # calls these acceptors handed to gRPC's per-call code
        self._acceptors: set[asyncio.Task[None]] = set()
        self._calls: set[asyncio.Task[Any]] = set()

    def register(self) -> None:
        """Register the methods with the server (before it starts), grouped by service."""
        if not self.enabled:
            if self.reason is not None:
                log.warning("gRPC accepts: one at a time as gRPC ships it (%s)", self.reason)
            return
        by_service: dict[str, dict[str, grpc.RpcMethodHandler]] = {}
        for path, handler in self._methods.items():
            service, _, name = path.lstrip("/").rpartition("/")
            by_service.setdefault(service, {})[name] = handler
        for service, handlers in by_service.items():
            self._server.add_registered_method_handlers(service, handlers)

    def start(self) -> None:
        """Start ``per_method`` acceptors per method (after ``await server.start()``)."""
        if not self.enabled:
            return
        cygrpc = _cygrpc()
        aio = self._server._server  # grpc.aio._server.Server → cygrpc.AioServer
        loop = asyncio.get_running_loop()
        resolver = cygrpc._MethodResolver(self._generic, self._methods)
        for path in self._methods:
            for _ in range(self.per_method):
                task = loop.create_task(
                    self._accept(cygrpc, aio, resolver, path, loop), name=f"accept {path}"
                )
                self._acceptors.add(task)

    async def _accept(
        self, cygrpc: Any, aio: Any, resolver: Any, path: str, loop: asyncio.AbstractEventLoop
    ) -> None:
        method = path.encode()
        while True:
            try:
                rpc_state = await aio._request_registered_call(method)
            except Exception as exc:
                if not aio.is_running():
                    return  # shutting down: gRPC core fails every pending request
                if type(exc).__name__ == "_RequestCallError":
                    continue  # one failed request (as gRPC's main loop): ask again
                log.exception("gRPC accepts for %s stopped", path)
                return
            self.accepted += 1
            coro = cygrpc._handle_rpc(path, resolver, (), rpc_state, loop, False)
            call = loop.create_task(
                cygrpc._schedule_rpc_coro(coro, rpc_state, loop, path), name="rpc_task"
            )
            self._calls.add(call)  # the loop holds tasks weakly
            call.add_done_callback(self._calls.discard)

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Wait for the acceptors to end (after ``server.stop()``: gRPC core has failed
        their pending requests by then); cancel any left after ``timeout_s``."""
        if not self._acceptors:
            return
        _, left = await asyncio.wait(self._acceptors, timeout=timeout_s)
        for task in left:
            task.cancel()
        await asyncio.gather(*self._acceptors, return_exceptions=True)
        self._acceptors.clear()
