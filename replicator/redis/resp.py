"""Sans-I/O RESP2 and RESP3 parser, and the command encoder: bytes in, values out, no sockets.

The wire format (redis.io "Redis serialization protocol specification"; RESP3 spec
``antirez/RESP3/spec.md``): every item starts with a type byte and ends in CRLF::

    +OK\\r\\n               simple string          -> SimpleString(b"OK")  (a bytes subclass)
    -ERR bad\\r\\n          error                  -> RespError(b"ERR bad")
    :42\\r\\n               integer                -> 42
    $3\\r\\nfoo\\r\\n        bulk string            -> b"foo"      ($-1: None)
    *2\\r\\n...             array                  -> [...]       (*-1: None)
    _\\r\\n                 RESP3 null             -> None
    #t\\r\\n                RESP3 boolean          -> True
    ,1.5\\r\\n              RESP3 double           -> 1.5          (inf, -inf, nan too)
    (3492890328409238509324850943850943825024385\\r\\n   big number -> int
    !21\\r\\nSYNTAX invalid syntax\\r\\n   blob error  -> RespError(...)
    =15\\r\\ntxt:Some string\\r\\n     verbatim    -> Verbatim(b"txt", b"Some string")
    %2\\r\\n k v k v          map                    -> RespMap([(k, v), (k, v)])
    ~2\\r\\n ...              set                    -> RespSet([...])
    >2\\r\\n ...              push                   -> Push([...])
    |1\\r\\n k v <value>      attribute              -> Attributed(RespMap([(k, v)]), value)

The parser is resumable (h11 style): ``feed(data)`` then ``next_item()`` until
:data:`NEED_DATA`. Aggregates are built on an explicit stack, so a huge array arriving in many
chunks is parsed once, never re-scanned. It is bounded: a bulk string longer than
``max_bulk_bytes``, an aggregate longer than ``max_aggregate_len``, nesting deeper than
``max_depth`` or a header line longer than ``max_line_bytes`` raises ``ProtocolError`` naming
the limit. ``consumed`` counts the bytes of every complete top-level item returned so far:
the replication offset is built on it (every byte of the stream counts).

After a ``ProtocolError`` the parser stays broken (every later call raises the same error):
nothing after a bad item can be trusted to start on an item boundary.

This module imports neither ``socket`` nor ``asyncio`` (``tests/unit/replicator/redis/
test_resp.py`` checks it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from replicator.redis.errors import ProtocolError

MAX_BULK_BYTES: Final = 512 * 1024 * 1024
"""Redis's ``proto-max-bulk-len`` default (``config.c``)."""
MAX_AGGREGATE_LEN: Final = 2**31 - 1
"""Redis accepts a multibulk length up to INT_MAX from its master (``processMultibulkBuffer``);
memory stays proportional to bytes received, since nothing is allocated ahead of the items."""
MAX_DEPTH: Final = 32
MAX_LINE_BYTES: Final = 64 * 1024
"""Redis's ``PROTO_INLINE_MAX_SIZE``: no header line (type byte, length, CRLF) is longer."""


class SimpleString(bytes):
    """A ``+`` reply; equal to the same bytes, but tells a status line from a bulk string."""

    def __repr__(self) -> str:
        return f"SimpleString({bytes(self)!r})"


@dataclass(frozen=True, slots=True)
class RespError:
    """A ``-`` or ``!`` reply (a value, not an exception): ``kind`` is its first word."""

    message: bytes

    @property
    def kind(self) -> str:
        return self.message.split(b" ", 1)[0].decode("latin-1")

    def __str__(self) -> str:
        return self.message.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class Verbatim:
    format: bytes
    text: bytes


