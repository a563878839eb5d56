"""etcd's JSON gateway (etcd 3.4's grpc-gateway): ``POST /v3/kv/range`` and the rest.

etcd serves its API as JSON over HTTP/1.1 beside gRPC: a request body is the request
message in protobuf's JSON mapping (bytes base64, 64-bit integers as strings or numbers,
enums by name or number, either field spelling; unknown fields ignored), the answer is the
response message as etcd's grpc-gateway writes it (``JSONPb{OrigName: true}``: the .proto
field names, 64-bit integers as strings, defaults left out), and an error is
``{"error":"...","message":"...","code":N}`` with the HTTP status grpc-gateway gives the
gRPC code. A streaming method (``/v3/watch``, ``/v3/lease/keepalive``, snapshots, election
observe) answers ``{"result":{...}}`` lines, chunked, until the method ends or the client
closes; the body may hold several request objects, sent in order.

Nothing here is a second copy of a method: :class:`Gateway` looks the method up in the
gRPC front's :class:`~nameserver.grpc.methods.MethodTable` and calls the same guarded
handler a gRPC call reaches (auth's check, the undecodable/too-large answers, the status
mapping), with a :class:`GatewayContext` that carries the ``Authorization`` header as the
call's ``token`` metadata. The HTTP side (reading the request, the listening socket, TLS)
is :mod:`nameserver.metrics`'s server; this module writes the answer; the translation
(routes, JSON, error bodies) is :mod:`nameserver.grpc.gateway_json`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import grpc
from google.protobuf.message import Message

from nameserver.grpc.context import CallAborted, DirectContext
from nameserver.grpc.gateway_json import (
    HTTP_STATUS,
    METHODS,
    PREFIXES,
    BadRequest,
    Method,
    decode,
    encode,
    error_body,
    stream_error,
)
from nameserver.metrics import HttpRequest

log = logging.getLogger(__name__)

#: grpc-gateway's CORS-free default headers as etcd 3.4 sends them on every answer.
_COMMON_HEADERS = (
    b"Access-Control-Allow-Headers: accept, content-type, authorization\r\n"
    b"Access-Control-Allow-Methods: POST, GET, OPTIONS, PUT, DELETE\r\n"
    b"Access-Control-Allow-Origin: *\r\n"
)


#: A handler's ``context.abort`` on a gateway call: carries the status.
GatewayAbort = CallAborted


class GatewayContext(DirectContext):
    """The servicer context of a gateway call: the ``Authorization`` header is the call's
    ``token`` metadata (etcd reads either; its gateway forwards the header), and
    ``abort`` raises :class:`GatewayAbort`."""

    __slots__ = ()

    def __init__(self, headers: Mapping[str, str], peer: str = "") -> None:
        token = headers.get("authorization")
        super().__init__((("token", token),) if token else (), peer)


#: Looks up the guarded handler of a gRPC method path (the method table's).
Lookup = Callable[[str], "grpc.RpcMethodHandler | None"]


class Gateway:
    """Answers gateway requests by calling the gRPC front's handlers (``lookup``)."""

    def __init__(self, lookup: Lookup) -> None:
        self._lookup = lookup

    @staticmethod
    def handles(path: str) -> bool:
        return path.startswith(PREFIXES)

    async def serve(
        self, request: HttpRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Answer ``request`` on ``writer`` (a stream until it ends or the client closes)."""
        route = request.path.split("/", 2)[2] if request.path.count("/") >= 2 else ""
        method = METHODS.get(route)
        handler = self._lookup(method.path) if method is not None else None
        if method is None or handler is None:
            await _plain(writer, b"404 Not Found", b"Not Found\n")
            return
        if request.method != "POST":
            await _plain(writer, b"405 Method Not Allowed", b"Method Not Allowed\n")
            return
        context = GatewayContext(request.headers, request.peer)
        streaming = method.client_streaming or method.server_streaming
        try:
            messages = decode(request.body, method.request, many=method.client_streaming)
        except BadRequest as exc:
            # etcd's gateway: code 3 for a unary call, 2 (Unknown) for a stream's body
            code = grpc.StatusCode.UNKNOWN if streaming else grpc.StatusCode.INVALID_ARGUMENT
            await _answer(writer, code, error_body(code, str(exc)))
            return
        # through the method's own (guarded) deserializer, as a gRPC call's bytes are: the
        # node's max_request_bytes and protobuf's depth limit answer as they do there
        deserialize = handler.request_deserializer
        requests: list[Any] = (
            [deserialize(m.SerializeToString()) for m in messages]
            if deserialize is not None
            else list(messages)
        )
        if not streaming:
            await self._unary(handler, method, requests[0], context, writer)
            return
        responses = _responses(handler, method, requests, context)
        await _stream(responses, method, reader, writer)

    async def _unary(
        self,
        handler: grpc.RpcMethodHandler,
        method: Method,
        request: Any,  # a request message, or the guard's Undecodable
        context: GatewayContext,
        writer: asyncio.StreamWriter,
    ) -> None:
        try:
            result = await handler.unary_unary(request, context)
            body = encode(_as_message(handler, method, result))
            code = grpc.StatusCode.OK
        except GatewayAbort as exc:
            code, body = exc.code, error_body(exc.code, exc.details)
        except Exception as exc:  # a bug: answered, logged, never the server's end
            log.exception("gateway %s failed", method.path)
            code = grpc.StatusCode.INTERNAL
            body = error_body(code, f"metaledger: internal error: {type(exc).__name__}: {exc}")
        await _answer(writer, code, body)


def _as_message(handler: grpc.RpcMethodHandler, method: Method, result: Any) -> Message:
    """A handler's answer as the response message (some pass pre-encoded bytes)."""
    if isinstance(result, method.response):
        return result
    serialize = handler.response_serializer
    data = serialize(result) if serialize is not None else result
    return method.response.FromString(data)


async def _requests(messages: list[Any]) -> AsyncIterator[Any]:
    for message in messages:
        yield message


def _responses(
    handler: grpc.RpcMethodHandler,
    method: Method,
    messages: list[Any],
    context: GatewayContext,
) -> AsyncIterator[Message]:
    """The handler's answers to ``messages`` as response messages."""

    async def gen() -> AsyncIterator[Message]:
        if method.client_streaming:
            call = handler.stream_stream if method.server_streaming else handler.stream_unary
            result = call(_requests(messages), context)
        else:
            call = handler.unary_stream if method.server_streaming else handler.unary_unary
            result = call(messages[0], context)
        if inspect.isawaitable(result):
            result = await result
            if result is not None:
                yield _as_message(handler, method, result)
            return
        async for item in result:
            yield _as_message(handler, method, item)

    return gen()


async def _stream(
    responses: AsyncIterator[Message],
    method: Method,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Write ``responses`` as chunked ``{"result":...}`` lines until they end or the
    client closes the connection (then the handler is cancelled)."""
    started = False

    async def pump() -> None:
        nonlocal started
        try:
            async for response in responses:
                if not started:
                    await _start_stream(writer, 200, "OK")
                    started = True
                await _chunk(writer, b'{"result":' + encode(response) + b"}\n")
        except GatewayAbort as exc:
            await _stream_failed(writer, started, exc.code, exc.details)
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.exception("gateway %s failed", method.path)
            await _stream_failed(writer, started, grpc.StatusCode.INTERNAL, f"{exc}")
        if not started:
            await _start_stream(writer, 200, "OK")
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    loop = asyncio.get_running_loop()
    pumping = loop.create_task(pump())
    closed = loop.create_task(_closed(reader))
    try:
        await asyncio.wait((pumping, closed), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pumping, closed):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await pumping
        with contextlib.suppress(asyncio.CancelledError):
            await closed
        with contextlib.suppress(Exception):
            await responses.aclose()  # type: ignore[attr-defined]


async def _closed(reader: asyncio.StreamReader) -> None:
    """Returns when the client closes its side (anything it sends now is ignored)."""
    with contextlib.suppress(ConnectionError):
        while await reader.read(4096):
            pass


async def _stream_failed(
    writer: asyncio.StreamWriter, started: bool, code: grpc.StatusCode, message: str
) -> None:
    if not started:
        status, text = HTTP_STATUS.get(code, (500, "Internal Server Error"))
        await _start_stream(writer, status, text)
    await _chunk(writer, stream_error(code, message) + b"\n")


async def _start_stream(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    writer.write(
        f"HTTP/1.1 {status} {text}\r\n".encode() + _COMMON_HEADERS
        + b"Content-Type: application/json\r\nGrpc-Metadata-Content-Type: application/grpc\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )  # fmt: skip
    await writer.drain()


async def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
    await writer.drain()


async def _answer(writer: asyncio.StreamWriter, code: grpc.StatusCode, body: bytes) -> None:
    status, text = HTTP_STATUS.get(code, (500, "Internal Server Error"))
    extra = b"Grpc-Metadata-Content-Type: application/grpc\r\n" if status == 200 else b""
    writer.write(
        f"HTTP/1.1 {status} {text}\r\n".encode() + _COMMON_HEADERS
        + b"Content-Type: application/json\r\n" + extra
        + b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
        + body
    )  # fmt: skip
    await writer.drain()


async def _plain(writer: asyncio.StreamWriter, status: bytes, body: bytes) -> None:
    writer.write(
        b"HTTP/1.1 " + status + b"\r\n" + _COMMON_HEADERS
        + b"Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n"
        + b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
        + body
    )  # fmt: skip
    await writer.drain()
