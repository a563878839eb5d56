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
is :mod:`nameserver.metrics`'s server; this module writes the answer.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import inspect
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from nameserver.metrics import HttpRequest
from protos.etcdserverpb import rpc_pb2, v3election_pb2, v3lock_pb2

log = logging.getLogger(__name__)

#: The gateway's URL prefixes (etcd 3.4 serves both; v3beta is deprecated there).
PREFIXES = ("/v3/", "/v3beta/")

#: grpc-gateway's HTTPStatusFromCode (v1, as etcd 3.4 vendors it).
HTTP_STATUS = {
    grpc.StatusCode.OK: (200, "OK"),
    grpc.StatusCode.CANCELLED: (408, "Request Timeout"),
    grpc.StatusCode.UNKNOWN: (500, "Internal Server Error"),
    grpc.StatusCode.INVALID_ARGUMENT: (400, "Bad Request"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "Gateway Timeout"),
    grpc.StatusCode.NOT_FOUND: (404, "Not Found"),
    grpc.StatusCode.ALREADY_EXISTS: (409, "Conflict"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "Forbidden"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "Unauthorized"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "Too Many Requests"),
    grpc.StatusCode.FAILED_PRECONDITION: (412, "Precondition Failed"),
    grpc.StatusCode.ABORTED: (409, "Conflict"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "Bad Request"),
    grpc.StatusCode.UNIMPLEMENTED: (501, "Not Implemented"),
    grpc.StatusCode.INTERNAL: (500, "Internal Server Error"),
    grpc.StatusCode.UNAVAILABLE: (503, "Service Unavailable"),
    grpc.StatusCode.DATA_LOSS: (500, "Internal Server Error"),
}

_SERVICES = {
    "etcdserverpb": rpc_pb2.DESCRIPTOR,
    "v3lockpb": v3lock_pb2.DESCRIPTOR,
    "v3electionpb": v3election_pb2.DESCRIPTOR,
}

#: The routes of etcd 3.4's gateway (``rpc.pb.gw.go``, ``v3lock.pb.gw.go``,
#: ``v3election.pb.gw.go``): path under the prefix → gRPC method.
ROUTES: dict[str, str] = {
    "kv/range": "/etcdserverpb.KV/Range",
    "kv/put": "/etcdserverpb.KV/Put",
    "kv/deleterange": "/etcdserverpb.KV/DeleteRange",
    "kv/txn": "/etcdserverpb.KV/Txn",
    "kv/compaction": "/etcdserverpb.KV/Compact",
    "watch": "/etcdserverpb.Watch/Watch",
    "lease/grant": "/etcdserverpb.Lease/LeaseGrant",
    "lease/revoke": "/etcdserverpb.Lease/LeaseRevoke",
    "kv/lease/revoke": "/etcdserverpb.Lease/LeaseRevoke",
    "lease/keepalive": "/etcdserverpb.Lease/LeaseKeepAlive",
    "lease/timetolive": "/etcdserverpb.Lease/LeaseTimeToLive",
    "kv/lease/timetolive": "/etcdserverpb.Lease/LeaseTimeToLive",
    "lease/leases": "/etcdserverpb.Lease/LeaseLeases",
    "kv/lease/leases": "/etcdserverpb.Lease/LeaseLeases",
    "cluster/member/add": "/etcdserverpb.Cluster/MemberAdd",
    "cluster/member/remove": "/etcdserverpb.Cluster/MemberRemove",
    "cluster/member/update": "/etcdserverpb.Cluster/MemberUpdate",
    "cluster/member/list": "/etcdserverpb.Cluster/MemberList",
    "maintenance/alarm": "/etcdserverpb.Maintenance/Alarm",
    "maintenance/status": "/etcdserverpb.Maintenance/Status",
    "maintenance/defragment": "/etcdserverpb.Maintenance/Defragment",
    "maintenance/hash": "/etcdserverpb.Maintenance/Hash",
    "maintenance/snapshot": "/etcdserverpb.Maintenance/Snapshot",
    "maintenance/transfer-leadership": "/etcdserverpb.Maintenance/MoveLeader",
    "auth/enable": "/etcdserverpb.Auth/AuthEnable",
    "auth/disable": "/etcdserverpb.Auth/AuthDisable",
    "auth/authenticate": "/etcdserverpb.Auth/Authenticate",
    "auth/user/add": "/etcdserverpb.Auth/UserAdd",
    "auth/user/get": "/etcdserverpb.Auth/UserGet",
    "auth/user/list": "/etcdserverpb.Auth/UserList",
    "auth/user/delete": "/etcdserverpb.Auth/UserDelete",
    "auth/user/changepw": "/etcdserverpb.Auth/UserChangePassword",
    "auth/user/grant": "/etcdserverpb.Auth/UserGrantRole",
    "auth/user/revoke": "/etcdserverpb.Auth/UserRevokeRole",
    "auth/role/add": "/etcdserverpb.Auth/RoleAdd",
    "auth/role/get": "/etcdserverpb.Auth/RoleGet",
    "auth/role/list": "/etcdserverpb.Auth/RoleList",
    "auth/role/delete": "/etcdserverpb.Auth/RoleDelete",
    "auth/role/grant": "/etcdserverpb.Auth/RoleGrantPermission",
    "auth/role/revoke": "/etcdserverpb.Auth/RoleRevokePermission",
    "lock/lock": "/v3lockpb.Lock/Lock",
    "lock/unlock": "/v3lockpb.Lock/Unlock",
    "election/campaign": "/v3electionpb.Election/Campaign",
    "election/proclaim": "/v3electionpb.Election/Proclaim",
    "election/leader": "/v3electionpb.Election/Leader",
    "election/observe": "/v3electionpb.Election/Observe",
    "election/resign": "/v3electionpb.Election/Resign",
}

