"""Hand-made RDB bytes for tests: lengths, strings and every compact encoding, written from
the layouts in research note §3.6 (independently of the parser's code)."""

from __future__ import annotations

import struct

from replicator.redis.rdb.crc64 import crc64


def length(n: int) -> bytes:
    if n < 64:
        return bytes([n])
    if n < 16384:
        return bytes([0x40 | n >> 8, n & 0xFF])
    if n < 1 << 32:
        return b"\x80" + n.to_bytes(4, "big")
    return b"\x81" + n.to_bytes(8, "big")


def string(b: bytes) -> bytes:
    return length(len(b)) + b


def int_string(v: int) -> bytes:
    if -128 <= v < 128:
        return b"\xc0" + struct.pack("<b", v)
    if -32768 <= v < 32768:
        return b"\xc1" + struct.pack("<h", v)
    return b"\xc2" + struct.pack("<i", v)


def lzf_literal_string(raw: bytes) -> bytes:
    """An LZF string made only of literal runs (valid LZF, no compression)."""
    comp = b"".join(
        bytes([len(raw[i : i + 32]) - 1]) + raw[i : i + 32] for i in range(0, len(raw), 32)
    )
    return b"\xc3" + length(len(comp)) + length(len(raw)) + comp


def _int_or_none(x: bytes | int) -> int | None:
    if isinstance(x, int):
        return x
    return None


def ziplist(entries: list[bytes | int]) -> bytes:
    body = b""
    prev = 0
    tail = 10
    for e in entries:
        pl = bytes([prev]) if prev < 254 else b"\xfe" + struct.pack("<I", prev)
        v = _int_or_none(e)
        if v is None:
            assert isinstance(e, bytes)
            n = len(e)
            if n < 64:
                enc = bytes([n]) + e
            elif n < 16384:
                enc = bytes([0x40 | n >> 8, n & 0xFF]) + e
            else:
                enc = b"\x80" + n.to_bytes(4, "big") + e
        elif 0 <= v <= 12:
            enc = bytes([0xF1 + v])
        elif -128 <= v < 128:
            enc = b"\xfe" + struct.pack("<b", v)
        elif -32768 <= v < 32768:
            enc = b"\xc0" + struct.pack("<h", v)
        elif -(1 << 23) <= v < 1 << 23:
            enc = b"\xf0" + struct.pack("<i", v)[:3]
        elif -(1 << 31) <= v < 1 << 31:
            enc = b"\xd0" + struct.pack("<i", v)
        else:
            enc = b"\xe0" + struct.pack("<q", v)
        tail = 10 + len(body)
        body += pl + enc
        prev = len(pl + enc)
    total = 10 + len(body) + 1
    return struct.pack("<IIH", total, tail, len(entries)) + body + b"\xff"


def _backlen(n: int) -> bytes:
    out = []
    while True:
        out.append(n & 127)
        n >>= 7
        if not n:
            break
    # lpEncodeBacklen: highest 7 bits first; every byte but the first has bit 7 set
    b = [out[i] | (128 if i != len(out) - 1 else 0) for i in range(len(out))]
    return bytes(reversed(b))


def listpack(entries: list[bytes | int]) -> bytes:
    body = b""
    for e in entries:
        v = _int_or_none(e)
        if v is None:
            assert isinstance(e, bytes)
            n = len(e)
            if n < 64:
                enc = bytes([0x80 | n]) + e
            elif n < 4096:
                enc = bytes([0xE0 | n >> 8, n & 0xFF]) + e
            else:
                enc = b"\xf0" + struct.pack("<I", n) + e
        elif 0 <= v < 128:
            enc = bytes([v])
        elif -4096 <= v < 4096:
            u = v & 0x1FFF
            enc = bytes([0xC0 | u >> 8, u & 0xFF])
        elif -32768 <= v < 32768:
            enc = b"\xf1" + struct.pack("<h", v)
        elif -(1 << 23) <= v < 1 << 23:
            enc = b"\xf2" + struct.pack("<i", v)[:3]
        elif -(1 << 31) <= v < 1 << 31:
            enc = b"\xf3" + struct.pack("<i", v)
        else:
            enc = b"\xf4" + struct.pack("<q", v)
        body += enc + _backlen(len(enc))
    return struct.pack("<IH", 6 + len(body) + 1, min(len(entries), 65535)) + body + b"\xff"


def intset(values: list[int], width: int) -> bytes:
    fmt = {2: "h", 4: "i", 8: "q"}[width]
    return struct.pack(f"<II{len(values)}{fmt}", width, len(values), *sorted(values))


def zipmap(pairs: list[tuple[bytes, bytes]]) -> bytes:
    def zlen(n: int) -> bytes:
        return bytes([n]) if n < 254 else b"\xfe" + struct.pack("<I", n)

    body = b"".join(zlen(len(k)) + k + zlen(len(v)) + b"\x02" + v + b"\x00\x00" for k, v in pairs)
    return bytes([min(len(pairs), 254)]) + body + b"\xff"


def stream_node(
    master: tuple[int, int], entries: list[tuple[tuple[int, int], list[tuple[bytes, bytes]]]]
) -> tuple[bytes, bytes]:
    """(node key, listpack) of one stream node; entries sharing the first entry's fields use
    SAMEFIELDS."""
    mfields = [f for f, _ in entries[0][1]]
    lp: list[bytes | int] = [len(entries), 0, len(mfields), *mfields, 0]
    for (ms, seq), fields in entries:
        same = [f for f, _ in fields] == mfields
        lp += [2 if same else 0, ms - master[0], seq - master[1]]
        if same:
            lp += [v for _, v in fields]
            lp.append(len(fields) + 3)
        else:
            lp.append(len(fields))
            lp += [x for pair in fields for x in pair]
            lp.append(2 * len(fields) + 4)
    return struct.pack(">QQ", *master), listpack(lp)


def rdb(body: bytes, version: int = 9, checksum: bool = True) -> bytes:
    data = b"REDIS%04d" % version + body + b"\xff"
    crc = crc64(0, data) if checksum else 0
    return data + struct.pack("<Q", crc)
