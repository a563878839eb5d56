"""RocketMQ's stored message record and message properties, encoded and decoded here only.

The record (RocketMQ 5's ``MessageDecoder.java``, ``CommitLog``'s layout) is at
once a commit-log entry, one record of a PULL_MESSAGE answer's body and the HA payload::

    TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64
    | PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST (4 or 16) + port i32
    | STORETIMESTAMP i64 | STOREHOST (4 or 16) + port i32 | RECONSUMETIMES i32
    | PREPARED TX OFFSET i64 | BODYLEN i32 | BODY | TOPICLEN (i8 V1, i16 V2) | TOPIC
    | PROPERTIESLEN i16 | PROPERTIES

Big-endian. V1 magic for topics up to 127 bytes, V2 (2-byte topic length) above; hosts IPv4
or IPv6 by SYSFLAG bits 0x10 / 0x20. BODYCRC is ``zlib.crc32(body) & 0x7FFFFFFF`` of the body
as stored. SYSFLAG bit 0 says the body is compressed, its type in bits 8-10 (0 or 3: zlib;
1 LZ4 and 2 ZSTD are refused). Properties are ``name 0x01 value 0x02`` repeated
(``messageProperties2String``): an item without a name or without 0x01 is skipped on read.

**Raw or inflated body.** :func:`decode` and :func:`decode_records` give the body as stored
unless ``inflate=True``: the broker keeps and serves stored bytes as they are (a resent or
delayed message is stored again compressed, with its SYSFLAG), while a consumer (the
RocketMQ replicator) wants what the producer sent and passes ``inflate=True``. SYSFLAG and
``body_crc`` always say what was stored.

Errors (one tree for ``rmq``, rooted at the codec's)::

    rmq.codec.RemotingError
    └── MessageError                the message encoding refuses bytes or a message
        ├── MalformedMessage        not a well-formed record, batch or property block
        ├── UnsupportedCompression  a body compressed with LZ4 or ZSTD (zlib only here)
        ├── MessageTooLarge         past the encoding's limits (body, topic, properties)
        └── BadProperty             a property name that is empty or holds 0x01 / 0x02

Hot paths: the broker encodes every stored message (:func:`encode_stored`) and the replicator
decodes every pulled one (:func:`decode_records`). Keep both free of extra allocations:
:class:`StoredMessage` is a NamedTuple (a frozen dataclass costs five times as much to build),
hosts come from a cache keyed by their bytes, bounds are checked once before the fixed fields
are read. Sans I/O; imports nothing from the project but ``rmq``.

A little over 500 lines: the record, the batch and the property block are one wire
encoding with one error tree.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, NamedTuple

from rmq.codec import RemotingError
from rmq.msgid import UNIQ_KEY, offset_msg_id, packed_ip
from rmq.properties import KeptProperties

MAGIC_V1: Final = -626843481  # 0xDAA320A7
MAGIC_V2: Final = -626843477  # 0xDAA320AB
BLANK_MAGIC: Final = -875286124  # 0xCBD43194: end of a commit-log file, the next starts the next
MAX_BODY: Final = 4 * 1024 * 1024
MAX_PROPERTIES: Final = 32767  # PROPERTIESLEN is an int16
MAX_TOPIC: Final = 32767
MAX_BODY_INFLATED: Final = 64 * 1024 * 1024  # a zlib bomb stops here

SYSFLAG_COMPRESSED: Final = 0x1
#: bits 2-3: the transaction type (``MessageSysFlag``): 0 not a transaction, 0x4 a prepared
#: (half) message, 0x8 committed, 0xC rolled back
SYSFLAG_TRANSACTION_MASK: Final = 0xC
SYSFLAG_TRANSACTION_PREPARED: Final = 0x4
#: ``MessageConst.PROPERTY_TRANSACTION_PREPARED``: "true" on a transaction's half message
PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
SYSFLAG_BORNHOST_V6: Final = 0x10
SYSFLAG_STOREHOST_V6: Final = 0x20
COMPRESSION_MASK: Final = 0x700  # bits 8-10: 1 LZ4, 2 ZSTD, 3 ZLIB (0: zlib, older clients)
COMPRESSION_ZLIB: Final = 3 << 8

NAME_VALUE_SEP: Final = "\x01"
PROPERTY_SEP: Final = "\x02"
QUEUE_OFFSET_AT: Final = 20  # TOTALSIZE..FLAG, 4 bytes each: a record's QUEUEOFFSET (i64)
PHYSICAL_OFFSET_AT: Final = 28  # and its PHYSICALOFFSET (i64), after QUEUEOFFSET

_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE..BORNTIMESTAMP: 48 bytes
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_TOTAL_MAGIC = struct.Struct(">ii")
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPARED TX OFFSET, BODYLEN
_V6_BITS: Final = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
_SEP: Final = b"\x02"
_TAGS_NAME: Final = b"TAGS\x01"


class MessageError(RemotingError):
    """Root of the message encoding's errors."""


