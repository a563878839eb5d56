"""Sans-I/O streaming parser of Redis RDB files, versions 1-10 (Redis 7.0's ``rdb.c``, ``rdb.h``).

    parser = RdbParser()
    parser.feed(chunk)                      # bytes as they arrive, any size
    while (event := parser.next_event()) is not NEED_DATA:
        ...                                 # events.py: Header, KeyBegin, ListItems, ..., Eof
    parser.close()                          # the input ended: raises if the RDB did not

The parser consumes the RDB in *units* that it reads whole from its buffer: one opcode with
its operands, one key header, one element of a hashtable-encoded collection, one listpack /
ziplist / intset blob, one quicklist node, one stream consumer group, a 64 KiB piece of a
big string. A unit that is not all there yet raises ``_Short`` with the byte count it needs;
nothing is consumed and the parser waits for that many bytes before trying again, so a big
unit is joined once, not once per chunk. Between units the state is a few counters, so memory
is bounded by the largest unit, never by a whole value (events.py says how values are cut).

``offset`` counts bytes from the RDB's first byte (``R``); every error names it. The CRC64
(crc64.py) runs over the bytes as they are consumed and is checked at EOF; a 0 trailer
means the server wrote none. Versions 11+, opcodes and types Redis 7.0 does not write or
read, and module values raise ``RdbUnsupportedError``; anything malformed raises ``RdbError``
and the parser stays failed (a new full sync is the only way on).
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Final

from replicator.redis.errors import RdbChecksumError, RdbError, RdbUnsupportedError
from replicator.redis.rdb import values
from replicator.redis.rdb.crc64 import crc64
from replicator.redis.rdb.events import (
    Aux,
    Eof,
    Event,
    FunctionLib,
    Header,
    KeyBegin,
    KeyEnd,
    ModuleAux,
    ResizeDb,
    SelectDb,
    StringPart,
)
from replicator.redis.rdb.streams import STREAM_TYPES, StreamReader
from replicator.redis.rdb.values import Short, module_name, read_len, read_string

__all__ = ["MAX_VERSION", "NEED_DATA", "NeedData", "RdbParser"]

MAX_VERSION: Final = 10
STRING_PART_BYTES: Final = 64 * 1024

OP_FUNCTION2: Final = 0xF5
OP_FUNCTION_PRE_GA: Final = 0xF6
OP_MODULE_AUX: Final = 0xF7
OP_IDLE: Final = 0xF8
OP_FREQ: Final = 0xF9
OP_AUX: Final = 0xFA
OP_RESIZEDB: Final = 0xFB
OP_EXPIRETIME_MS: Final = 0xFC
OP_EXPIRETIME: Final = 0xFD
OP_SELECTDB: Final = 0xFE
OP_EOF: Final = 0xFF


#: what a reader raises on bytes that make no sense (RdbError besides): malformed input
_MALFORMED: Final = (
    RdbError,
    IndexError,
    ValueError,
    OverflowError,
    struct.error,
    UnicodeDecodeError,
)


# what the parser reads next (RdbParser._phase)
_HEADER: Final = 0
_TOP: Final = 1
_STRING: Final = 2
_STRING_PARTS: Final = 3
_COLLECTION: Final = 4


class NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()


class RdbParser:
    def __init__(self, verify_checksum: bool = True) -> None:
        self.verify_checksum = verify_checksum
        self.version: int | None = None
        self.db = 0
        self.done = False
        self._buf = b""
        self._pos = 0
        self._base = 0  # RDB offset of _buf[0]
        self._crc = 0
        self._crc_done = 0  # bytes of _buf already in _crc
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._need = 0  # absolute offset the next unit needs the input to reach
        self._events: deque[Event] = deque()
        self._error: RdbError | None = None
        self._phase = _HEADER
        self._value: values.ValueReader | None = None
        self._expire_ms: int | None = None
        self._idle: int | None = None
        self._freq: int | None = None
        self._key = b""
        self._string_left = 0

    @property
    def offset(self) -> int:
        """Bytes of the RDB consumed so far."""
        return self._base + self._pos

    @property
    def buffered_bytes(self) -> int:
        """Bytes held: the buffer and the chunks waiting to be joined to it."""
        return len(self._buf) + self._pending_len

    def feed(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        if self.done and data:
            self._fail(RdbError("data after the RDB's end", self._base + len(self._buf)))
        if data:
            self._pending.append(bytes(data))
            self._pending_len += len(data)

    def close(self) -> None:
        """The input ended: fine only after the EOF opcode and its checksum."""
        if self._error is not None:
            raise self._error
        if not self.done:
            self._fail(
                RdbError(
                    "the RDB ends before its EOF opcode",
                    self._base + len(self._buf) + self._pending_len,
                )
            )

    def next_event(self) -> Event | NeedData:
        if self._events:
            return self._events.popleft()
        if self._error is not None:
            raise self._error
        while not self._events:
            if self.done:
                return NEED_DATA
            if self._base + len(self._buf) < self._need:
                if self._base + len(self._buf) + self._pending_len < self._need:
                    return NEED_DATA
                self._merge()
            try:
                self._run_phase()
            except Short as short:
                if short.need <= len(self._buf):  # a reader that asks for what it has: never loop
                    self._fail(RdbError("parser stalled inside a value", self.offset))
                self._need = self._base + short.need
            except RdbError as err:
                self._fail(err)
            except _MALFORMED as err:
                self._fail(RdbError(f"malformed value ({err})", self.offset))
        return self._events.popleft()

    def events(self) -> list[Event]:
        """Every event the bytes fed so far give."""
        out: list[Event] = []
        while not isinstance(event := self.next_event(), NeedData):
            out.append(event)
        return out

    # buffer -------------------------------------------------------------------------------

    def _merge(self) -> None:
        if self.verify_checksum:
            self._crc = crc64(self._crc, memoryview(self._buf)[self._crc_done : self._pos])
        self._base += self._pos
        self._buf = b"".join([self._buf[self._pos :], *self._pending])
        self._pos = 0
        self._crc_done = 0
        self._pending = []
        self._pending_len = 0

    def _fail(self, err: RdbError) -> None:
        self._error = err
        raise err

    def _off(self, pos: int | None = None) -> int:
        return self._base + (self._pos if pos is None else pos)

    # phases -------------------------------------------------------------------------------

    def _run_phase(self) -> None:
        # a number and direct calls, not a bound method kept in an attribute: compiled
        # (scripts/mypyc_modules.txt), these are native calls
        phase = self._phase
        if phase == _TOP:
            self._top()
        elif phase == _COLLECTION:
            self._collection()
        elif phase == _STRING:
            self._string_value()
        elif phase == _STRING_PARTS:
            self._string_parts()
        else:
            self._header()

    def _header(self) -> None:
        buf = self._buf
        if len(buf) < 9:
            raise Short(9)
        if buf[:5] != b"REDIS" or not buf[5:9].isdigit():
            raise RdbError(f"not an RDB: header {bytes(buf[:9])!r}", 0)
        version = int(buf[5:9])
        if version < 1 or version > MAX_VERSION:
            raise RdbUnsupportedError(
                f"RDB version {version} (Redis 7.2 writes 11, 7.4 writes 12); this parser reads 1-{MAX_VERSION}",
                5,
            )
        self.version = version
        self._pos = 9
        self._events.append(Header(version))
        self._phase = _TOP

    def _top(self) -> None:
        buf, p = self._buf, self._pos
        if p >= len(buf):
            raise Short(p + 1)
        op = buf[p]
        p += 1
        if op < 0xF4:  # 0xF4 SLOT_INFO (7.4+) and up are opcodes
            if op == values.TYPE_STRING:
                kind = "string"
                reader = None
            else:
                reader = (
                    StreamReader(op)
                    if op in STREAM_TYPES
                    else values.reader_for(op, self._off(p - 1))
                )
                kind = reader.kind
            key, p = read_string(buf, p, self._base)
            self._key = key
            self._events.append(
                KeyBegin(
                    self.db,
                    key,
                    kind,
                    op,
                    self._expire_ms,
                    self._idle,
                    self._freq,
                    self._base + self._pos,
                )
            )
            self._expire_ms = self._idle = self._freq = None
            self._pos = p
            if reader is None:
                self._phase = _STRING
            else:
                self._value = reader
                self._phase = _COLLECTION
                if not isinstance(reader, values.Blob):
                    return
            # a string or a one-blob value that is all there already: read in this unit. Those
            # phases change nothing before they succeed, so on a short or malformed value
            # nothing happened: the next call runs the phase again and reports it, after the
            # KeyBegin as always
            try:
                self._run_phase()
            except (Short, *_MALFORMED):
                pass
            return
        if op == OP_AUX:
            key, p = read_string(buf, p, self._base)
            value, p = read_string(buf, p, self._base)
            self._events.append(Aux(key, value))
        elif op == OP_SELECTDB:
            self.db, p = read_len(buf, p, self._base)
            self._events.append(SelectDb(self.db))
        elif op == OP_RESIZEDB:
            size, p = read_len(buf, p, self._base)
            expires, p = read_len(buf, p, self._base)
            self._events.append(ResizeDb(size, expires))
        elif op == OP_EXPIRETIME_MS:
            if p + 8 > len(buf):
                raise Short(p + 8)
            self._expire_ms = struct.unpack_from("<q", buf, p)[0]
            p += 8
        elif op == OP_EXPIRETIME:
            if p + 4 > len(buf):
                raise Short(p + 4)
            self._expire_ms = struct.unpack_from("<i", buf, p)[0] * 1000
            p += 4
        elif op == OP_IDLE:
            self._idle, p = read_len(buf, p, self._base)
        elif op == OP_FREQ:
            if p >= len(buf):
                raise Short(p + 1)
            self._freq = buf[p]
            p += 1
        elif op == OP_FUNCTION2:
            code, p = read_string(buf, p, self._base)
            self._events.append(FunctionLib(code))
        elif op == OP_FUNCTION_PRE_GA:
            # 7.0-rc1/rc2 format, which 7.0 GA still reads (rdbFunctionLoad): name, engine,
            # has-description, [description], code; rebuilt as the GA payload "#!engine name=".
            name, p = read_string(buf, p, self._base)
            engine, p = read_string(buf, p, self._base)
            has_desc, p = read_len(buf, p, self._base)
            if has_desc:
                _, p = read_string(buf, p, self._base)
            blob, p = read_string(buf, p, self._base)
            self._events.append(FunctionLib(b"#!%s name=%s\n%s" % (engine, name, blob)))
        elif op == OP_MODULE_AUX:
            module_id, p = read_len(buf, p, self._base)
            when_op, p = read_len(buf, p, self._base)
            when, p = read_len(buf, p, self._base)
            if when_op != values.MODULE_OPCODE_UINT:
                raise RdbError(f"module aux 'when' with opcode {when_op}", self._off(p))
            p = values.skip_module_value(buf, p, self._base)
            self._events.append(ModuleAux(module_name(module_id), when))
        elif op == OP_EOF:
            if self.version is not None and self.version >= 5:
                if p + 8 > len(buf):
                    raise Short(p + 8)
                stored = struct.unpack_from("<Q", buf, p)[0]
                if self.verify_checksum:
                    crc = crc64(self._crc, memoryview(buf)[self._crc_done : p])
                    if stored != 0 and stored != crc:
                        raise RdbChecksumError(
                            f"CRC64 {crc:016x} over the RDB, the trailer says {stored:016x}",
                            self._off(p),
                        )
                self._crc_done = p
                p += 8
            else:
                stored = 0
            self._pos = self._crc_done = p
            self.done = True
            self._events.append(Eof(stored))
            return
        else:
            raise RdbUnsupportedError(
                f"opcode 0x{op:02x} (not written by Redis 7.0)", self._off(p - 1)
            )
        self._pos = p

    def _string_value(self) -> None:
        """A string value: a raw one longer than a part is streamed in 64 KiB parts."""
        buf, p = self._buf, self._pos
        length, encoded, p = values.read_len_or_encoding(buf, p, self._base)
        if encoded or length <= STRING_PART_BYTES:
            if encoded:
                data, p = read_string(buf, self._pos, self._base)
            else:  # raw: its length is read already
                end = p + length
                if end > len(buf):
                    raise Short(end)
                data = buf[p:end]
                p = end
            self._events.append(StringPart(data))
            self._events.append(KeyEnd(self._key))
            self._pos = p
            self._phase = _TOP
            return
        self._pos = p
        self._string_left = length
        self._phase = _STRING_PARTS

    def _string_parts(self) -> None:
        buf, p = self._buf, self._pos
        n = min(self._string_left, STRING_PART_BYTES)
        if p + n > len(buf):
            raise Short(p + n)
        self._events.append(StringPart(buf[p : p + n]))
        self._pos = p + n
        self._string_left -= n
        if not self._string_left:
            self._events.append(KeyEnd(self._key))
            self._phase = _TOP

    def _collection(self) -> None:
        reader = self._value
        assert reader is not None
        while True:
            p, event, finished = reader.step(self._buf, self._pos, self._base)
            self._pos = p
            if event is not None:
                self._events.append(event)
            if finished:
                self._events.append(KeyEnd(self._key))
                self._value = None
                self._phase = _TOP
                return
            if event is not None:
                return
