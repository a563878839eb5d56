"""RdbParser on hand-made RDBs: every opcode and value type, and every refusal."""

from __future__ import annotations

import ast
import math
import struct
from pathlib import Path

import pytest

from replicator.redis.errors import RdbChecksumError, RdbError, RdbUnsupportedError
from replicator.redis.rdb import NEED_DATA, RdbParser
from replicator.redis.rdb import parser as parser_module
from replicator.redis.rdb.events import (
    Aux,
    Eof,
    Event,
    FunctionLib,
    HashFields,
    Header,
    KeyBegin,
    KeyEnd,
    ListItems,
    ModuleAux,
    PendingEntry,
    ResizeDb,
    SelectDb,
    SetMembers,
    StreamConsumer,
    StreamEntries,
    StreamEntry,
    StreamGroup,
    StreamMeta,
    StringPart,
    ZSetMembers,
)
from replicator.redis.rdb.values import MODULE_CHARSET
from tests.unit.replicator.redis.rdb.rdbgen import (
    int_string,
    intset,
    length,
    listpack,
    lzf_literal_string,
    rdb,
    stream_node,
    string,
    ziplist,
    zipmap,
)

S = string


def parse(data: bytes, step: int | None = None, verify: bool = True) -> list[Event]:
    p = RdbParser(verify_checksum=verify)
    out: list[Event] = []
    for i in range(0, len(data), step or len(data) or 1):
        p.feed(data[i : i + (step or len(data))])
        out += p.events()
    p.close()
    return out


def values(body: bytes, version: int = 9) -> list[Event]:
    """The events between KeyBegin and KeyEnd of a one-key RDB."""
    events = parse(rdb(b"\xfe\x00" + body, version))
    assert isinstance(events[2], KeyBegin) and isinstance(events[-2], KeyEnd)
    return events[3:-2]


def key(rdb_type: int, value: bytes) -> bytes:
    return bytes([rdb_type]) + S(b"k") + value


def test_header_aux_select_resize_and_eof() -> None:
    body = b"\xfa" + S(b"redis-ver") + S(b"7.0.15") + b"\xfa" + S(b"ctime") + int_string(1700000000)
    body += b"\xf5" + S(b"#!lua name=x\n") + b"\xfe" + length(3) + b"\xfb" + length(1) + length(0)
    body += key(0, S(b"v"))
    data = rdb(body, 10)
    events = parse(data)
    assert (
        events
        == [
            Header(10),
            Aux(b"redis-ver", b"7.0.15"),
            Aux(b"ctime", b"1700000000"),
            FunctionLib(b"#!lua name=x\n"),
            SelectDb(3),
            ResizeDb(1, 0),
            KeyBegin(
                3, b"k", "string", 0, None, None, None, len(data) - 8 - 1 - 5
            ),  # CRC, EOF, the record
            StringPart(b"v"),
            KeyEnd(b"k"),
            Eof(struct.unpack("<Q", data[-8:])[0]),
        ]
    )


def test_pre_ga_functions_become_the_ga_payload() -> None:
    code = b"redis.register_function('f', function() return 1 end)"
    with_desc = b"\xf6" + S(b"lib") + S(b"lua") + length(1) + S(b"a description") + S(code)
    without = b"\xf6" + S(b"lib2") + S(b"lua") + length(0) + S(code)
    assert [e for e in parse(rdb(with_desc + without, 10)) if isinstance(e, FunctionLib)] == [
        FunctionLib(b"#!lua name=lib\n" + code),
        FunctionLib(b"#!lua name=lib2\n" + code),
    ]


def test_expiry_idle_and_freq() -> None:
    body = (
        b"\xfe\x00\xfc"
        + struct.pack("<q", 1_700_000_000_123)
        + b"\xf8"
        + length(300)
        + key(0, S(b"a"))
    )
    body += b"\xfd" + struct.pack("<i", 1_700_000_000) + b"\xf9\x05" + key(0, S(b"b"))
    begins = [e for e in parse(rdb(body)) if isinstance(e, KeyBegin)]
    assert [(e.expire_ms, e.lru_idle, e.lfu_freq) for e in begins] == [
        (1_700_000_000_123, 300, None),
        (1_700_000_000_000, None, 5),
    ]


