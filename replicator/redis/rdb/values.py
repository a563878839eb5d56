"""Readers of RDB values: the length/string primitives and one reader per object type.

Every function here reads from ``buf`` (the parser's buffer) at ``p`` and returns the new
position; ``base`` is the RDB offset of ``buf[0]``, used only to name offsets in errors. When
``buf`` ends too soon they raise :class:`Short` with the position they need to reach, having
changed nothing: a reader commits its state only after a whole unit was read (parser.py).

Types (Redis 7.0's ``rdb.h``): 0 string; 1 list, 2 set, 3 zset (string scores),
4 hash, 5 zset2 (binary scores) as hashtables; 9 zipmap, 10 list ziplist, 11 intset,
12 zset ziplist, 13 hash ziplist, 14 quicklist of ziplists, 16 hash listpack, 17 zset
listpack, 18 quicklist 2, 20 set listpack (7.2 writes it, 7.0 does not; the layout is the
same listpack); 6/7 module values (refused, module named). Streams (15, 19, 21) are read by
streams.py, which builds on this module: the parser asks it for those types
(:data:`~replicator.redis.rdb.streams.STREAM_TYPES`), and :func:`reader_for` for the rest.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Final, cast

from replicator.redis.errors import RdbError, RdbUnsupportedError
from replicator.redis.rdb import encodings
from replicator.redis.rdb.events import (
    Event,
    HashFields,
    ListItems,
    SetMembers,
    ZSetMembers,
)

TYPE_STRING: Final = 0
MODULE_OPCODE_UINT: Final = 2
MAX_BLOB_BYTES: Final = 1 << 32
"""A longer string is taken as corruption rather than waited for (Redis's limit is 512 MB)."""
BATCH_ITEMS: Final = 512
BATCH_BYTES: Final = 1 << 20

_BE32: Final = struct.Struct(">I")
_BE64: Final = struct.Struct(">Q")


MODULE_CHARSET: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def module_name(module_id: int) -> str:
    """The 9-character name packed in a 64-bit module id (``moduleTypeNameByID``)."""
    return "".join(MODULE_CHARSET[(module_id >> (10 + 6 * (8 - i))) & 63] for i in range(9))


class Short(Exception):
    """The unit needs ``need`` bytes of the buffer (an absolute buffer position)."""

    def __init__(self, need: int) -> None:
        self.need = need


def read_len_or_encoding(buf: bytes, p: int, base: int) -> tuple[int, bool, int]:
    """``rdbLoadLenByRef``: (length, is-special-encoding, new position)."""
    n = len(buf)
    if p >= n:
        raise Short(p + 1)
    b = buf[p]
    t = b >> 6
    if t == 0:
        return b & 0x3F, False, p + 1
    if t == 1:
        if p + 2 > n:
            raise Short(p + 2)
        return ((b & 0x3F) << 8) | buf[p + 1], False, p + 2
    if t == 3:
        return b & 0x3F, True, p + 1
    if b == 0x80:
        if p + 5 > n:
            raise Short(p + 5)
        return _BE32.unpack_from(buf, p + 1)[0], False, p + 5
    if b == 0x81:
        if p + 9 > n:
            raise Short(p + 9)
        return _BE64.unpack_from(buf, p + 1)[0], False, p + 9
    raise RdbError(f"length with first byte 0x{b:02x}", base + p)


def read_len(buf: bytes, p: int, base: int) -> tuple[int, int]:
    length, encoded, q = read_len_or_encoding(buf, p, base)
    if encoded:
        raise RdbError("a string encoding where a length belongs", base + p)
    return length, q


def read_string(buf: bytes, p: int, base: int) -> tuple[bytes, int]:
    """``rdbGenericLoadStringObject``: raw, int-encoded (as decimal ASCII) or LZF."""
    if p < len(buf) and buf[p] < 0x40:  # the common case: a raw string under 64 bytes
        end = p + 1 + buf[p]
        if end > len(buf):
            raise Short(end)
        return buf[p + 1 : end], end
    length, encoded, q = read_len_or_encoding(buf, p, base)
    if encoded:
        if length == 0:
            if q + 1 > len(buf):
                raise Short(q + 1)
            v = buf[q]
            return b"%d" % (v - 256 if v > 127 else v), q + 1
        if length == 1:
            if q + 2 > len(buf):
                raise Short(q + 2)
            return b"%d" % struct.unpack_from("<h", buf, q)[0], q + 2
        if length == 2:
            if q + 4 > len(buf):
                raise Short(q + 4)
            return b"%d" % struct.unpack_from("<i", buf, q)[0], q + 4
        if length == 3:
            clen, q = read_len(buf, q, base)
            ulen, q = read_len(buf, q, base)
            if clen > MAX_BLOB_BYTES or ulen > MAX_BLOB_BYTES:
                raise RdbError(f"LZF string of {clen} -> {ulen} bytes", base + p)
            if q + clen > len(buf):
                raise Short(q + clen)
            return encodings.lzf_decompress(buf[q : q + clen], ulen, base + p), q + clen
        raise RdbError(f"string encoding {length}", base + p)
    if length > MAX_BLOB_BYTES:
        raise RdbError(f"string of {length} bytes", base + p)
    end = q + length
    if end > len(buf):
        raise Short(end)
    return buf[q:end], end


def read_raw(buf: bytes, p: int, n: int) -> tuple[bytes, int]:
    if p + n > len(buf):
        raise Short(p + n)
    return buf[p : p + n], p + n


def read_double_string(buf: bytes, p: int, base: int) -> tuple[float, int]:
    """``rdbLoadDoubleValue`` (type 3 scores): a length byte 253/254/255 = nan/+inf/-inf."""
    if p >= len(buf):
        raise Short(p + 1)
    n = buf[p]
    if n == 253:
        return math.nan, p + 1
    if n == 254:
        return math.inf, p + 1
    if n == 255:
        return -math.inf, p + 1
    text, q = read_raw(buf, p + 1, n)
    return float(text), q


def skip_module_value(buf: bytes, p: int, base: int) -> int:
    """Skip a module value saved with opcodes (``rdbLoadCheckModuleValue``) up to its EOF."""
    while True:
        op, p = read_len(buf, p, base)
        if op == 0:
            return p
        if op in (1, 2):
            _, p = read_len(buf, p, base)
        elif op == 3:
            _, p = read_raw(buf, p, 4)
        elif op == 4:
            _, p = read_raw(buf, p, 8)
        elif op == 5:
            _, p = read_string(buf, p, base)
        else:
            raise RdbError(f"module value opcode {op}", base + p)


def _pairs(items: list[bytes], what: str, offset: int) -> list[tuple[bytes, bytes]]:
    if len(items) % 2:
        raise RdbError(f"{what} with an odd number of entries", offset)
    return list(zip(items[0::2], items[1::2], strict=True))


class ValueReader:
    """Reads one collection value unit by unit; ``step`` returns (position, event, finished).

    The readers are subclasses with methods, not objects holding functions: compiled
    (scripts/mypyc_modules.txt), a method is a native call where a function in an attribute
    goes through Python's calling convention."""

    kind = ""

    def step(self, buf: bytes, p: int, base: int) -> tuple[int, Event | None, bool]:
        raise NotImplementedError


_DOUBLE: Final = struct.Struct("<d")


class Counted(ValueReader):
    """A hashtable-encoded value: a count, then that many elements (``element``), batched
    into events (``make``)."""

    def __init__(self) -> None:
        self._left: int | None = None
        self._batch: list[object] = []
        self._batch_bytes = 0

    def element(self, buf: bytes, p: int, base: int) -> tuple[object, int]:
        raise NotImplementedError

    def make(self, items: list[object]) -> Event:
        raise NotImplementedError

    def step(self, buf: bytes, p: int, base: int) -> tuple[int, Event | None, bool]:
        if self._left is None:
            self._left, p = read_len(buf, p, base)
            return p, None, self._left == 0
        # as many whole elements as the buffer holds, up to a batch; each is committed
        # (position, batch) as soon as it is read, so a Short after the first loses nothing
        batch = self._batch
        left, size = self._left, self._batch_bytes
        read_any = False
        try:
            while left and len(batch) < BATCH_ITEMS and size < BATCH_BYTES:
                item, q = self.element(buf, p, base)
                batch.append(item)
                size += q - p
                p = q
                left -= 1
                read_any = True
        except Short:
            if not read_any:
                raise
            self._left, self._batch_bytes = left, size
            return p, None, False
        self._left = left
        if left and len(batch) < BATCH_ITEMS and size < BATCH_BYTES:
            self._batch_bytes = size
            return p, None, False
        self._batch, self._batch_bytes = [], 0
        return p, self.make(batch), not left


# The element readers inline read_string's common case (a raw string under 64 bytes): the
# calls were a fifth of a hashtable-encoded value's time.


class CountedList(Counted):
    kind = "list"

    def element(self, buf: bytes, p: int, base: int) -> tuple[object, int]:
        if p < len(buf) and buf[p] < 0x40:
            end = p + 1 + buf[p]
            if end > len(buf):
                raise Short(end)
            return buf[p + 1 : end], end
        return read_string(buf, p, base)

    def make(self, items: list[object]) -> Event:
        return ListItems(cast(list[bytes], items))


class CountedSet(CountedList):
    kind = "set"

    def make(self, items: list[object]) -> Event:
        return SetMembers(cast(list[bytes], items))


class CountedHash(Counted):
    kind = "hash"

    def element(self, buf: bytes, p: int, base: int) -> tuple[object, int]:
        n = len(buf)
        if p < n and buf[p] < 0x40:
            q = p + 1 + buf[p]
            if q > n:
                raise Short(q)
            a = buf[p + 1 : q]
        else:
            a, q = read_string(buf, p, base)
        if q < n and buf[q] < 0x40:
            end = q + 1 + buf[q]
            if end > n:
                raise Short(end)
            return (a, buf[q + 1 : end]), end
        b, end = read_string(buf, q, base)
        return (a, b), end

    def make(self, items: list[object]) -> Event:
        return HashFields(cast(list[tuple[bytes, bytes]], items))


class CountedZSetText(Counted):
    """Type 3: scores as text (``rdbLoadDoubleValue``)."""

    kind = "zset"

    def element(self, buf: bytes, p: int, base: int) -> tuple[object, int]:
        a, p = read_string(buf, p, base)
        score, p = read_double_string(buf, p, base)
        return (a, score), p

    def make(self, items: list[object]) -> Event:
        return ZSetMembers(cast(list[tuple[bytes, float]], items))


class CountedZSet(CountedZSetText):
    """Type 5: scores as 8-byte little-endian doubles."""

    def element(self, buf: bytes, p: int, base: int) -> tuple[object, int]:
        a, q = read_string(buf, p, base)
        if q + 8 > len(buf):
            raise Short(q + 8)
        return (a, _DOUBLE.unpack_from(buf, q)[0]), q + 8


class Blob(ValueReader):
    """A value that is one string blob (intset, listpack, ziplist, zipmap), read by
    ``decode``."""

    def decode(self, blob: bytes, offset: int) -> Event:
        raise NotImplementedError

    def step(self, buf: bytes, p: int, base: int) -> tuple[int, Event | None, bool]:
        blob, q = read_string(buf, p, base)
        return q, self.decode(blob, base + p), True


class ZipmapHash(Blob):
    kind = "hash"

    def decode(self, blob: bytes, offset: int) -> Event:
        return HashFields(_pairs(encodings.decode_zipmap(blob, offset), "zipmap", offset))


class ZiplistList(Blob):
    kind = "list"

    def decode(self, blob: bytes, offset: int) -> Event:
        return ListItems(encodings.decode_ziplist(blob, offset))


class IntsetSet(Blob):
    kind = "set"

    def decode(self, blob: bytes, offset: int) -> Event:
        return SetMembers(encodings.decode_intset(blob, offset))


class ZiplistZSet(Blob):
    kind = "zset"

    def decode(self, blob: bytes, offset: int) -> Event:
        return _zset_event(encodings.decode_ziplist(blob, offset), offset)


class ZiplistHash(Blob):
    kind = "hash"

    def decode(self, blob: bytes, offset: int) -> Event:
        return HashFields(_pairs(encodings.decode_ziplist(blob, offset), "hash ziplist", offset))


class ListpackHash(Blob):
    kind = "hash"

    def decode(self, blob: bytes, offset: int) -> Event:
        return HashFields(_pairs(encodings.decode_listpack(blob, offset), "hash listpack", offset))


class ListpackZSet(Blob):
    kind = "zset"

    def decode(self, blob: bytes, offset: int) -> Event:
        return _zset_event(encodings.decode_listpack(blob, offset), offset)


class ListpackSet(Blob):
    kind = "set"

    def decode(self, blob: bytes, offset: int) -> Event:
        return SetMembers(encodings.decode_listpack(blob, offset))


class Quicklist(ValueReader):
    """Type 14: a quicklist whose nodes are ziplists."""

    kind = "list"

    def __init__(self) -> None:
        self._left: int | None = None

    def node(self, buf: bytes, p: int, base: int) -> tuple[list[bytes], int]:
        blob, q = read_string(buf, p, base)
        return encodings.decode_ziplist(blob, base + p), q

    def step(self, buf: bytes, p: int, base: int) -> tuple[int, Event | None, bool]:
        if self._left is None:
            self._left, p = read_len(buf, p, base)
            return p, None, self._left == 0
        items, p = self.node(buf, p, base)
        self._left -= 1
        return p, ListItems(items) if items else None, not self._left


class Quicklist2(Quicklist):
    """Type 18: each node is ``<len container>`` (1 plain, 2 packed listpack), then a string."""

    def node(self, buf: bytes, p: int, base: int) -> tuple[list[bytes], int]:
        container, q = read_len(buf, p, base)
        if container not in (1, 2):
            raise RdbError(f"quicklist node container {container}", base + p)
        blob, q = read_string(buf, q, base)
        if container == 1:
            return [blob], q
        return encodings.decode_listpack(blob, base + p), q


class StringValue(ValueReader):
    """Only names the kind: the parser reads strings itself (they stream in parts)."""

    kind = "string"


class Module(ValueReader):
    kind = "module"

    def step(self, buf: bytes, p: int, base: int) -> tuple[int, Event | None, bool]:
        module_id, _ = read_len(buf, p, base)
        raise RdbUnsupportedError(
            f"a value of module type {module_name(module_id)!r} (module id {module_id:#x}): "
            "module values are opaque without the module",
            base + p,
        )


def _zset_event(items: list[bytes], offset: int) -> Event:
    if len(items) % 2:
        raise RdbError("sorted set with an odd number of entries", offset)
    return ZSetMembers(list(zip(items[0::2], map(float, items[1::2]), strict=True)))


def reader_for(rdb_type: int, offset: int) -> ValueReader:
    make = _READERS.get(rdb_type)
    if make is None:
        raise RdbUnsupportedError(
            f"value type {rdb_type} (Redis 7.0 neither writes nor reads it)", offset
        )
    return make()


_READERS: dict[int, Callable[[], ValueReader]] = {
    0: StringValue,
    1: CountedList,
    2: CountedSet,
    3: CountedZSetText,
    4: CountedHash,
    5: CountedZSet,
    6: Module,
    7: Module,
    9: ZipmapHash,
    10: ZiplistList,
    11: IntsetSet,
    12: ZiplistZSet,
    13: ZiplistHash,
    14: Quicklist,
    16: ListpackHash,
    17: ListpackZSet,
    18: Quicklist2,
    20: ListpackSet,
}
