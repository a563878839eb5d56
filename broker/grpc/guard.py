"""Requests on a replica's gRPC port that are not their method's message: answered the v2 way.

gRPC decodes a request with the method's deserializer before any handler runs; bytes that are
not the message raise ``DecodeError`` there, which grpc.aio answers UNKNOWN with Python's text
("Unexpected <class ...DecodeError>") and logs as a server error. :class:`DecodeGuard`, the
outermost interceptor of the front (before forwarding: an undecodable request is answered by
the replica that got it, never forwarded), gives every ``apache.rocketmq.v2`` method a
deserializer that does not raise, and answers such a request with the method's response
message and ``status`` BAD_REQUEST, ``request: cannot decode apache.rocketmq.v2.<Message>: …``
(the v2 way: statuses in the answer, as every other refusal of the front). On a stream of
requests (Telemetry) the stream ends at the first bad one, the last answer saying so. A
response without a ``status`` field (Admin's ChangeLogLevel) answers INVALID_ARGUMENT.
Nothing changes on the broker. A request that decodes costs one more coroutine frame.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from protos.apache.rocketmq.v2 import admin_pb2 as adm
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc

log = logging.getLogger(__name__)


class Undecodable:
    """In place of a request that did not decode: why."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def _responses() -> dict[str, tuple[str, Any]]:
    """Method path -> (request message name, response class) of the v2 services."""
    out: dict[str, tuple[str, Any]] = {}
    for module in (svc, adm):
        for service in module.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                response = getattr(module, m.output_type.name)
                out[f"/{service.full_name}/{m.name}"] = (m.input_type.full_name, response)
    return out


RESPONSES = _responses()


def lenient(deserializer: Callable[[bytes], Any], name: str) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:  # DecodeError above all: never let it reach gRPC
            return Undecodable(
                f"request: cannot decode {name}: the payload is not a valid protobuf message"
                f" of this type ({len(data)} bytes)"
            )

    return parse


def refusal(response: Any, why: str) -> Any:
    """The method's answer to an undecodable request, or None when it has no status."""
    if "status" not in response.DESCRIPTOR.fields_by_name:
        return None
    return response(status=v2.Status(code=v2.BAD_REQUEST, message=why))


class DecodeGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """See the module."""

    def __init__(self) -> None:
        self.refused = 0  # undecodable requests answered (tests read it)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        known = RESPONSES.get(details.method)
        if handler is None or known is None or handler.request_deserializer is None:
            return handler
        name, response = known
        parse = lenient(handler.request_deserializer, name)
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(
                self._bidi(handler.stream_stream, response),
                request_deserializer=parse,
                response_serializer=handler.response_serializer,
            )
        if handler.request_streaming:
            return handler  # no such v2 method
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream, response),
                request_deserializer=parse,
                response_serializer=handler.response_serializer,
            )
        return grpc.unary_unary_rpc_method_handler(
            self._unary(handler.unary_unary, response),
            request_deserializer=parse,
            response_serializer=handler.response_serializer,
        )

    async def _refuse(self, response: Any, bad: Undecodable, context: Any) -> Any:
        self.refused += 1
        log.debug("gRPC: %s", bad.message)
        answer = refusal(response, bad.message)
        if answer is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, bad.message)
        return answer

    def _unary(self, behaviour: Any, response: Any) -> Callable[[Any, Any], Awaitable[Any]]:
        async def call(request: Any, context: Any) -> Any:
            if isinstance(request, Undecodable):
                return await self._refuse(response, request, context)
            return await behaviour(request, context)

        return call

    def _stream(self, behaviour: Any, response: Any) -> Callable[[Any, Any], AsyncIterator[Any]]:
        async def call(request: Any, context: Any) -> AsyncIterator[Any]:
            if isinstance(request, Undecodable):
                yield await self._refuse(response, request, context)
                return
            answer = behaviour(request, context)
            if hasattr(answer, "__aiter__"):
                async for item in answer:
                    yield item
            else:  # a handler writing with context.write
                await answer

        return call

    def _bidi(self, behaviour: Any, response: Any) -> Callable[[Any, Any], AsyncIterator[Any]]:
        async def call(requests: Any, context: Any) -> AsyncIterator[Any]:
            bad: list[Undecodable] = []

            async def decoded() -> AsyncIterator[Any]:
                async for r in requests:
                    if isinstance(r, Undecodable):
                        bad.append(r)
                        return
                    yield r

            async for item in behaviour(decoded(), context):
                yield item
            if bad:
                yield await self._refuse(response, bad[0], context)

        return call


__all__ = ["DecodeGuard", "Undecodable"]