class MalformedMessage(MessageError):
    pass


class UnsupportedCompression(MessageError):
    pass


class MessageTooLarge(MessageError):
    pass


class BadProperty(MessageError):
    pass


# --- properties ------------------------------------------------------------------------------


def properties_text(props: Mapping[str, str]) -> str:
    """``name 0x01 value 0x02`` for each property, in the mapping's order (not checked)."""
    return "".join([f"{name}\x01{value}\x02" for name, value in props.items()])


def encode_properties(props: Mapping[str, str]) -> bytes:
    """:func:`properties_text` as UTF-8: a batch item's or a stored record's PROPERTIES."""
    return "".join([f"{name}\x01{value}\x02" for name, value in props.items()]).encode()


def checked_properties_text(props: Mapping[str, str]) -> str:
    """:func:`properties_text`, refusing (:class:`BadProperty`) an empty name or a name or
    value that holds a separator (the reader would split it). One pass per message (it runs
    for every replicated write): the text is joined first, and a separator inside a name or
    value shows as more separators than properties."""
    if "" in props:
        raise BadProperty("a property name is empty")
    text = "".join([f"{name}\x01{value}\x02" for name, value in props.items()])
    n = len(props)
    if text.count(NAME_VALUE_SEP) != n or text.count(PROPERTY_SEP) != n:
        for name, value in props.items():
            for part in (name, value):
                if NAME_VALUE_SEP in part or PROPERTY_SEP in part:
                    raise BadProperty(
                        f"property {name!r} holds RocketMQ's separator 0x01 or 0x02: {part!r}"
                    )
    return text


def parse_properties(text: str) -> dict[str, str]:
    """The properties in ``name 0x01 value 0x02`` text (a send header's ``properties``)."""
    out: dict[str, str] = {}
    for item in text.split("\x02"):
        name, sep, value = item.partition("\x01")
        if sep and name:
            out[name] = value
    return out


def decode_properties(raw: bytes) -> dict[str, str]:
    """:func:`parse_properties` of UTF-8 bytes (UnicodeDecodeError when they are not)."""
    out: dict[str, str] = {}
    for item in raw.decode().split("\x02"):
        name, sep, value = item.partition("\x01")
        if sep and name:
            out[name] = value
    return out


def property_value(raw: bytes, name: bytes) -> str:
    """One property's value in encoded properties, found without decoding the others (""
    when absent); ``name`` ends with 0x01 (e.g. ``b"TAGS\\x01"``)."""
    at = raw.find(name)
    while at >= 0:
        if at == 0 or raw[at - 1 : at] == _SEP:  # a name, not the end of another value
            start = at + len(name)
            stop = raw.find(_SEP, start)
            return raw[start : stop if stop >= 0 else len(raw)].decode(errors="replace")
        at = raw.find(name, at + 1)
    return ""


# --- the stored record -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Host:
    ip: str
    port: int

    def encode(self) -> bytes:
        return packed_ip(self.ip) + _I32.pack(self.port)

    @property
    def v6(self) -> bool:
        return len(packed_ip(self.ip)) == 16


@functools.lru_cache(maxsize=4096)
def _host(raw: bytes) -> Host:
    """The host in a record's 8 or 20 bytes (address, port), built once per host (born
    hosts differ by the producer's port: a miss still finds the address parsed)."""
    return Host(_ip_text(raw[:-4]), int.from_bytes(raw[-4:], "big", signed=True))


@functools.lru_cache(maxsize=1024)
def _ip_text(packed: bytes) -> str:
    return str(ipaddress.ip_address(packed))


LOCALHOST: Final = Host("127.0.0.1", 0)
_NO_PROPERTIES: Final[Mapping[str, str]] = MappingProxyType({})