@dataclass(frozen=True, slots=True)
class RespMap:
    """Pairs in wire order (keys may be aggregates, which a dict cannot hold)."""

    pairs: list[tuple[RespValue, RespValue]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RespSet:
    items: list[RespValue] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Push:
    items: list[RespValue] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Attributed:
    """A value that came after a ``|`` attribute map."""

    attributes: RespMap
    value: RespValue


RespValue: TypeAlias = (
    "bytes | int | float | bool | list[RespValue] | RespError | Verbatim | RespMap"
    " | RespSet | Push | Attributed | None"
)


class NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()
"""``next_item`` found no complete item in the buffer; feed more bytes."""


class _Open:
    """An aggregate was opened (or is still open): no complete value yet."""


_OPEN: Final = _Open()

_INTEGER: Final = re.compile(rb"-?[0-9]{1,19}")
_BIG: Final = re.compile(rb"[-+]?[0-9]+")
_DOUBLE: Final = re.compile(
    rb"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?inf|nan"
)
_AGGREGATES: Final = frozenset(b"*%~>|")
_BULKS: Final = frozenset(b"$!=")


@dataclass(slots=True)
class _Frame:
    kind: int  # type byte; 0 = the value after an attribute map
    remaining: int
    items: list[RespValue]
    attributes: RespMap | None = None


class RespParser:
    """RESP items out of a byte stream (see the module docstring)."""

    def __init__(
        self,
        *,
        max_bulk_bytes: int = MAX_BULK_BYTES,
        max_aggregate_len: int = MAX_AGGREGATE_LEN,
        max_depth: int = MAX_DEPTH,
        max_line_bytes: int = MAX_LINE_BYTES,
        base_offset: int = 0,
    ) -> None:
        self.max_bulk_bytes = max_bulk_bytes
        self.max_aggregate_len = max_aggregate_len
        self.max_depth = max_depth
        self.max_line_bytes = max_line_bytes
        self.base_offset = base_offset
        """Added to every error's ``offset`` (the stream position of this parser's byte 0)."""
        self._buf = bytearray()
        self._pos = 0
        self._dropped = 0  # bytes removed from the front of _buf
        self._stack: list[_Frame] = []
        self._consumed = 0
        self._error: ProtocolError | None = None

    @property
    def consumed(self) -> int:
        """Total bytes of the complete top-level items returned so far."""
        return self._consumed

    @property
    def buffered_bytes(self) -> int:
        """Bytes fed but not yet part of a returned item (a partial item included)."""
        return self._dropped + len(self._buf) - self._consumed

    def feed(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        if self._pos and self._pos > len(self._buf) // 2:
            # Drop parsed bytes once they are most of the buffer: amortised O(1) per byte.
            del self._buf[: self._pos]
            self._dropped += self._pos
            self._pos = 0
        self._buf += data

    def next_item(self) -> RespValue | NeedData:
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except ProtocolError as exc:
            self._error = exc
            raise

    def items(self, data: bytes = b"") -> list[RespValue]:
        """``feed(data)`` and every complete item after it."""
        self.feed(data)
        out: list[RespValue] = []
        while not isinstance(item := self.next_item(), NeedData):
            out.append(item)
        return out

    # --- parsing ----------------------------------------------------------------------

    def _where(self, pos: int) -> int:
        return self.base_offset + self._dropped + pos

    def _next(self) -> RespValue | NeedData:
        if not self._stack:
            command = self._whole_command()
            if command is not None:
                self._consumed = self._dropped + self._pos
                return command
        while True:
            value = self._scalar_or_open()
            if isinstance(value, NeedData):
                return value
            if isinstance(value, _Open):
                continue
            # A complete value: hand it to the innermost open aggregate, closing those
            # it completes; a top-level value is returned.
            done = self._close(value)
            if not isinstance(done, _Open):
                self._consumed = self._dropped + self._pos
                return done

    def _whole_command(self) -> list[RespValue] | None:
        """Fast path for what a replication stream is made of: a complete array of bulk
        strings, all of it in the buffer, within the limits. Anything else (another type,
        a partial item, a limit crossed, a malformed length) returns None and leaves
        ``_pos`` alone, for the general path to parse or to report."""
        buf = self._buf
        pos = self._pos
        if pos >= len(buf) or buf[pos] != 0x2A:
            return None
        end = buf.find(b"\r\n", pos, pos + 24)
        if end < 0 or not _INTEGER.fullmatch(buf, pos + 1, end):
            return None
        count = int(buf[pos + 1 : end])
        if not 0 < count <= self.max_aggregate_len or self.max_depth < 1:
            return None
        pos = end + 2
        argv: list[RespValue] = []
        size = len(buf)
        limit = self.max_bulk_bytes
        for _ in range(count):
            if pos >= size or buf[pos] != 0x24:
                return None
            end = buf.find(b"\r\n", pos, pos + 24)
            if end < 0 or not _INTEGER.fullmatch(buf, pos + 1, end):
                return None
            n = int(buf[pos + 1 : end])
            start = end + 2
            if (
                not 0 <= n <= limit
                or start + n + 2 > size
                or buf[start + n : start + n + 2] != b"\r\n"
            ):
                return None
            argv.append(bytes(buf[start : start + n]))
            pos = start + n + 2
        self._pos = pos
        return argv

    def _close(self, value: RespValue) -> RespValue | _Open:
        while self._stack:
            frame = self._stack[-1]
            frame.items.append(value)
            frame.remaining -= 1
            if frame.remaining > 0:
                return _OPEN
            self._stack.pop()
            finished = self._finish(frame)
            if isinstance(finished, _Open):
                return finished
            value = finished
        return value

    def _finish(self, frame: _Frame) -> RespValue | _Open:
        items = frame.items
        kind = frame.kind
        if kind == 0x2A:  # *
            return items
        if kind == 0x7E:  # ~
            return RespSet(items)
        if kind == 0x3E:  # >
            return Push(items)
        if kind == 0:  # the value after an attribute map
            assert frame.attributes is not None
            return Attributed(frame.attributes, items[0])
        pairs = RespMap(list(zip(items[::2], items[1::2], strict=True)))
        if kind == 0x25:  # %
            return pairs
        if kind == 0x7C:  # | : the attributed value follows
            self._push(_Frame(0, 1, [], pairs), self._pos)
        return _OPEN

    def _push(self, frame: _Frame, pos: int) -> None:
        if len(self._stack) >= self.max_depth:
            raise ProtocolError(
                f"RESP nesting deeper than max_depth={self.max_depth}", self._where(pos)
            )
        self._stack.append(frame)

    def _line(self) -> tuple[bytes, int] | None:
        """The header line at ``_pos`` (type byte included, CRLF excluded) and the position
        after its CRLF, or None when it is not all here yet."""
        end = self._buf.find(b"\r\n", self._pos, self._pos + self.max_line_bytes + 2)
        if end < 0:
            if len(self._buf) - self._pos > self.max_line_bytes + 1:
                raise ProtocolError(
                    f"RESP line longer than max_line_bytes={self.max_line_bytes}",
                    self._where(self._pos),
                )
            return None
        return bytes(self._buf[self._pos : end]), end + 2

    def _scalar_or_open(self) -> RespValue | NeedData | _Open:
        if self._pos >= len(self._buf):
            return NEED_DATA
        kind = self._buf[self._pos]
        if kind not in _TYPES:
            raise ProtocolError(
                f"RESP type byte {bytes([kind])!r} is none of {_TYPE_LIST}", self._where(self._pos)
            )
        got = self._line()
        if got is None:
            return NEED_DATA
        line, after = got
        start = self._pos
        body = line[1:]
        if kind in _BULKS:
            return self._bulk(kind, body, start, after)
        if kind in _AGGREGATES:
            return self._open(kind, body, start, after)
        value = self._simple(kind, body, start)
        self._pos = after
        return value

    def _length(self, body: bytes, start: int, what: str, allow_null: bool) -> int:
        if not _INTEGER.fullmatch(body):
            raise ProtocolError(
                f"RESP {what} length {body[:40]!r} is not an integer", self._where(start)
            )
        n = int(body)
        if n < -1 or (n == -1 and not allow_null):
            raise ProtocolError(f"RESP {what} length {n} is negative", self._where(start))
        return n

    def _bulk(self, kind: int, body: bytes, start: int, after: int) -> RespValue | NeedData:
        what = {0x24: "bulk string", 0x21: "blob error", 0x3D: "verbatim string"}[kind]
        n = self._length(body, start, what, allow_null=kind == 0x24)
        if n == -1:
            self._pos = after
            return None
        if n > self.max_bulk_bytes:
            raise ProtocolError(
                f"RESP {what} of {n} bytes exceeds max_bulk_bytes={self.max_bulk_bytes}",
                self._where(start),
            )
        if len(self._buf) < after + n + 2:
            return NEED_DATA
        if self._buf[after + n : after + n + 2] != b"\r\n":
            raise ProtocolError(
                f"RESP {what} of {n} bytes is not followed by CRLF", self._where(after + n)
            )
        data = bytes(self._buf[after : after + n])
        self._pos = after + n + 2
        if kind == 0x24:
            return data
        if kind == 0x21:
            return RespError(data)
        if len(data) < 4 or data[3:4] != b":":
            raise ProtocolError("RESP verbatim string lacks its 'fmt:' prefix", self._where(after))
        return Verbatim(data[:3], data[4:])

    def _open(self, kind: int, body: bytes, start: int, after: int) -> RespValue | _Open:
        what = {0x2A: "array", 0x25: "map", 0x7E: "set", 0x3E: "push", 0x7C: "attribute"}[kind]
        n = self._length(body, start, what, allow_null=kind == 0x2A)
        if n > self.max_aggregate_len:
            raise ProtocolError(
                f"RESP {what} of {n} elements exceeds max_aggregate_len={self.max_aggregate_len}",
                self._where(start),
            )
        self._pos = after
        if n == -1:
            return None
        count = 2 * n if kind in (0x25, 0x7C) else n
        frame = _Frame(kind, count, [])
        if count == 0:
            return self._finish(frame)
        self._push(frame, start)
        return _OPEN

    def _simple(self, kind: int, body: bytes, start: int) -> RespValue:
        if kind == 0x2B:  # +
            return SimpleString(body)
        if kind == 0x2D:  # -
            return RespError(body)
        if kind == 0x3A:  # :
            if not _INTEGER.fullmatch(body):
                raise ProtocolError(
                    f"RESP integer {body[:40]!r} is not an integer", self._where(start)
                )
            return int(body)
        if kind == 0x5F:  # _
            if body:
                raise ProtocolError(f"RESP null carries {body[:40]!r}", self._where(start))
            return None
        if kind == 0x23:  # #
            if body not in (b"t", b"f"):
                raise ProtocolError(
                    f"RESP boolean {body[:40]!r} is neither t nor f", self._where(start)
                )
            return body == b"t"
        if kind == 0x2C:  # ,
            if not _DOUBLE.fullmatch(body):
                raise ProtocolError(f"RESP double {body[:40]!r} does not parse", self._where(start))
            return float(body)
        # ( big number
        if not _BIG.fullmatch(body):
            raise ProtocolError(f"RESP big number {body[:40]!r} does not parse", self._where(start))
        try:
            return int(body)
        except ValueError:  # more digits than Python converts (4,300)
            raise ProtocolError("RESP big number has too many digits", self._where(start)) from None


_TYPES: Final = frozenset(b"+-:$*_#,(!=%~>|")
_TYPE_LIST: Final = "+ - : $ * _ # , ( ! = % ~ > |"


def encode_command(argv: Sequence[bytes]) -> bytes:
    """A command as the master and clients send it: an array of bulk strings."""
    parts = [b"*%d\r\n" % len(argv)]
    for arg in argv:
        parts.append(b"$%d\r\n" % len(arg))
        parts.append(arg)
        parts.append(b"\r\n")
    return b"".join(parts)
