"""Requests that cannot be decoded, and methods no servicer implements, as clean statuses.

gRPC decodes a request with the method's ``request_deserializer`` before any handler
runs. A payload that is not the method's message (garbage, or nested past protobuf's
depth limit) raises ``DecodeError`` there; grpc.aio then answers UNKNOWN with the Python
text and logs a traceback at ERROR, once per call: a client's mistake written up as a
server error. The generated servicer base classes answer a method nobody implemented by
raising ``NotImplementedError``, which grpc.aio logs at ERROR too.

:func:`guard_handler` wraps a method handler so that

- the deserializer never raises: it hands back an :class:`Undecodable` in place of the
  message, and the wrapped behaviour answers INVALID_ARGUMENT
  ``request: cannot decode <message>`` (or "request is too large", past the node's
  ``max_request_bytes``, not decoded at all; on a stream: at the first bad message, through
  :class:`nameserver.errors.UndecodableRequest`, which the handler may turn into its status
  like any :class:`~nameserver.errors.InvalidArgument`);
- a ``NotImplementedError`` from a generated default answers UNIMPLEMENTED naming the
  method;
- a decoded request keeps no unknown fields (nothing the server does not know reaches
  the log);

- with an ``authorize`` hook (auth, :meth:`nameserver.auth.check.Authorizer.check`), the
  hook sees every decoded request (each message of a request stream) with the call's
  metadata before the behaviour does, and a refusal it raises (a ``Rejected``) is answered
  with its status; the hook returns at once while auth is off;

both logged at DEBUG only and counted (``metaledger_requests_rejected_total``). ``nameserver.server.MethodTable`` guards every handler it serves,
so the extra accepts of :mod:`nameserver.grpc.accept` (which take their handlers from the
table) serve guarded handlers too.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from nameserver.errors import Rejected, UndecodableRequest
from nameserver.grpc.status import to_status
from nameserver.metrics import REJECTIONS

log = logging.getLogger(__name__)

_LENIENT = "_metaledger_lenient"  # marks a deserializer made by lenient()

#: protobuf's (upb's) nesting limit for a message being decoded
PROTOBUF_MAX_DEPTH = 100

#: The auth hook: (method path, decoded request, the call's context) -> None, or raises
#: a ``Rejected`` (permission denied, invalid token, ...) answered with its status. It reads
#: the context's metadata only when auth is on: with auth off a call costs one check.
Authorize = Callable[[str, Any, Any], None]


class Undecodable:
    """What a guarded deserializer returns for bytes that are not the method's message (or
    are more than the node takes): why, as the client will read it."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def _message_name(deserializer: Callable[[bytes], Any] | None, path: str) -> str:
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    name = getattr(descriptor, "full_name", None)
    return name if isinstance(name, str) else f"the request of {path}"


def lenient(
    deserializer: Callable[[bytes], Any], path: str, max_request_bytes: int | None = None
) -> Callable[[bytes], Any]:
    """``deserializer`` that returns an :class:`Undecodable` where it would raise, and for
    a payload over ``max_request_bytes`` without decoding it (etcd's limit on any request:
    its gRPC server receives no more; ours receives more, to answer with this message)."""
    name = _message_name(deserializer, path)

    def parse(data: bytes) -> Any:
        if max_request_bytes is not None and len(data) > max_request_bytes:
            return Undecodable(
                f"etcdserver: request is too large: {len(data)} bytes > limit "
                f"max_request_bytes={max_request_bytes}"
            )
        try:
            message = deserializer(data)
            # Fields this server does not know are not kept: a handler that proposes the
            # request as it came would write them to the log, where one more level of
            # nesting (the entry's) can make data that decoded here fail to decode at
            # apply (an unknown group nested 100 deep), on every node.
            discard = getattr(message, "DiscardUnknownFields", None)
            if discard is not None:
                discard()
            return message
        except Exception as exc:  # DecodeError above all; never let it reach gRPC
            why = str(exc)
            if "MaxDepth" in why or "depth" in why.lower():
                detail = f"messages nested deeper than protobuf's limit ({PROTOBUF_MAX_DEPTH})"
            else:
                detail = "the payload is not a valid protobuf message of this type"
            return Undecodable(f"request: cannot decode {name}: {detail} ({len(data)} bytes)")

    setattr(parse, _LENIENT, True)
    return parse


async def _refuse(context: grpc.aio.ServicerContext, path: str, message: str) -> None:
    REJECTIONS.count("grpc", grpc.StatusCode.INVALID_ARGUMENT.name, UndecodableRequest.__name__)
    log.debug("%s: %s", path, message)
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)


async def _unimplemented(context: grpc.aio.ServicerContext, path: str) -> None:
    REJECTIONS.count("grpc", grpc.StatusCode.UNIMPLEMENTED.name, "NotImplementedError")
    log.debug("%s: not implemented", path)
    await context.abort(
        grpc.StatusCode.UNIMPLEMENTED, f"metaledger: {path} is not implemented by this server"
    )