class StoredMessage(NamedTuple):
    """One record's fields. ``body`` is as stored (compressed when SYSFLAG bit 0 says so)
    unless decoded with ``inflate=True``; ``body_crc`` is as read (encoding computes it)."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: Host = LOCALHOST
    store_timestamp: int = 0
    store_host: Host = LOCALHOST
    reconsume_times: int = 0
    prepared_tx_offset: int = 0
    properties: Mapping[str, str] = _NO_PROPERTIES
    body_crc: int = -1

    @property
    def tags(self) -> str:
        return self.properties.get("TAGS", "")

    @property
    def keys(self) -> str:
        return self.properties.get("KEYS", "")

    @property
    def msg_id(self) -> str:
        """UNIQ_KEY, else the offset message id (what a Java consumer's ``getMsgId`` says)."""
        return self.properties.get(UNIQ_KEY) or offset_msg_id(
            self.store_host.ip, self.store_host.port, self.physical_offset
        )


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def encode(m: StoredMessage) -> bytes:
    """The record's bytes; :class:`MessageTooLarge` past RocketMQ's limits."""
    return encode_stored(m, m.queue_offset, m.physical_offset, m.store_timestamp, m.store_host)


def encode_stored(
    m: StoredMessage,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    store_host: Host,
) -> bytes:
    """:func:`encode` of ``m`` with the fields the store assigns (no copy of the message)."""
    body = m.body
    if len(body) > MAX_BODY:
        raise MessageTooLarge(f"body of {len(body)} bytes exceeds {MAX_BODY}")
    topic = m.topic.encode()
    given = m.properties
    props = given.encoded if type(given) is KeptProperties else encode_properties(given)
    if len(props) > MAX_PROPERTIES:
        raise MessageTooLarge(f"properties of {len(props)} bytes exceed {MAX_PROPERTIES}")
    if len(topic) > MAX_TOPIC:
        raise MessageTooLarge(f"topic of {len(topic)} bytes exceeds {MAX_TOPIC}")
    v2 = len(topic) > 127
    topic_len = _I16.pack(len(topic)) if v2 else bytes((len(topic),))
    born, store = m.born_host.encode(), store_host.encode()
    sysflag = m.sysflag & ~_V6_BITS
    if len(born) == 20:
        sysflag |= SYSFLAG_BORNHOST_V6
    if len(store) == 20:
        sysflag |= SYSFLAG_STOREHOST_V6
    total = _HEAD.size + len(born) + 8 + len(store) + _TAIL.size + len(body)
    total += len(topic_len) + len(topic) + 2 + len(props)
    return b"".join(
        (
            _HEAD.pack(
                total,
                MAGIC_V2 if v2 else MAGIC_V1,
                zlib.crc32(body) & 0x7FFFFFFF,
                m.queue_id,
                m.flag,
                queue_offset,
                physical_offset,
                sysflag,
                m.born_timestamp,
            ),
            born,
            _I64.pack(store_timestamp),
            store,
            _TAIL.pack(m.reconsume_times, m.prepared_tx_offset, len(body)),
            body,
            topic_len,
            topic,
            _I16.pack(len(props)),
            props,
        )
    )


def inflate(body: bytes, sysflag: int) -> bytes:
    """A compressed body inflated (zlib, at most :data:`MAX_BODY_INFLATED` bytes)."""
    kind = sysflag & COMPRESSION_MASK
    if kind not in (0, COMPRESSION_ZLIB):
        raise UnsupportedCompression(f"compression type {kind >> 8} (LZ4/ZSTD) is not supported")
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, MAX_BODY_INFLATED)
    except zlib.error as exc:
        raise MalformedMessage(f"the compressed body does not inflate: {exc}") from None
    if inflater.unconsumed_tail:
        raise MalformedMessage(f"the body inflates past {MAX_BODY_INFLATED} bytes")
    return out


def _topic_and_properties(
    buf: bytes | memoryview, pos: int, at: int, end: int, v2: bool
) -> tuple[bytes, int]:
    """(TOPIC, where PROPERTIES start) of the record in ``buf[at:end]``, read from ``pos``
    (just after the body, at least 3 bytes before ``end``); the lengths must reach ``end``."""
    if v2:
        (topic_len,) = _I16.unpack_from(buf, pos)
        pos += 2
    else:
        topic_len = buf[pos]
        pos += 1
    if topic_len < 0 or pos + topic_len + 2 > end:
        raise MalformedMessage(f"topic length {topic_len} runs past the record")
    topic = bytes(buf[pos : pos + topic_len])
    pos += topic_len
    (props_len,) = _I16.unpack_from(buf, pos)
    pos += 2
    if props_len < 0 or pos + props_len != end:
        raise MalformedMessage(f"fields end at {pos - at + props_len}, TOTALSIZE says {end - at}")
    return topic, pos


