"""The method table: every gRPC service's methods behind one generic handler."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from nameserver.grpc.guard import Authorize, guard_handler


class _Details(grpc.HandlerCallDetails):  # type: ignore[misc]
    """A lookup's call details: the method path only."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


class MethodTable(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every service's methods in one generic handler, looked up by path in one dict.

    The generated ``add_*Servicer_to_server(servicer, server)`` functions take this in place
    of the server. They would also register each method with the server, and grpc.aio keeps
    one pending "next call" request per registered method and waits on all of them with
    ``asyncio.wait`` for every call it accepts: with our ~70 methods that cost ~30 µs of the
    event loop per call, serialised in front of the next accept. As generic methods there is
    one pending request (``bench/results/grpc-methods-*.md``). The few hot unary methods are
    registered after all, by :class:`nameserver.grpc.accept.Acceptors`, with accepts of
    their own. Every handler is served guarded (:func:`nameserver.grpc.guard.guard_handler`):
    an undecodable request is INVALID_ARGUMENT, an unimplemented method UNIMPLEMENTED, and
    neither is logged as a server error.
    """

    def __init__(
        self, max_request_bytes: int | None = None, authorize: Authorize | None = None
    ) -> None:
        self._methods: dict[str, grpc.RpcMethodHandler] = {}
        self._generic: list[grpc.GenericRpcHandler] = []
        self._max_request_bytes = max_request_bytes  # any request larger is refused
        self._authorize = authorize  # auth's check before every handler (None: no auth)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        for name, handler in handlers.items():
            path = f"/{service}/{name}"
            self._methods[path] = guard_handler(
                handler, path, self._max_request_bytes, self._authorize
            )

    def methods(self, paths: Sequence[str]) -> dict[str, grpc.RpcMethodHandler]:
        """The handlers of those of ``paths`` this table has (``/service/method``)."""
        return {path: self._methods[path] for path in paths if path in self._methods}

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        # the generated code passes the same methods here too; services registered only
        # this way (Watch, with its own serializer) are found through them
        self._generic.extend(handlers)

    def handler(self, path: str) -> grpc.RpcMethodHandler | None:
        """The guarded handler of method ``path`` (``/service/method``), as a call finds it."""
        return self.service(_Details(path))

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._methods.get(details.method)
        if handler is not None:
            return handler
        for generic in self._generic:
            handler = generic.service(details)
            if handler is not None:
                # guarded once (nameserver.grpc.guard), then found in the dict
                handler = guard_handler(
                    handler, details.method, self._max_request_bytes, self._authorize
                )
                self._methods[details.method] = handler
                return handler
        return None