#: grpc-gateway's CORS-free default headers as etcd 3.4 sends them on every answer.
_COMMON_HEADERS = (
    b"Access-Control-Allow-Headers: accept, content-type, authorization\r\n"
    b"Access-Control-Allow-Methods: POST, GET, OPTIONS, PUT, DELETE\r\n"
    b"Access-Control-Allow-Origin: *\r\n"
)


@dataclass(frozen=True)
class Method:
    """One gRPC method as the gateway calls it."""

    path: str
    request: type[Message]
    response: type[Message]
    client_streaming: bool
    server_streaming: bool


def method_of(grpc_path: str) -> Method:
    """The request and response classes of ``/package.Service/Method``."""
    service, _, name = grpc_path.lstrip("/").rpartition("/")
    package, _, service_name = service.rpartition(".")
    desc = _SERVICES[package].services_by_name[service_name].methods_by_name[name]
    return Method(
        grpc_path,
        message_factory.GetMessageClass(desc.input_type),
        message_factory.GetMessageClass(desc.output_type),
        desc.client_streaming,
        desc.server_streaming,
    )


METHODS: dict[str, Method] = {route: method_of(path) for route, path in ROUTES.items()}


class BadRequest(Exception):
    """A body that is not the method's request in JSON (etcd: code 3, HTTP 400)."""


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "bool"}