def _decode(buf: bytes, at: int, end: int, check_crc: bool, inflate_body: bool) -> StoredMessage:
    """The record in ``buf[at:end]`` (``end - at`` is its TOTALSIZE, at least a header)."""
    _, magic, crc, qid, flag, qoff, phys, sysflag, born_ts = _HEAD.unpack_from(buf, at)
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        raise MalformedMessage(f"bad magic {magic & 0xFFFFFFFF:#010x}")
    pos = at + _HEAD.size
    stored_at = pos + (28 if sysflag & SYSFLAG_BORNHOST_V6 else 16)  # STORETIMESTAMP + 8
    tail = stored_at + (20 if sysflag & SYSFLAG_STOREHOST_V6 else 8)
    pos = tail + _TAIL.size
    if pos > end:
        raise MalformedMessage(f"fields run past TOTALSIZE {end - at}")
    born = _host(buf[at + _HEAD.size : stored_at - 8])
    (store_ts,) = _I64.unpack_from(buf, stored_at - 8)
    store = _host(buf[stored_at:tail])
    reconsume, prepared, body_len = _TAIL.unpack_from(buf, tail)
    if body_len < 0 or pos + body_len + 3 > end:
        raise MalformedMessage(f"body length {body_len} runs past the record")
    body = buf[pos : pos + body_len]
    topic, pos = _topic_and_properties(buf, pos + body_len, at, end, magic == MAGIC_V2)
    try:
        props = decode_properties(buf[pos:end])
        topic_text = topic.decode()
    except UnicodeDecodeError as exc:
        raise MalformedMessage(f"topic or properties are not UTF-8: {exc}") from None
    if check_crc and crc != zlib.crc32(body) & 0x7FFFFFFF:
        raise MalformedMessage(f"body CRC {crc:#x} != computed {body_crc(body):#x}")
    if inflate_body and sysflag & SYSFLAG_COMPRESSED:
        body = inflate(body, sysflag)
    return StoredMessage(
        topic_text, body, qid, flag, qoff, phys, sysflag, born_ts, born,
        store_ts, store, reconsume, prepared, props, crc,
    )  # fmt: skip


def decode(buf: bytes, check_crc: bool = True, inflate: bool = False) -> StoredMessage:
    """One record from exactly its bytes (``buf`` is the whole record, as TOTALSIZE says);
    the body as stored unless ``inflate``. :class:`MalformedMessage` when it is not one."""
    if len(buf) < _HEAD.size:
        raise MalformedMessage(f"record of {len(buf)} bytes is shorter than its header")
    (total,) = _I32.unpack_from(buf, 0)
    if total != len(buf):
        raise MalformedMessage(f"TOTALSIZE {total} but the record has {len(buf)} bytes")
    return _decode(buf, 0, total, check_crc, inflate)


def decode_records(
    body: bytes, check_crc: bool = True, inflate: bool = False
) -> list[StoredMessage]:
    """Every record of records back to back (a PULL_MESSAGE answer's body), in order; the
    bodies as stored unless ``inflate``. A record that is cut, of a bad magic or CRC, or
    whose fields do not add up to its TOTALSIZE is :class:`MalformedMessage` naming it."""
    out: list[StoredMessage] = []
    at = 0
    size = len(body)
    while at < size:
        if size - at < _HEAD.size:
            raise MalformedMessage(f"record at byte {at}: {size - at} bytes, shorter than a header")
        (total,) = _I32.unpack_from(body, at)
        if total < _HEAD.size or at + total > size:
            raise MalformedMessage(f"record at byte {at}: TOTALSIZE {total} does not fit the body")
        try:
            out.append(_decode(body, at, at + total, check_crc, inflate))
        except MessageError as exc:
            raise type(exc)(f"record at byte {at}: {exc}") from None
        at += total
    return out


