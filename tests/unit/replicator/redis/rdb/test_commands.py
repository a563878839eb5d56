"""Events -> replay commands: bounded commands, exact scores, expiry after the value, streams."""

from __future__ import annotations

import math

from replicator.redis.rdb.commands import MAX_COMMAND_ITEMS, CommandReplay, format_score
from replicator.redis.rdb.events import (
    FunctionLib,
    HashFields,
    KeyBegin,
    KeyEnd,
    ListItems,
    PendingEntry,
    SelectDb,
    StreamConsumer,
    StreamEntries,
    StreamEntry,
    StreamGroup,
    StreamMeta,
    StringPart,
    ZSetMembers,
)


def _begin(kind: str, expire: int | None = None) -> KeyBegin:
    return KeyBegin(0, b"k", kind, 0, expire, None, None, 0)


def test_scores_are_exact() -> None:
    for x in (0.1, 1 / 3, 2.0**53 + 2, 5e-324, -0.0, 1e308):
        assert float(format_score(x)) == x
    assert format_score(math.inf) == b"inf" and format_score(-math.inf) == b"-inf"


def test_strings_lists_and_expiry() -> None:
    r = CommandReplay()
    out = [
        c
        for e in [
            SelectDb(2),
            _begin("string", 99),
            StringPart(b"a"),
            StringPart(b"b"),
            KeyEnd(b"k"),
        ]
        for c in r.commands(e)
    ]
    assert out == [
        [b"SELECT", b"2"],
        [b"SET", b"k", b"a"],
        [b"APPEND", b"k", b"b"],
        [b"PEXPIREAT", b"k", b"99"],
    ]
    r.commands(_begin("list"))
    cmds = r.commands(ListItems([b"%d" % i for i in range(MAX_COMMAND_ITEMS + 3)]))
    assert [len(c) - 2 for c in cmds] == [MAX_COMMAND_ITEMS, 3]
    big = r.commands(HashFields([(b"f%d" % i, b"v" * 300_000) for i in range(5)]))
    assert [len(c) for c in big] == [2 + 8, 2 + 2]  # ~1 MiB per command
    assert r.commands(ZSetMembers([(b"m", 1.5)])) == [[b"ZADD", b"k", b"1.5", b"m"]]
    assert r.commands(FunctionLib(b"code")) == [[b"FUNCTION", b"LOAD", b"REPLACE", b"code"]]


def test_stream_rebuild() -> None:
    r = CommandReplay()
    r.commands(_begin("stream"))
    assert r.commands(StreamEntries([StreamEntry((1, 2), [(b"f", b"v")])])) == [
        [b"XADD", b"k", b"1-2", b"f", b"v"]
    ]
    assert r.commands(StreamMeta(1, (3, 0), (1, 2), (2, 0), 4, 1)) == [
        [b"XSETID", b"k", b"3-0", b"ENTRIESADDED", b"4", b"MAXDELETEDID", b"2-0"]
    ]
    group = StreamGroup(
        b"g",
        (1, 2),
        1,
        [PendingEntry((1, 2), 77, 3)],
        [StreamConsumer(b"c", 0, None, [(1, 2)]), StreamConsumer(b"d", 0, None, [])],
    )
    assert r.commands(group) == [
        [b"XGROUP", b"CREATE", b"k", b"g", b"1-2", b"ENTRIESREAD", b"1"],
        [b"XGROUP", b"CREATECONSUMER", b"k", b"g", b"c"],
        [
            b"XCLAIM",
            b"k",
            b"g",
            b"c",
            b"0",
            b"1-2",
            b"TIME",
            b"77",
            b"RETRYCOUNT",
            b"3",
            b"FORCE",
            b"JUSTID",
        ],
        [b"XGROUP", b"CREATECONSUMER", b"k", b"g", b"d"],
    ]
    r.commands(KeyEnd(b"k"))
    r.commands(_begin("stream"))
    empty = r.commands(StreamMeta(0, (5, 0), (0, 0), (5, 0), 1, 0))
    assert [c[:2] for c in empty] == [
        [b"XGROUP", b"CREATE"],
        [b"XGROUP", b"DESTROY"],
        [b"XSETID", b"k"],
    ]