class _Requests:
    """A request stream that raises :class:`UndecodableRequest` at the first bad message
    and remembers it (the wrapper answers with it if the handler swallowed the error)."""

    def __init__(
        self,
        requests: AsyncIterator[Any],
        path: str = "",
        authorize: Authorize | None = None,
        context: Any = None,
    ) -> None:
        self._requests = requests
        self.bad: str | None = None
        self.bad_status = grpc.StatusCode.INVALID_ARGUMENT
        self._path, self._authorize, self._context = path, authorize, context

    def __aiter__(self) -> _Requests:
        return self

    async def __anext__(self) -> Any:
        if self.bad is not None:
            raise UndecodableRequest(self.bad)
        request = await self._requests.__anext__()
        if type(request) is Undecodable:
            self.bad = request.message
            raise UndecodableRequest(request.message)
        if self._authorize is not None:
            try:
                self._authorize(self._path, request, self._context)
            except Rejected as exc:  # ends the stream as a bad message does, with its status
                self.bad_status, self.bad = to_status(exc)
                raise UndecodableRequest(self.bad) from None
        return request

    # grpc.aio's request iterator also offers read(); handlers here use iteration only


async def _call(behavior: Callable[..., Any], request: Any, context: Any, path: str) -> Any:
    try:
        result = behavior(request, context)
        if inspect.isawaitable(result):
            result = await result
        return result
    except NotImplementedError:
        await _unimplemented(context, path)


def _guard_unary_unary(
    behavior: Callable[..., Any], path: str, authorize: Authorize | None
) -> Callable[..., Any]:
    async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if type(request) is Undecodable:
            await _refuse(context, path, request.message)
        if authorize is not None:
            try:
                authorize(path, request, context)  # no await: auth off costs one call
            except Rejected as exc:
                await _deny(context, path, *to_status(exc))
        return await _call(behavior, request, context, path)

    return unary_unary


def _guard_unary_stream(
    behavior: Callable[..., Any], path: str, authorize: Authorize | None
) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(behavior):

        async def unary_stream_gen(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if type(request) is Undecodable:
                await _refuse(context, path, request.message)
            await _authorized(authorize, path, request, context)
            async for response in behavior(request, context):
                yield response

        return unary_stream_gen

    async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if type(request) is Undecodable:
            await _refuse(context, path, request.message)
        await _authorized(authorize, path, request, context)
        return await _call(behavior, request, context, path)

    return unary_stream


async def _end_stream(requests: _Requests, context: Any, path: str) -> None:
    if requests.bad is None:
        return
    if requests.bad_status != grpc.StatusCode.INVALID_ARGUMENT:  # refused by authorize
        await _deny(context, path, requests.bad_status, requests.bad)
    await _refuse(context, path, requests.bad)  # the handler ended on it without answering


async def _deny(
    context: grpc.aio.ServicerContext, path: str, code: grpc.StatusCode, message: str
) -> None:
    REJECTIONS.count("grpc", code.name, "auth")
    log.debug("%s: %s", path, message)
    await context.abort(code, message)


async def _authorized(
    authorize: Authorize | None, path: str, request: Any, context: grpc.aio.ServicerContext
) -> None:
    if authorize is None:
        return
    try:
        authorize(path, request, context)
    except Rejected as exc:
        code, message = to_status(exc)
        await _deny(context, path, code, message)


def _guard_stream_in(
    behavior: Callable[..., Any], path: str, authorize: Authorize | None
) -> Callable[..., Any]:
    """stream_unary and stream_stream handlers."""
    if inspect.isasyncgenfunction(behavior):

        async def stream_gen(request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
            requests = _Requests(request_iterator, path, authorize, context)
            try:
                async for response in behavior(requests, context):
                    yield response
            except UndecodableRequest:
                pass
            await _end_stream(requests, context, path)

        return stream_gen

    async def stream_call(request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        requests = _Requests(request_iterator, path, authorize, context)
        try:
            result = await _call(behavior, requests, context, path)
        except UndecodableRequest:
            result = None
        await _end_stream(requests, context, path)
        return result

    return stream_call


def guard_handler(
    handler: grpc.RpcMethodHandler,
    path: str,
    max_request_bytes: int | None = None,
    authorize: Authorize | None = None,
) -> grpc.RpcMethodHandler:
    """``handler`` (of method ``path``) with a deserializer that never raises and a
    behaviour that answers undecodable (or, past ``max_request_bytes``, too large)
    requests and unimplemented methods itself, and asks ``authorize`` first."""
    deserializer = handler.request_deserializer
    if deserializer is None or getattr(deserializer, _LENIENT, False):
        return handler  # nothing to decode, or guarded already
    parse = lenient(deserializer, path, max_request_bytes)
    if handler.request_streaming:
        attr = "stream_stream" if handler.response_streaming else "stream_unary"
        wrapped = _guard_stream_in(getattr(handler, attr), path, authorize)
    elif handler.response_streaming:
        attr = "unary_stream"
        wrapped = _guard_unary_stream(handler.unary_stream, path, authorize)
    else:
        attr = "unary_unary"
        wrapped = _guard_unary_unary(handler.unary_unary, path, authorize)
    guarded: grpc.RpcMethodHandler = handler._replace(request_deserializer=parse, **{attr: wrapped})
    return guarded