def test_strings_int_lzf_and_parts() -> None:
    assert values(key(0, int_string(-5))) == [StringPart(b"-5")]
    assert values(key(0, int_string(-30000))) == [StringPart(b"-30000")]
    assert values(key(0, int_string(2_000_000_000))) == [StringPart(b"2000000000")]
    assert values(key(0, lzf_literal_string(b"0123456789" * 10))) == [
        StringPart(b"0123456789" * 10)
    ]
    big = bytes(range(256)) * 1000  # 256000 bytes: 4 parts of <= 64 KiB
    parts = values(key(0, S(big)))
    assert [len(p.data) for p in parts if isinstance(p, StringPart)] == [65536, 65536, 65536, 59392]
    assert b"".join(p.data for p in parts if isinstance(p, StringPart)) == big


def test_hashtable_types() -> None:
    assert values(key(1, length(2) + S(b"a") + int_string(7))) == [ListItems([b"a", b"7"])]
    assert values(key(2, length(2) + S(b"a") + S(b"b"))) == [SetMembers([b"a", b"b"])]
    zset3 = (
        length(4) + S(b"a") + b"\x031.5" + S(b"n") + b"\xfd" + S(b"p") + b"\xfe" + S(b"m") + b"\xff"
    )
    (z,) = values(key(3, zset3))
    assert isinstance(z, ZSetMembers) and z.items[0] == (b"a", 1.5) and math.isnan(z.items[1][1])
    assert z.items[2:] == [(b"p", math.inf), (b"m", -math.inf)]
    assert values(key(4, length(1) + S(b"f") + S(b"v"))) == [HashFields([(b"f", b"v")])]
    zset5 = length(2) + S(b"a") + struct.pack("<d", 0.1) + S(b"b") + struct.pack("<d", -1e300)
    assert values(key(5, zset5)) == [ZSetMembers([(b"a", 0.1), (b"b", -1e300)])]


def test_big_hashtable_values_come_in_batches() -> None:
    members = [b"m%d" % i for i in range(1300)]
    events = values(key(2, length(1300) + b"".join(S(m) for m in members)))
    assert [len(e.items) for e in events if isinstance(e, SetMembers)] == [512, 512, 276]
    assert [m for e in events if isinstance(e, SetMembers) for m in e.items] == members


def test_blob_types() -> None:
    pairs: list[bytes | int] = [b"f", b"v", b"n", 12]
    assert values(key(9, S(zipmap([(b"f", b"v")])))) == [HashFields([(b"f", b"v")])]
    assert values(key(10, S(ziplist([b"a", 1])))) == [ListItems([b"a", b"1"])]
    assert values(key(11, S(intset([5, -1], 4)))) == [SetMembers([b"-1", b"5"])]
    assert values(key(12, S(ziplist([b"a", b"2.5", b"b", 3])))) == [
        ZSetMembers([(b"a", 2.5), (b"b", 3.0)])
    ]
    assert values(key(13, S(ziplist(pairs)))) == [HashFields([(b"f", b"v"), (b"n", b"12")])]
    assert values(key(16, S(listpack(pairs)))) == [HashFields([(b"f", b"v"), (b"n", b"12")])]
    assert values(key(17, S(listpack([b"a", b"-inf"])))) == [ZSetMembers([(b"a", -math.inf)])]
    assert values(key(20, S(listpack([b"a", 1])))) == [SetMembers([b"a", b"1"])]
    with pytest.raises(RdbError, match="odd number"):
        values(key(16, S(listpack([b"f"]))))


def test_quicklists() -> None:
    v1 = length(2) + S(ziplist([b"a", 1])) + S(ziplist([b"b"]))
    assert values(key(14, v1)) == [ListItems([b"a", b"1"]), ListItems([b"b"])]
    lp = listpack([b"x" * 40, 2])
    lzf = lzf_literal_string(lp)
    v2 = length(3) + length(2) + S(lp) + length(1) + S(b"plain element") + length(2) + lzf
    assert values(key(18, v2), 10) == [
        ListItems([b"x" * 40, b"2"]),
        ListItems([b"plain element"]),
        ListItems([b"x" * 40, b"2"]),
    ]
    with pytest.raises(RdbError, match="container 3"):
        values(key(18, length(1) + length(3) + S(lp)), 10)


