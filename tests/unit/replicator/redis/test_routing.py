"""Routing (replicator/redis/routing.py): key hash, split, copies to touched queues, broadcast."""

from __future__ import annotations

import zlib

from replicator.redis.commands import snapshot
from replicator.redis.routing import RULES, SPLIT_BY_NAME, Piece, Route, plan, queue_of

N = 8


def route(*argv: bytes, n: int = N) -> tuple[Route, list[Piece]]:
    return plan(snapshot().lookup(argv), argv, n)


def two_keys_on_different_queues(n: int = N) -> tuple[bytes, bytes]:
    a = b"a"
    b = next(k for k in (b"b%d" % i for i in range(100)) if queue_of(k, n) != queue_of(a, n))
    return a, b


def two_keys_on_one_queue(n: int = N) -> tuple[bytes, bytes]:
    a = b"a"
    b = next(k for k in (b"b%d" % i for i in range(1000)) if queue_of(k, n) == queue_of(a, n))
    return a, b


def test_queue_is_crc32_of_the_key_mod_count() -> None:
    assert queue_of(b"user:1", 8) == zlib.crc32(b"user:1") % 8
    assert queue_of(b"\x00\xff", 3) == zlib.crc32(b"\x00\xff") % 3


def test_single_key_goes_to_its_queue_without_part() -> None:
    r, pieces = route(b"SET", b"k", b"v")
    assert r is Route.SINGLE
    assert pieces == [Piece(queue_of(b"k", N), (b"SET", b"k", b"v"), (b"k",), "")]


def test_mset_and_del_split_per_queue_with_parts() -> None:
    a, b = two_keys_on_different_queues()
    c = next(k for k in (b"c%d" % i for i in range(100)) if queue_of(k, N) == queue_of(a, N))
    r, pieces = route(b"MSET", a, b"1", b, b"2", c, b"3")
    assert r is Route.SPLIT
    assert len(pieces) == 2
    by_q = {p.queue_id: p for p in pieces}
    assert by_q[queue_of(a, N)].argv == (b"MSET", a, b"1", c, b"3")
    assert by_q[queue_of(b, N)].argv == (b"MSET", b, b"2")
    assert sorted(p.part for p in pieces) == ["1/2", "2/2"]
    r, pieces = route(b"DEL", a, b)
    assert r is Route.SPLIT and {p.argv for p in pieces} == {(b"DEL", a), (b"DEL", b)}
    r, pieces = route(b"UNLINK", a, b)
    assert r is Route.SPLIT and len(pieces) == 2


def test_multi_key_on_one_queue_is_single() -> None:
    a, b = two_keys_on_one_queue()
    assert route(b"RENAME", a, b)[0] is Route.SINGLE
    assert route(b"MSET", a, b"1", b, b"2")[0] is Route.SINGLE


def test_whole_commands_go_to_every_touched_queue_as_copies() -> None:
    a, b = two_keys_on_different_queues()
    for argv in (
        (b"RENAME", a, b),
        (b"SMOVE", a, b, b"m"),
        (b"LMOVE", a, b, b"LEFT", b"RIGHT"),
        (b"SUNIONSTORE", a, b),
        (b"ZUNIONSTORE", a, b"1", b),
        (b"BITOP", b"OR", a, b),
        (b"MSETNX", a, b"1", b, b"2"),  # all-or-nothing: never split
        (b"EVAL", b"return 1", b"2", a, b),
        (b"FCALL", b"f", b"2", a, b),
        (b"COPY", a, b, b"DB", b"2"),
    ):
        r, pieces = route(*argv)
        assert r is Route.TOUCHED, argv
        assert sorted(p.queue_id for p in pieces) == sorted({queue_of(a, N), queue_of(b, N)})
        assert all(p.argv == argv and p.part == "*/2" for p in pieces), argv


def test_keyless_and_unknown_go_to_every_queue() -> None:
    for argv in (
        (b"FLUSHALL",),
        (b"FLUSHDB", b"ASYNC"),
        (b"SWAPDB", b"0", b"1"),
        (b"FUNCTION", b"LOAD", b"#!lua name=x\n"),
        (b"FUNCTION", b"DELETE", b"x"),
        (b"FUNCTION", b"FLUSH"),
        (b"FUNCTION", b"RESTORE", b"payload"),
        (b"SCRIPT", b"FLUSH"),
        (b"EVAL", b"return 1", b"0"),
        (b"SORT", b"k", b"BY", b"w_*", b"STORE", b"d"),  # keys from content: unknown spec
        (b"NOSUCHCOMMAND", b"k"),
        (b"XGROUP", b"NEWSUBCOMMAND", b"k"),
    ):
        r, pieces = route(*argv)
        assert r is Route.ALL, argv
        assert [p.queue_id for p in pieces] == list(range(N))
        assert all(p.part == f"*/{N}" and p.argv == argv for p in pieces)
    # with one queue there is nothing to tell apart: no part
    r, pieces = route(b"FLUSHALL", n=1)
    assert r is Route.ALL and pieces[0].part == ""


def test_rules_table_ends_with_a_catch_all_and_split_table_is_small() -> None:
    assert RULES[-1][2] is Route.TOUCHED
    assert set(SPLIT_BY_NAME) == {"mset", "del", "unlink"}
    for name in SPLIT_BY_NAME:
        spec = snapshot().get(name)
        assert spec is not None and spec.is_write  # names from Redis's table, not typos