class DispatchInfo(NamedTuple):
    """What a consume-queue unit needs from a record, read without copying its body."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    tags: str
    store_timestamp: int = 0
    properties: bytes = b""  # the encoded properties (:func:`property_value` reads one)


def dispatch_info(buf: bytes | memoryview) -> DispatchInfo:
    """The fields a dispatch needs (RocketMQ's reput reads a record without its CRC,
    ``checkMessageAndReturnSize(.., checkCRC=false, ..)``): the layout is checked (magic,
    TOTALSIZE, every length inside the record), the body neither copied nor checksummed."""
    total = len(buf)
    if total < _HEAD.size:
        raise MalformedMessage(f"record of {total} bytes is shorter than its header")
    size, magic, _crc, qid, _flag, qoff, phys, sysflag, _born = _HEAD.unpack_from(buf, 0)
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        raise MalformedMessage(f"bad magic {magic & 0xFFFFFFFF:#010x}")
    if size != total:
        raise MalformedMessage(f"TOTALSIZE {size} but the record has {total} bytes")
    pos = _HEAD.size + (20 if sysflag & SYSFLAG_BORNHOST_V6 else 8)
    if pos + 8 > total:
        raise MalformedMessage(f"fields run past TOTALSIZE {total}")
    (store_timestamp,) = _I64.unpack_from(buf, pos)
    pos += 8 + (20 if sysflag & SYSFLAG_STOREHOST_V6 else 8) + _TAIL.size
    if pos > total:
        raise MalformedMessage(f"fields run past TOTALSIZE {total}")
    (body_len,) = _I32.unpack_from(buf, pos - 4)
    if body_len < 0 or pos + body_len + 3 > total:
        raise MalformedMessage(f"body length {body_len} runs past the record")
    topic, pos = _topic_and_properties(buf, pos + body_len, 0, total, magic == MAGIC_V2)
    try:
        topic_text = topic.decode()
    except UnicodeDecodeError as exc:
        raise MalformedMessage(f"the topic is not UTF-8: {exc}") from None
    props = bytes(buf[pos:total])
    return DispatchInfo(
        topic_text, qid, qoff, phys, property_value(props, _TAGS_NAME), store_timestamp, props
    )


_SIZE_MAGIC_CRC = struct.Struct(">iii")
_SYSFLAG_AT = 36  # SYSFLAG's position in a record (after PHYSICALOFFSET)
# BODYLEN's position: header, BORNHOST + STORETIMESTAMP + STOREHOST, RECONSUMETIMES + PREPARED
_BODYLEN_AT = {
    flag: _HEAD.size + (20 if flag & SYSFLAG_BORNHOST_V6 else 8) + 8
    + (20 if flag & SYSFLAG_STOREHOST_V6 else 8) + _TAIL.size - 4
    for flag in (0, SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6,
                 SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
}  # fmt: skip


def verify_record(buf: bytes | memoryview, pos: int = 0, total: int = -1) -> None:
    """Check the record at ``buf[pos:]`` before it is handed out: its magic, that its
    TOTALSIZE is ``total`` (when given) and fits ``buf``, that its fixed fields and body
    fit, and its BODYCRC (RocketMQ's ``UtilAll.crc32``: java.util.zip.CRC32, zlib's,
    masked to 31 bits). :class:`MalformedMessage` says what is wrong; the body is not
    copied (zlib reads the buffer)."""
    if len(buf) - pos < _HEAD.size:
        raise MalformedMessage(f"{len(buf) - pos} bytes are shorter than a record header")
    size, magic, crc = _SIZE_MAGIC_CRC.unpack_from(buf, pos)
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        raise MalformedMessage(f"bad magic {magic & 0xFFFFFFFF:#010x}")
    if total >= 0 and size != total:
        raise MalformedMessage(f"TOTALSIZE {size}, expected {total}")
    if size < _HEAD.size or pos + size > len(buf):
        raise MalformedMessage(f"TOTALSIZE {size} does not fit the {len(buf) - pos} bytes read")
    (sysflag,) = _I32.unpack_from(buf, pos + _SYSFLAG_AT)
    at = pos + _BODYLEN_AT[sysflag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)]
    if at + 4 > pos + size:
        raise MalformedMessage(f"fields run past TOTALSIZE {size}")
    (body_len,) = _I32.unpack_from(buf, at)
    at += 4
    if body_len < 0 or at + body_len + 3 > pos + size:
        raise MalformedMessage(f"body length {body_len} runs past the record")
    computed = zlib.crc32(memoryview(buf)[at : at + body_len]) & 0x7FFFFFFF
    if crc != computed:
        raise MalformedMessage(f"body CRC {crc:#x} != computed {computed:#x}")


def at_physical_offset(record: bytes, physical_offset: int) -> bytes:
    """``record`` (as :func:`encode` made it) with its PHYSICALOFFSET set to ``physical_offset``."""
    at = PHYSICAL_OFFSET_AT
    return b"".join((record[:at], _I64.pack(physical_offset), record[at + 8 :]))


def peek_total(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """(TOTALSIZE, MAGICCODE) of the record at ``pos`` (struct.error when fewer than 8 bytes)."""
    total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
    return int(total), int(magic)
