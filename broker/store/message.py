"""RocketMQ's store encoding of one message, sans I/O (research/broker.md §1).

The same bytes are the commit-log entry, a record of a PULL_MESSAGE body and the HA payload.
Big-endian; V1 magic (1-byte topic length) for topics up to 127 bytes, V2 (2-byte) above;
hosts IPv4 or IPv6 by SYSFLAG bits 0x10 / 0x20. BODYCRC is ``zlib.crc32(body) & 0x7FFFFFFF``.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from dataclasses import dataclass, field

from broker.store.errors import DecodeError, MessageTooLargeError

MAGIC_V1 = -626843481  # 0xDAA320A7
MAGIC_V2 = -626843477  # 0xDAA320AB
BLANK_MAGIC = -875286124  # 0xCBD43194: end of file, the next record starts the next file
MAX_BODY = 4 * 1024 * 1024
MAX_PROPERTIES = 32767
NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"

SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

_HEAD = struct.Struct(">iiiiiqqiq")  # TOTALSIZE..BORNTIMESTAMP: 48 bytes
_MID = struct.Struct(">q")
_TAIL = struct.Struct(">iq")  # RECONSUMETIMES, PREPARED TX OFFSET
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_properties(props: dict[str, str]) -> bytes:
    """``key \\x01 value \\x02`` repeated (RocketMQ's messageProperties2String)."""
    return "".join(f"{k}{NAME_VALUE_SEP}{v}{PROPERTY_SEP}" for k, v in props.items()).encode()


def decode_properties(raw: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in raw.decode().split(PROPERTY_SEP):
        if not item:
            continue
        k, sep, v = item.partition(NAME_VALUE_SEP)
        if sep:
            out[k] = v
    return out


@functools.lru_cache(maxsize=1024)
def _ip(ip: str) -> tuple[bytes, bool]:
    """(packed address, is IPv6); parsed once per address (a put encodes two hosts)."""
    addr = ipaddress.ip_address(ip)
    return addr.packed, addr.version == 6


@functools.lru_cache(maxsize=1024)
def _ip_text(packed: bytes) -> str:
    return str(ipaddress.ip_address(packed))


@dataclass(frozen=True)
class Host:
    ip: str
    port: int

    def encode(self) -> bytes:
        return _ip(self.ip)[0] + _I32.pack(self.port)

    @property
    def v6(self) -> bool:
        return _ip(self.ip)[1]


@dataclass(frozen=True)
class StoredMessage:
    """One record's fields. ``body`` is the stored form (compressed when sysflag bit 0 says so)."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    physical_offset: int = 0
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: Host = Host("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: Host = Host("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_tx_offset: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    body_crc: int = -1  # as read; encode always computes it

    @property
    def tags(self) -> str:
        return self.properties.get("TAGS", "")


def _sysflag(m: StoredMessage, store_host: Host) -> int:
    f = m.sysflag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    if m.born_host.v6:
        f |= SYSFLAG_BORNHOST_V6
    if store_host.v6:
        f |= SYSFLAG_STOREHOST_V6
    return f


def encode(m: StoredMessage) -> bytes:
    """The record's bytes; raises MessageTooLargeError past RocketMQ's limits."""
    return encode_stored(m, m.queue_offset, m.physical_offset, m.store_timestamp, m.store_host)


def encode_stored(
    m: StoredMessage,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    store_host: Host,
) -> bytes:
    """``encode`` of ``m`` with the fields the store assigns (no copy of the message)."""
    if len(m.body) > MAX_BODY:
        raise MessageTooLargeError(f"body of {len(m.body)} bytes exceeds {MAX_BODY}")
    topic = m.topic.encode()
    props = encode_properties(m.properties)
    if len(props) > MAX_PROPERTIES:
        raise MessageTooLargeError(f"properties of {len(props)} bytes exceed {MAX_PROPERTIES}")
    if len(topic) > 32767:
        raise MessageTooLargeError(f"topic of {len(topic)} bytes exceeds 32767")
    v2 = len(topic) > 127
    topic_len = _I16.pack(len(topic)) if v2 else bytes([len(topic)])
    born, store = m.born_host.encode(), store_host.encode()
    total = _HEAD.size + len(born) + 8 + len(store) + _TAIL.size + 4 + len(m.body)
    total += len(topic_len) + len(topic) + 2 + len(props)
    return b"".join(
        (
            _HEAD.pack(
                total,
                MAGIC_V2 if v2 else MAGIC_V1,
                body_crc(m.body),
                m.queue_id,
                m.flag,
                queue_offset,
                physical_offset,
                _sysflag(m, store_host),
                m.born_timestamp,
            ),
            born,
            _MID.pack(store_timestamp),
            store,
            _TAIL.pack(m.reconsume_times, m.prepared_tx_offset),
            _I32.pack(len(m.body)),
            m.body,
            topic_len,
            topic,
            _I16.pack(len(props)),
            props,
        )
    )


def _host(buf: bytes, pos: int, v6: bool) -> tuple[Host, int]:
    n = 16 if v6 else 4
    end = pos + n + 4
    if end > len(buf):
        raise DecodeError("record cut inside a host")
    ip = _ip_text(bytes(buf[pos : pos + n]))
    return Host(ip, _I32.unpack_from(buf, pos + n)[0]), end


def decode(buf: bytes, check_crc: bool = True) -> StoredMessage:
    """One record from exactly its bytes (``buf`` is the whole record, as TOTALSIZE says)."""
    if len(buf) < _HEAD.size:
        raise DecodeError(f"record of {len(buf)} bytes is shorter than its header")
    total, magic, crc, qid, flag, qoff, phys, sysflag, born_ts = _HEAD.unpack_from(buf, 0)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise DecodeError(f"bad magic {magic & 0xFFFFFFFF:#010x}")
    if total != len(buf):
        raise DecodeError(f"TOTALSIZE {total} but the record has {len(buf)} bytes")
    try:
        born, pos = _host(buf, _HEAD.size, bool(sysflag & SYSFLAG_BORNHOST_V6))
        (store_ts,) = _MID.unpack_from(buf, pos)
        store, pos = _host(buf, pos + 8, bool(sysflag & SYSFLAG_STOREHOST_V6))
        reconsume, prepared = _TAIL.unpack_from(buf, pos)
        pos += _TAIL.size
        (body_len,) = _I32.unpack_from(buf, pos)
        pos += 4
        if body_len < 0 or pos + body_len > total:
            raise DecodeError(f"body length {body_len} runs past the record")
        body = buf[pos : pos + body_len]
        pos += body_len
        if magic == MAGIC_V2:
            (topic_len,) = _I16.unpack_from(buf, pos)
            pos += 2
        else:
            topic_len = buf[pos]
            pos += 1
        topic = buf[pos : pos + topic_len].decode()
        pos += topic_len
        (props_len,) = _I16.unpack_from(buf, pos)
        pos += 2
        props = decode_properties(buf[pos : pos + props_len])
        pos += props_len
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise DecodeError(f"record fields run past TOTALSIZE: {e}") from e
    if pos != total:
        raise DecodeError(f"fields end at {pos}, TOTALSIZE says {total}")
    if check_crc and crc != body_crc(body):
        raise DecodeError(f"body CRC {crc:#x} != computed {body_crc(body):#x}")
    return StoredMessage(
        topic=topic,
        body=body,
        queue_id=qid,
        flag=flag,
        queue_offset=qoff,
        physical_offset=phys,
        sysflag=sysflag,
        born_timestamp=born_ts,
        born_host=born,
        store_timestamp=store_ts,
        store_host=store,
        reconsume_times=reconsume,
        prepared_tx_offset=prepared,
        properties=props,
        body_crc=crc,
    )


@dataclass(frozen=True, slots=True)
class DispatchInfo:
    """What a consume-queue unit needs from a record, read without copying its body."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    tags: str


_TAGS_KEY = b"TAGS" + NAME_VALUE_SEP.encode()


def dispatch_info(buf: bytes | memoryview) -> DispatchInfo:
    """The fields a dispatch needs (RocketMQ's reput reads a record without its CRC,
    ``checkMessageAndReturnSize(.., checkCRC=false, ..)``): the layout is checked (magic,
    TOTALSIZE, every length inside the record), the body neither copied nor checksummed."""
    total = len(buf)
    if total < _HEAD.size:
        raise DecodeError(f"record of {total} bytes is shorter than its header")
    size, magic, _crc, qid, _flag, qoff, phys, sysflag, _born = _HEAD.unpack_from(buf, 0)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise DecodeError(f"bad magic {magic & 0xFFFFFFFF:#010x}")
    if size != total:
        raise DecodeError(f"TOTALSIZE {size} but the record has {total} bytes")
    try:
        pos = _HEAD.size + (20 if sysflag & SYSFLAG_BORNHOST_V6 else 8) + 8
        pos += (20 if sysflag & SYSFLAG_STOREHOST_V6 else 8) + _TAIL.size
        (body_len,) = _I32.unpack_from(buf, pos)
        pos += 4
        if body_len < 0 or pos + body_len > total:
            raise DecodeError(f"body length {body_len} runs past the record")
        pos += body_len
        if magic == MAGIC_V2:
            (topic_len,) = _I16.unpack_from(buf, pos)
            pos += 2
        else:
            topic_len = buf[pos]
            pos += 1
        topic = bytes(buf[pos : pos + topic_len]).decode()
        pos += topic_len
        (props_len,) = _I16.unpack_from(buf, pos)
        pos += 2
        props = bytes(buf[pos : pos + props_len])
        pos += props_len
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise DecodeError(f"record fields run past TOTALSIZE: {e}") from e
    if pos != total:
        raise DecodeError(f"fields end at {pos}, TOTALSIZE says {total}")
    return DispatchInfo(topic, qid, qoff, phys, _tags(props))


def _tags(props: bytes) -> str:
    """The TAGS property's value in encoded properties ("" without one)."""
    sep = PROPERTY_SEP.encode()
    at = props.find(_TAGS_KEY)
    while at >= 0:
        if at == 0 or props[at - 1 : at] == sep:  # a key, not the end of another name
            start = at + len(_TAGS_KEY)
            stop = props.find(sep, start)
            return props[start : stop if stop >= 0 else len(props)].decode(errors="replace")
        at = props.find(_TAGS_KEY, at + 1)
    return ""


PHYSICAL_OFFSET_AT = 28  # TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG (4 each), QUEUEOFFSET (8)


def at_physical_offset(record: bytes, physical_offset: int) -> bytes:
    """``record`` (as ``encode`` made it) with its PHYSICALOFFSET field set to ``physical_offset``."""
    at = PHYSICAL_OFFSET_AT
    return b"".join((record[:at], _MID.pack(physical_offset), record[at + 8 :]))


def peek_total(buf: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """(TOTALSIZE, MAGICCODE) of the record at ``pos``."""
    total, magic = struct.unpack_from(">ii", buf, pos)
    return int(total), int(magic)