def _stream(rdb_type: int) -> bytes:
    node_key, lp = stream_node(
        (1000, 0),
        [
            ((1000, 0), [(b"f", b"1")]),
            ((1000, 1), [(b"f", b"2")]),
            ((1005, 0), [(b"g", b"x"), (b"h", b"y")]),
        ],
    )
    body = length(1) + S(node_key) + S(lp) + length(3) + length(1005) + length(0)
    if rdb_type >= 19:
        body += length(1000) + length(0) + length(900) + length(1) + length(5)
    body += length(1) + S(b"grp") + length(1000) + length(1)
    if rdb_type >= 19:
        body += b"\x81" + b"\xff" * 8  # entries_read UINT64_MAX: unknown
    body += (
        length(1) + struct.pack(">QQ", 1000, 1) + struct.pack("<q", 1_700_000_000_000) + length(2)
    )
    body += length(2) + S(b"alice") + struct.pack("<q", 1_700_000_000_001)
    if rdb_type >= 21:
        body += struct.pack("<q", 1_700_000_000_002)
    body += length(1) + struct.pack(">QQ", 1000, 1)
    body += (
        S(b"bob")
        + struct.pack("<q", 5)
        + (struct.pack("<q", 6) if rdb_type >= 21 else b"")
        + length(0)
    )
    return key(rdb_type, body)


@pytest.mark.parametrize("rdb_type", [15, 19, 21])
def test_streams(rdb_type: int) -> None:
    events = values(_stream(rdb_type), 10)
    entries, meta, group = events
    assert entries == StreamEntries(
        [
            StreamEntry((1000, 0), [(b"f", b"1")]),
            StreamEntry((1000, 1), [(b"f", b"2")]),
            StreamEntry((1005, 0), [(b"g", b"x"), (b"h", b"y")]),
        ]
    )
    if rdb_type >= 19:
        assert meta == StreamMeta(3, (1005, 0), (1000, 0), (900, 1), 5, 1)
    else:
        assert meta == StreamMeta(3, (1005, 0), (0, 0), (0, 0), 3, 1)
    active = 1_700_000_000_002 if rdb_type >= 21 else None
    assert group == StreamGroup(
        b"grp",
        (1000, 1),
        -1,
        [PendingEntry((1000, 1), 1_700_000_000_000, 2)],
        [
            StreamConsumer(b"alice", 1_700_000_000_001, active, [(1000, 1)]),
            StreamConsumer(b"bob", 5, 6 if rdb_type >= 21 else None, []),
        ],
    )


def test_module_aux_is_skipped_and_module_values_refused() -> None:
    module_id = 0
    for ch in "mymodule1":
        module_id = module_id << 6 | MODULE_CHARSET.index(ch)
    module_id = module_id << 10 | 3
    aux = b"\xf7" + length(module_id) + length(2) + length(2)
    aux += length(1) + length(5) + length(2) + length(7) + length(3) + b"\0" * 4
    aux += length(4) + b"\0" * 8 + length(5) + S(b"opaque") + length(0)
    events = parse(rdb(aux + b"\xfe\x00" + key(0, S(b"v"))))
    assert ModuleAux("mymodule1", 2) in events
    with pytest.raises(RdbUnsupportedError, match="'mymodule1'"):
        parse(rdb(b"\xfe\x00" + key(7, length(module_id) + length(0))))


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        (b"REDIS0011" + b"\xff" + bytes(8), RdbUnsupportedError, "RDB version 11"),
        (b"REDIS0012" + b"\xff" + bytes(8), RdbUnsupportedError, "RDB version 12"),
        (b"REDIS0000", RdbUnsupportedError, "version 0"),
        (b"RDB000010", RdbError, "not an RDB"),
        (
            rdb(b"\xf4" + length(1)),
            RdbUnsupportedError,
            r"opcode 0xf4 \(not written by Redis 7.0\) \(at byte 9\)",
        ),
        (rdb(b"\xfe\x00" + key(8, b"")), RdbUnsupportedError, r"value type 8 .* \(at byte 11\)"),
        (rdb(b"\xfe\x00" + key(22, b"")), RdbUnsupportedError, "value type 22"),
        (rdb(b"\xfe\x00" + key(0, b"\xc4")), RdbError, "string encoding 4"),
        (rdb(b"\xfe\x00" + key(0, b"\x82")), RdbError, "length with first byte 0x82"),
    ],
)
def test_refusals_name_what_and_where(data: bytes, error: type[RdbError], match: str) -> None:
    with pytest.raises(error, match=match):
        parse(data)