def decode(body: bytes, cls: type[Message], many: bool = False) -> list[Message]:
    """The request message(s) in ``body``: one JSON object (trailing data ignored, as
    grpc-gateway's decoder does), or with ``many`` every object in turn. An empty body is
    the empty message. Raises :class:`BadRequest` naming what is wrong."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"invalid UTF-8 in the request body at byte {exc.start}") from None
    decoder = json.JSONDecoder()
    out: list[Message] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos == len(text):
            break
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"invalid JSON: {exc}") from None
        if value is None:
            value = {}  # Go reads null as the empty message
        if not isinstance(value, dict):  # Go's words (grpc-gateway decodes into a map first)
            kind = _JSON_KINDS.get(type(value), "value")
            raise BadRequest(
                f"json: cannot unmarshal {kind} into Go value of type map[string]json.RawMessage"
            )
        check_base64(value, cls.DESCRIPTOR)
        message = cls()
        try:
            json_format.ParseDict(value, message, ignore_unknown_fields=True)
        except (json_format.ParseError, ValueError, TypeError) as exc:
            raise BadRequest(str(exc)) from None
        out.append(message)
        if not many:
            break
    return out or [cls()]


_BASE64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def check_base64(value: dict[str, Any], descriptor: Descriptor) -> None:
    """Raise :class:`BadRequest` as Go does (``illegal base64 data at input byte N``) for a
    bytes field that is not standard, padded base64: protobuf's Python parser would skip
    the characters it does not know and read ``"@@"`` as an empty key."""
    for name, item in value.items():
        field = descriptor.fields_by_name.get(name) or _by_json_name(descriptor, name)
        if field is None or item is None:
            continue
        items = item if isinstance(item, list) else [item]
        if field.type == FieldDescriptor.TYPE_BYTES:
            for text in items:
                if isinstance(text, str):
                    _strict_base64(text)
        elif (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and not field.message_type.GetOptions().map_entry
        ):
            for sub in items:
                if isinstance(sub, dict):
                    check_base64(sub, field.message_type)


def _by_json_name(descriptor: Descriptor, name: str) -> FieldDescriptor | None:
    for field in descriptor.fields:
        if field.json_name == name:
            return field
    return None


def _strict_base64(text: str) -> None:
    raw = text.encode("utf-8", errors="replace")
    body = raw.rstrip(b"=")
    pads = len(raw) - len(body)
    for i, byte in enumerate(body):
        if byte not in _BASE64:
            raise BadRequest(f"illegal base64 data at input byte {i}")
    if len(raw) % 4 or pads > 2:  # where Go's decoder stops: the short quantum, or the end
        raise BadRequest(
            f"illegal base64 data at input byte {len(raw) if pads else len(raw) // 4 * 4}"
        )
    try:
        binascii.a2b_base64(raw, strict_mode=True)
    except binascii.Error:
        raise BadRequest(f"illegal base64 data at input byte {len(body)}") from None


def encode(message: Message) -> bytes:
    """``message`` as etcd's gateway writes it (proto field names, int64 as strings,
    defaults left out, compact)."""
    as_dict = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return json.dumps(as_dict, separators=(",", ":"), ensure_ascii=False).encode()


def error_body(code: grpc.StatusCode, message: str) -> bytes:
    """grpc-gateway's error answer (``runtime.DefaultHTTPError``)."""
    number = code.value[0]
    return json.dumps(
        {"error": message, "message": message, "code": number},
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


def stream_error(code: grpc.StatusCode, message: str) -> bytes:
    """grpc-gateway's error chunk in a stream (``streamChunk``)."""
    http_code, http_text = HTTP_STATUS.get(code, (500, "Internal Server Error"))
    chunk = {
        "error": {
            "grpc_code": code.value[0],
            "http_code": http_code,
            "message": message,
            "http_status": http_text,
        }
    }
    return json.dumps(chunk, separators=(",", ":"), ensure_ascii=False).encode()


class GatewayAbort(grpc.aio.AbortError):  # type: ignore[misc]
    """A handler's ``context.abort`` on a gateway call: carries the status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class GatewayContext:
    """The servicer context of a gateway call: the ``Authorization`` header is the call's
    ``token`` metadata (etcd reads either; its gateway forwards the header), and
    :meth:`abort` raises :class:`GatewayAbort`."""

    def __init__(self, headers: Mapping[str, str], peer: str = "") -> None:
        token = headers.get("authorization")
        self._metadata: tuple[tuple[str, str], ...] = (("token", token),) if token else ()
        self._peer = peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}  # a certificate's name is not a gateway caller's identity

    def time_remaining(self) -> float | None:
        return None

    def cancelled(self) -> bool:
        return False

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: Any) -> None:
        raise GatewayAbort(code, details)


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
        if not streaming:
            await self._unary(handler, method, messages[0], context, writer)
            return
        responses = _responses(handler, method, messages, context)
        await _stream(responses, method, reader, writer)

    async def _unary(
        self,
        handler: grpc.RpcMethodHandler,
        method: Method,
        request: Message,
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


async def _requests(messages: list[Message]) -> AsyncIterator[Message]:
    for message in messages:
        yield message


def _responses(
    handler: grpc.RpcMethodHandler,
    method: Method,
    messages: list[Message],
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
