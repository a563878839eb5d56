"""The frames between the Go gRPC front and the node's core: a sans-I/O codec.

The front (``front/``, Go) terminates HTTP/2 and hands each call of a hot unary method to
the node over one Unix stream socket; :mod:`nameserver.grpc.front` is the node's side. One
request frame each way per call, all integers little-endian::

    request  (front -> core)              response (core -> front), one per request
    u32 body_len   bytes after this field  u32 body_len
    u32 call_id                            u32 call_id
    u8  method     index into --fast       u8  code      gRPC status code, 0 = OK
    u32 timeout_ms 0 = no deadline         u16 details_len, details (UTF-8)
    u16 metadata_len, metadata             u16 trailers_len, trailers:
    u16 peer_len,  peer                        repeated (u16 klen, key, u16 vlen, value)
    ... payload    the request message     ... payload   the response message (OK only)

:class:`RequestDecoder` and :class:`ResponseDecoder` are fed bytes (``receive_data``) and
hand back complete frames (``next_request`` / ``next_response``, None: more bytes needed);
:func:`encode_response` and :func:`encode_request` write frames. Nothing here does I/O.
Every malformed frame raises :class:`FrontProtocolError`, naming what is wrong: a front
that sends one has a bug, and the core closes the connection.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

__all__ = [
    "MAX_BODY_BYTES",
    "FrontProtocolError",
    "FrontRequest",
    "FrontResponse",
    "RequestDecoder",
    "ResponseDecoder",
    "Trailers",
    "body_limit",
    "encode_request",
    "encode_response",
]


_U16 = struct.Struct("<H")
_LEN = struct.Struct("<I")
#: body_len, call_id, method, timeout_ms, metadata_len
_REQUEST_HEAD = struct.Struct("<IIBIH")
#: body_len, call_id, code, details_len
_RESPONSE_HEAD = struct.Struct("<IIBH")
#: an OK response without trailers: body_len, call_id, code 0, details_len 0, trailers_len 0
_OK_HEAD = struct.Struct("<IIBHH")
_OK_FIXED = 4 + 1 + 2 + 2  # body bytes of an OK response before its payload
_REQUEST_MIN_BODY = 4 + 1 + 4 + 2 + 2
_RESPONSE_MIN_BODY = 4 + 1 + 2 + 2
_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFF_FFFF


def body_limit(max_message_bytes: int) -> int:
    """The largest frame body that carries a message of ``max_message_bytes``."""
    return max_message_bytes + _REQUEST_MIN_BODY + 2 * _U16_MAX


#: A frame body's largest size by default: a 16 MiB message and its other fields.
MAX_BODY_BYTES = body_limit(16 * 1024 * 1024)

#: Trailing metadata: (key, value) pairs; a ``-bin`` key's value is bytes, others str.
Trailers = Sequence[tuple[str, "str | bytes"]]


class FrontProtocolError(ValueError):
    """A frame that breaks the contract (docs: this module's docstring): what is wrong."""


class FrontRequest(NamedTuple):
    call_id: int
    method: int  # index into the front's --fast list
    timeout_ms: int  # 0 = no deadline
    #: the call's metadata as grpc.aio gives it to handlers: etcd's ``token``, our client's
    #: ``x-ml-client-id``/``x-ml-seq`` (the front leaves out the transport's own headers)
    metadata: tuple[tuple[str, str | bytes], ...]
    peer: str
    payload: bytes


class FrontResponse(NamedTuple):
    call_id: int
    code: int
    details: str
    trailers: tuple[tuple[str, str | bytes], ...]
    payload: bytes


class _Buffer:
    """Bytes received and not yet framed; a frame's body once it is whole."""

    __slots__ = ("_data", "_max_body", "_start", "_what")

    def __init__(self, max_body_bytes: int, what: str) -> None:
        self._data = bytearray()
        self._start = 0
        self._max_body = max_body_bytes
        self._what = what

    def add(self, data: bytes | bytearray | memoryview) -> None:
        if self._start and self._start >= len(self._data) // 2:
            del self._data[: self._start]  # drop what was framed, now and then
            self._start = 0
        self._data += data

    def frame(self, min_body: int) -> tuple[bytearray, int, int] | None:
        """(buffer, start, end) of the next whole frame's body, or None; the frame is
        consumed."""
        data, start = self._data, self._start
        if len(data) - start < 4:
            return None
        (size,) = _LEN.unpack_from(data, start)
        if size < min_body:
            raise FrontProtocolError(
                f"{self._what} frame: body of {size} bytes, shorter than its "
                f"{min_body} bytes of fixed fields"
            )
        if size > self._max_body:
            raise FrontProtocolError(
                f"{self._what} frame: body of {size} bytes, over the limit of {self._max_body}"
            )
        end = start + 4 + size
        if len(data) < end:
            return None
        self._start = end
        if end == len(data):  # all framed: start afresh (the usual case)
            self._data = bytearray()
            self._start = 0
        return data, start, end

    @property
    def pending(self) -> int:
        """Bytes received and not framed yet."""
        return len(self._data) - self._start


def _text(data: bytearray, start: int, end: int, what: str) -> str:
    try:
        return data[start:end].decode()
    except UnicodeDecodeError as exc:
        raise FrontProtocolError(f"{what}: not UTF-8 ({exc.reason})") from None


class RequestDecoder:
    """Request frames from the bytes the front sends (the core's side)."""

    def __init__(self, methods: int, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self._methods = methods  # how many --fast methods: a larger index is an error
        self._buffer = _Buffer(max_body_bytes, "request")

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._buffer.add(data)

    @property
    def pending(self) -> int:
        return self._buffer.pending

    def next_request(self) -> FrontRequest | None:
        """The next whole request, or None until more bytes arrive."""
        found = self._buffer.frame(_REQUEST_MIN_BODY)
        if found is None:
            return None
        data, start, end = found
        _, call_id, method, timeout_ms, metadata_len = _REQUEST_HEAD.unpack_from(data, start)
        if method >= self._methods:
            raise FrontProtocolError(
                f"request {call_id}: method index {method}, the front was given "
                f"{self._methods} methods"
            )
        pos = start + _REQUEST_HEAD.size
        peer_at = pos + metadata_len
        if peer_at + 2 > end:
            raise FrontProtocolError(
                f"request {call_id}: metadata of {metadata_len} bytes runs past the frame"
            )
        metadata = (
            _pairs(data, pos, peer_at, f"request {call_id}: metadata") if metadata_len else ()
        )
        (peer_len,) = _U16.unpack_from(data, peer_at)
        payload_at = peer_at + 2 + peer_len
        if payload_at > end:
            raise FrontProtocolError(
                f"request {call_id}: peer of {peer_len} bytes runs past the frame"
            )
        peer = _text(data, peer_at + 2, payload_at, f"request {call_id}: peer")
        payload = bytes(data[payload_at:end])
        return FrontRequest(call_id, method, timeout_ms, metadata, peer, payload)

    def __iter__(self) -> Iterator[FrontRequest]:
        """Every whole request received so far."""
        while (request := self.next_request()) is not None:
            yield request


def _encode_pairs(pairs: Trailers, what: str = "trailer") -> bytes:
    parts: list[bytes] = []
    for key, value in pairs:
        k = key.encode()
        v = value if isinstance(value, bytes) else value.encode()
        if len(k) > _U16_MAX or len(v) > _U16_MAX:
            raise FrontProtocolError(f"{what} {key!r}: key or value over {_U16_MAX} bytes")
        parts += (_U16.pack(len(k)), k, _U16.pack(len(v)), v)
    return b"".join(parts)


def _pairs(data: bytearray, pos: int, end: int, what: str) -> tuple[tuple[str, str | bytes], ...]:
    """Metadata or trailers: (u16 klen, key, u16 vlen, value) pairs from ``pos`` to ``end``;
    a ``-bin`` key's value stays bytes, others are text."""
    out: list[tuple[str, str | bytes]] = []
    while pos < end:
        raw: list[bytes] = []
        for part in ("key", "value"):
            if pos + 2 > end:
                raise FrontProtocolError(f"{what}: a {part} is cut")
            (n,) = _U16.unpack_from(data, pos)
            if pos + 2 + n > end:
                raise FrontProtocolError(f"{what}: a {part} is cut")
            raw.append(bytes(data[pos + 2 : pos + 2 + n]))
            pos += 2 + n
        try:
            key = raw[0].decode()
        except UnicodeDecodeError as exc:
            raise FrontProtocolError(f"{what}: a key is not UTF-8 ({exc.reason})") from None
        out.append((key, raw[1] if key.endswith("-bin") else raw[1].decode(errors="replace")))
    return tuple(out)


def encode_response(
    call_id: int,
    code: int = 0,
    details: str = "",
    trailers: Trailers = (),
    payload: bytes = b"",
) -> bytes:
    """One response frame (``payload`` is sent only when ``code`` is 0, OK)."""
    if not code and not details and not trailers:  # the hot path: one struct, one join
        return _OK_HEAD.pack(_OK_FIXED + len(payload), call_id, 0, 0, 0) + payload
    raw_details = details.encode()
    if len(raw_details) > _U16_MAX:
        raw_details = raw_details[:_U16_MAX].decode(errors="ignore").encode()
    raw_trailers = _encode_pairs(trailers)
    if len(raw_trailers) > _U16_MAX:
        raise FrontProtocolError(f"trailers of {len(raw_trailers)} bytes, over {_U16_MAX}")
    if code:
        payload = b""
    size = _RESPONSE_MIN_BODY + len(raw_details) + len(raw_trailers) + len(payload)
    return b"".join(
        (
            _RESPONSE_HEAD.pack(size, call_id, code, len(raw_details)),
            raw_details,
            _U16.pack(len(raw_trailers)),
            raw_trailers,
            payload,
        )
    )


def encode_request(
    call_id: int,
    method: int,
    payload: bytes,
    timeout_ms: int = 0,
    metadata: Trailers = (),
    peer: str = "",
) -> bytes:
    """One request frame (what the front writes; tests and tools use it)."""
    raw_metadata, raw_peer = _encode_pairs(metadata, "metadata"), peer.encode()
    if len(raw_metadata) > _U16_MAX or len(raw_peer) > _U16_MAX:
        raise FrontProtocolError(f"metadata or peer over {_U16_MAX} bytes")
    if not 0 <= method <= 0xFF or not 0 <= timeout_ms <= _U32_MAX or not 0 <= call_id <= _U32_MAX:
        raise FrontProtocolError("call_id, method or timeout_ms out of range")
    size = _REQUEST_MIN_BODY + len(raw_metadata) + len(raw_peer) + len(payload)
    return b"".join(
        (
            _REQUEST_HEAD.pack(size, call_id, method, timeout_ms, len(raw_metadata)),
            raw_metadata,
            _U16.pack(len(raw_peer)),
            raw_peer,
            payload,
        )
    )


class ResponseDecoder:
    """Response frames from the bytes the core sends (the front's side: tests, tools)."""

    def __init__(self, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self._buffer = _Buffer(max_body_bytes, "response")

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._buffer.add(data)

    def next_response(self) -> FrontResponse | None:
        found = self._buffer.frame(_RESPONSE_MIN_BODY)
        if found is None:
            return None
        data, start, end = found
        _, call_id, code, details_len = _RESPONSE_HEAD.unpack_from(data, start)
        pos = start + _RESPONSE_HEAD.size
        if pos + details_len + 2 > end:
            raise FrontProtocolError(f"response {call_id}: details run past the frame")
        details = _text(data, pos, pos + details_len, f"response {call_id}: details")
        pos += details_len
        (trailers_len,) = _U16.unpack_from(data, pos)
        pos += 2
        trailers_end = pos + trailers_len
        if trailers_end > end:
            raise FrontProtocolError(f"response {call_id}: trailers run past the frame")
        trailers = _pairs(data, pos, trailers_end, f"response {call_id}: trailers")
        payload = bytes(data[trailers_end:end])
        if code and payload:
            raise FrontProtocolError(f"response {call_id}: code {code} with a payload")
        return FrontResponse(call_id, code, details, trailers, payload)

    def __iter__(self) -> Iterator[FrontResponse]:
        while (response := self.next_response()) is not None:
            yield response