def test_checksum_errors_and_checksum_off() -> None:
    data = rdb(b"\xfe\x00" + key(0, S(b"value")))
    broken = data[:-9] + b"\xff" + bytes([data[-8] ^ 1]) + data[-7:]
    with pytest.raises(RdbChecksumError, match="trailer says"):
        parse(broken)
    assert parse(broken, verify=False)[-1] == Eof(struct.unpack("<Q", broken[-8:])[0])
    flipped = data.replace(b"value", b"valuf")
    with pytest.raises(RdbChecksumError):
        parse(flipped)
    off = rdb(b"\xfe\x00" + key(0, S(b"value")), checksum=False)
    assert parse(off)[-1] == Eof(0)
    assert parse(rdb(b"", version=4)[:-8])[-1] == Eof(0)  # before version 5: no trailer


def test_truncation_trailing_data_and_sticky_errors() -> None:
    data = rdb(b"\xfe\x00" + key(0, S(b"value")))
    p = RdbParser()
    p.feed(data[:-3])
    p.events()
    with pytest.raises(RdbError, match="ends before its EOF"):
        p.close()
    p = RdbParser()
    p.feed(data)
    p.events()
    with pytest.raises(RdbError, match="after the RDB's end"):
        p.feed(b"x")
    p = RdbParser()
    p.feed(b"REDIS0011")
    with pytest.raises(RdbUnsupportedError):
        p.next_event()
    with pytest.raises(RdbUnsupportedError):
        p.next_event()
    with pytest.raises(RdbUnsupportedError):
        p.feed(b"more")


def test_byte_by_byte_equals_whole() -> None:
    body = (
        b"\xfe\x00"
        + key(0, S(bytes(100_000)))
        + _stream(19)
        + key(18, length(1) + length(2) + S(listpack([1])))
    )
    data = rdb(body, 10)
    whole = parse(data)
    assert parse(data, step=1) == whole
    assert parse(data, step=4093) == whole
    p = RdbParser()
    p.feed(b"")
    assert p.next_event() is NEED_DATA


def test_parser_modules_do_no_io() -> None:
    root = Path(parser_module.__file__).parent
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not names & {"socket", "asyncio", "selectors"}, path


def test_memory_stays_bounded_for_big_values() -> None:
    """A 4 MB string, a list of 1000 quicklist nodes (2 MB) and a 20k-member set, fed in
    64 KiB chunks: the parser never holds more than a few chunks."""
    node = listpack([b"e" * 60] * 32)
    body = b"\xfe\x00" + key(0, S(bytes(4 << 20)))
    body += key(18, length(1000) + (length(2) + S(node)) * 1000)
    body += key(2, length(20_000) + b"".join(S(b"member-%d" % i) for i in range(20_000)))
    data = rdb(body, 10)
    p = RdbParser(verify_checksum=False)
    peak = items = 0
    for i in range(0, len(data), 65536):
        p.feed(data[i : i + 65536])
        peak = max(peak, p.buffered_bytes)
        for e in p.events():
            peak = max(peak, p.buffered_bytes)
            if isinstance(e, ListItems | SetMembers):
                items += len(e.items)
    p.close()
    assert items == 1000 * 32 + 20_000
    assert peak <= 3 * 65536
