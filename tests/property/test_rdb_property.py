"""RDB parser properties (STYLE.md 13): any chunking of the bytes gives the same events;
random bytes and any flipped bit raise RdbError and nothing else."""

from __future__ import annotations

import itertools
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.redis.errors import RdbError
from replicator.redis.rdb import RdbParser
from replicator.redis.rdb.events import Event
from tests.unit.replicator.redis.rdb import rdbgen as g


def _sample() -> bytes:
    s = g.string
    node_key, lp = g.stream_node(
        (5, 0), [((5, 0), [(b"f", b"1")]), ((6, 1), [(b"g", b"2"), (b"h", b"")])]
    )
    body = b"\xfa" + s(b"redis-ver") + s(b"7.0.15") + b"\xf5" + s(b"#!lua name=l\n")
    body += b"\xfe\x00\xfb" + g.length(9) + g.length(1)
    body += (
        b"\xfc"
        + struct.pack("<q", 1 << 40)
        + b"\xf9\x07\x00"
        + s(b"s")
        + s(bytes(range(256)) * 300)
    )
    body += (
        b"\x00"
        + s(b"i")
        + g.int_string(-77)
        + b"\x00"
        + s(b"z")
        + g.lzf_literal_string(b"abc" * 30)
    )
    body += (
        b"\x12"
        + s(b"l")
        + g.length(2)
        + g.length(2)
        + s(g.listpack([b"a", 1, -5000]))
        + g.length(1)
        + s(b"p")
    )
    body += b"\x02" + s(b"set") + g.length(600) + b"".join(s(b"%d" % i) for i in range(600))
    body += (
        b"\x05"
        + s(b"zs")
        + g.length(2)
        + s(b"a")
        + struct.pack("<d", 0.5)
        + s(b"b")
        + struct.pack("<d", -3.0)
    )
    body += (
        b"\x10"
        + s(b"h")
        + s(g.listpack([b"f", b"v"]))
        + b"\x0b"
        + s(b"is")
        + s(g.intset([1, 2], 8))
    )
    body += b"\x0d" + s(b"hz") + s(g.ziplist([b"f", 70000]))
    body += (
        b"\x13"
        + s(b"x")
        + g.length(1)
        + s(node_key)
        + s(lp)
        + g.length(2)
        + g.length(6)
        + g.length(1)
    )
    body += g.length(5) + g.length(0) + g.length(0) + g.length(0) + g.length(2) + g.length(1)
    body += s(b"grp") + g.length(6) + g.length(1) + g.length(2) + g.length(0)
    body += g.length(1) + s(b"c") + struct.pack("<q", 9) + g.length(0)
    return g.rdb(body, version=10)


SAMPLE = _sample()


def _events(chunks: list[bytes], verify: bool = True) -> list[Event]:
    p = RdbParser(verify_checksum=verify)
    out: list[Event] = []
    for c in chunks:
        p.feed(c)
        out += p.events()
    p.close()
    return out


WHOLE = _events([SAMPLE])


@given(st.lists(st.integers(0, len(SAMPLE)), max_size=40))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(SAMPLE)]
    assert _events([SAMPLE[a:b] for a, b in itertools.pairwise(bounds)]) == WHOLE


@given(st.binary(max_size=300), st.booleans())
def test_random_bytes_raise_only_rdb_errors(data: bytes, with_header: bool) -> None:
    try:
        _events([b"REDIS0010" + data if with_header else data])
    except RdbError:
        pass


@settings(max_examples=300)
@given(st.integers(0, len(SAMPLE) * 8 - 1), st.booleans())
def test_any_flipped_bit_is_caught(bit: int, verify: bool) -> None:
    broken = bytearray(SAMPLE)
    broken[bit // 8] ^= 1 << (bit % 8)
    try:
        _events([bytes(broken)], verify=verify)
    except RdbError:
        return
    assert not verify, "a flipped bit went through with the checksum on"
