"""The RESP2/RESP3 parser and command encoder (replicator/redis/resp.py; RESP3 spec types)."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest

from replicator.redis import protocol, resp
from replicator.redis.errors import ProtocolError
from replicator.redis.resp import (
    NEED_DATA,
    Attributed,
    Push,
    RespError,
    RespMap,
    RespParser,
    RespSet,
    RespValue,
    SimpleString,
    Verbatim,
    encode_command,
)

CASES: list[tuple[bytes, RespValue]] = [
    (b"+OK\r\n", SimpleString(b"OK")),
    (b"+\r\n", SimpleString(b"")),
    (b"-ERR unknown command\r\n", RespError(b"ERR unknown command")),
    (b":0\r\n", 0),
    (b":-42\r\n", -42),
    (b":9223372036854775807\r\n", 2**63 - 1),
    (b"$3\r\nfoo\r\n", b"foo"),
    (b"$0\r\n\r\n", b""),
    (b"$4\r\na\r\nb\r\n", b"a\r\nb"),
    (b"$-1\r\n", None),
    (b"*0\r\n", []),
    (b"*-1\r\n", None),
    (b"*2\r\n$1\r\na\r\n:1\r\n", [b"a", 1]),
    (b"*2\r\n*1\r\n:1\r\n*0\r\n", [[1], []]),
    (b"_\r\n", None),
    (b"#t\r\n", True),
    (b"#f\r\n", False),
    (b",1.5\r\n", 1.5),
    (b",-2\r\n", -2.0),
    (b",1e3\r\n", 1000.0),
    (b",inf\r\n", math.inf),
    (b",-inf\r\n", -math.inf),
    (
        b"(3492890328409238509324850943850943825024385\r\n",
        3492890328409238509324850943850943825024385,
    ),
    (b"!21\r\nSYNTAX invalid syntax\r\n", RespError(b"SYNTAX invalid syntax")),
    (b"=15\r\ntxt:Some string\r\n", Verbatim(b"txt", b"Some string")),
    (b"%2\r\n+a\r\n:1\r\n+b\r\n:2\r\n", RespMap([(b"a", 1), (b"b", 2)])),
    (b"%1\r\n*1\r\n:1\r\n_\r\n", RespMap([([1], None)])),
    (b"%0\r\n", RespMap([])),
    (b"~2\r\n:1\r\n:2\r\n", RespSet([1, 2])),
    (b">3\r\n+message\r\n+ch\r\n$2\r\nhi\r\n", Push([b"message", b"ch", b"hi"])),
    (
        b"|1\r\n+ttl\r\n:3\r\n*2\r\n:1\r\n:2\r\n",
        Attributed(RespMap([(b"ttl", 3)]), [1, 2]),
    ),
    (b"*1\r\n|0\r\n:7\r\n", [Attributed(RespMap([]), 7)]),
]


@pytest.mark.parametrize(("wire", "value"), CASES)
def test_every_type_whole_and_byte_by_byte(wire: bytes, value: RespValue) -> None:
    whole = RespParser()
    assert whole.items(wire) == [value]
    assert whole.consumed == len(wire) and whole.buffered_bytes == 0
    slow = RespParser()
    got: list[RespValue] = []
    for i in range(len(wire)):
        got += slow.items(wire[i : i + 1])
        if i < len(wire) - 1:
            assert slow.consumed == 0, "no item is complete before its last byte"
    assert got == [value]
    assert slow.consumed == len(wire)


def test_nan_and_simple_string_identity() -> None:
    (nan,) = RespParser().items(b",nan\r\n")
    assert isinstance(nan, float) and math.isnan(nan)
    (status,) = RespParser().items(b"+OK\r\n")
    (bulk,) = RespParser().items(b"$2\r\nOK\r\n")
    assert isinstance(status, SimpleString) and not isinstance(bulk, SimpleString)
    assert RespError(b"WRONGPASS invalid").kind == "WRONGPASS"


def test_consumed_counts_complete_items_only_and_trailing_data_waits() -> None:
    p = RespParser()
    p.feed(b"+OK\r\n*2\r\n$3\r\nSET\r\n$1")
    assert p.next_item() == b"OK"
    assert p.consumed == 5
    assert p.next_item() is NEED_DATA
    assert p.consumed == 5 and p.buffered_bytes == 15
    p.feed(b"\r\nk\r\n:1")
    assert p.next_item() == [b"SET", b"k"]
    assert p.consumed == 25
    assert p.next_item() is NEED_DATA and p.buffered_bytes == 2


def test_a_large_array_in_many_chunks() -> None:
    argv = [b"RPUSH", b"k", *(b"v%d" % i for i in range(20_000))]
    wire = encode_command(argv)
    p = RespParser()
    out: list[RespValue] = []
    for i in range(0, len(wire), 1000):
        out += p.items(wire[i : i + 1000])
    assert out == [argv] and p.consumed == len(wire)


def test_encode_command() -> None:
    assert encode_command([b"PING"]) == b"*1\r\n$4\r\nPING\r\n"
    assert encode_command([b"SET", b"k", b""]) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
    argv = [b"a\r\nb", bytes(range(256))]
    assert RespParser().items(encode_command(argv)) == [argv]


@pytest.mark.parametrize(
    ("wire", "message", "offset"),
    [
        (b"?x\r\n", "type byte b'?' is none of", 0),
        (b":1\r\n:12a\r\n", "integer b'12a' is not an integer", 4),
        (b":99999999999999999999\r\n", "is not an integer", 0),
        (b"$x\r\n", "bulk string length b'x' is not an integer", 0),
        (b"$-2\r\n", "bulk string length -2 is negative", 0),
        (b"!-1\r\n", "blob error length -1 is negative", 0),
        (b"$3\r\nfooXX", "bulk string of 3 bytes is not followed by CRLF", 7),
        (b"%-1\r\n", "map length -1 is negative", 0),
        (b"#x\r\n", "boolean b'x' is neither t nor f", 0),
        (b",1_0\r\n", "double b'1_0' does not parse", 0),
        (b",\r\n", "double b'' does not parse", 0),
        (b"(12x\r\n", "big number b'12x' does not parse", 0),
        (b"_x\r\n", "null carries", 0),
        (b"=3\r\nabc\r\n", "verbatim string lacks its 'fmt:' prefix", 4),
        (b"(" + b"9" * 5000 + b"\r\n", "big number has too many digits", 0),
    ],
)
def test_malformed_input_names_what_and_where(wire: bytes, message: str, offset: int) -> None:
    p = RespParser()
    with pytest.raises(ProtocolError, match=re.escape(message)) as e:
        p.items(wire)
    assert e.value.offset == offset
    with pytest.raises(ProtocolError):  # broken for good: the stream cannot be resynchronised
        p.items(b"+OK\r\n")


def test_limits_are_named() -> None:
    with pytest.raises(ProtocolError, match="exceeds max_bulk_bytes=10"):
        RespParser(max_bulk_bytes=10).items(b"$11\r\n")
    assert RespParser(max_bulk_bytes=10).items(b"$10\r\n0123456789\r\n") == [b"0123456789"]
    with pytest.raises(ProtocolError, match="exceeds max_bulk_bytes=3") as e:
        RespParser(max_bulk_bytes=3).items(encode_command([b"SET", b"toolong"]))
    assert e.value.offset == 13
    with pytest.raises(ProtocolError, match="exceeds max_aggregate_len=2"):
        RespParser(max_aggregate_len=2).items(encode_command([b"a", b"b", b"c"]))
    with pytest.raises(ProtocolError, match="deeper than max_depth=0"):
        RespParser(max_depth=0).items(encode_command([b"PING"]))
    with pytest.raises(ProtocolError, match="exceeds max_aggregate_len=2"):
        RespParser(max_aggregate_len=2).items(b"*3\r\n")
    with pytest.raises(ProtocolError, match="exceeds max_aggregate_len=2"):
        RespParser(max_aggregate_len=2).items(b"%3\r\n")
    with pytest.raises(ProtocolError, match="deeper than max_depth=3") as e:
        RespParser(max_depth=3).items(b"*1\r\n*1\r\n*1\r\n*1\r\n")
    assert e.value.offset == 12
    assert RespParser(max_depth=3).items(b"*1\r\n*1\r\n*1\r\n:1\r\n") == [[[[1]]]]
    with pytest.raises(ProtocolError, match="longer than max_line_bytes=8"):
        RespParser(max_line_bytes=8).items(b"+" + b"x" * 20)
    # a line that fits is only waited for
    assert RespParser(max_line_bytes=8).items(b"+xxxxx") == []


def test_error_offsets_include_the_base_and_dropped_bytes() -> None:
    p = RespParser(base_offset=1000)
    for _ in range(100):
        p.items(b"+OK\r\n")
    assert p.consumed == 500, "consumed counts this parser's bytes, not the base"
    with pytest.raises(ProtocolError) as e:
        p.items(b"?")
    assert e.value.offset == 1500


def test_resp_and_protocol_modules_are_sans_io() -> None:
    """STYLE.md 1: parser modules import neither sockets nor asyncio (as the remoting codec)."""
    for module in (resp, protocol):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        } | {
            (node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        }
        assert not imported & {"socket", "asyncio", "selectors", "ssl", "uvloop", "redis"}, module
