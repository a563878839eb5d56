"""The command table (replicator/redis/commands.py): keys by key specs, writes by flags."""

from __future__ import annotations

import json

import pytest

from replicator.redis.commands import CommandTable, _as_map, snapshot


def keys(*argv: bytes) -> list[bytes]:
    spec = snapshot().lookup(argv)
    assert spec is not None
    return [k.key for k in spec.find_keys(argv).keys]


def complete(*argv: bytes) -> bool:
    spec = snapshot().lookup(argv)
    assert spec is not None
    return spec.find_keys(argv).complete


def test_snapshot_is_redis_7_0_15_with_subcommands() -> None:
    table = snapshot()
    assert table.redis_version == "7.0.15"
    for name in ("set", "function|load", "xgroup|create", "config|set", "script|flush"):
        assert table.get(name) is not None, name
    assert table.lookup([b"XGROUP", b"CREATE", b"s", b"g", b"$"]).name == "xgroup|create"  # type: ignore[union-attr]
    assert table.lookup([b"function", b"load", b"x"]).name == "function|load"  # type: ignore[union-attr]
    # an unknown subcommand of a container, like an unknown command, is None (not the
    # container, whose own spec has no keys and no write flag: it would be dropped)
    assert table.lookup([b"XGROUP", b"NOPE"]) is None
    assert table.lookup([b"XGROUP"]).name == "xgroup"  # type: ignore[union-attr]
    assert table.lookup([b"NOSUCHCOMMAND", b"k"]) is None
    assert table.lookup([]) is None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ((b"SET", b"k", b"v", b"PXAT", b"1"), [b"k"]),
        ((b"MSET", b"a", b"1", b"b", b"2"), [b"a", b"b"]),
        ((b"DEL", b"a", b"b", b"c"), [b"a", b"b", b"c"]),
        ((b"RENAME", b"a", b"b"), [b"a", b"b"]),
        ((b"LMOVE", b"a", b"b", b"LEFT", b"RIGHT"), [b"a", b"b"]),
        ((b"SMOVE", b"a", b"b", b"m"), [b"a", b"b"]),
        ((b"COPY", b"a", b"b", b"DB", b"3"), [b"a", b"b"]),
        ((b"MOVE", b"a", b"3"), [b"a"]),
        # keynum: numkeys at index 2 (ZUNIONSTORE dest numkeys k…), at 1 (LMPOP), EVAL's 2
        ((b"ZUNIONSTORE", b"d", b"2", b"a", b"b", b"WEIGHTS", b"1", b"2"), [b"d", b"a", b"b"]),
        ((b"LMPOP", b"2", b"a", b"b", b"LEFT"), [b"a", b"b"]),
        ((b"EVAL", b"return 1", b"2", b"x", b"y", b"arg"), [b"x", b"y"]),
        ((b"FCALL", b"f", b"1", b"x", b"arg"), [b"x"]),
        ((b"EVAL", b"return 1", b"0"), []),
        # keyword begin_search with limit: STREAMS k1 k2 id1 id2 (half of the rest are keys)
        (
            (b"XREADGROUP", b"GROUP", b"g", b"c", b"STREAMS", b"s1", b"s2", b"0", b"0"),
            [b"s1", b"s2"],
        ),
        # keyword searched backwards (startfrom -2): MIGRATE … "" … KEYS k1 k2 (the empty key
        # at index 3 is what the first spec names, as COMMAND GETKEYS says too)
        (
            (b"MIGRATE", b"h", b"1", b"", b"0", b"5000", b"KEYS", b"k1", b"k2"),
            [b"", b"k1", b"k2"],
        ),
        ((b"BITOP", b"AND", b"d", b"a", b"b"), [b"d", b"a", b"b"]),
        ((b"XGROUP", b"CREATE", b"st", b"g", b"$"), [b"st"]),
        ((b"FLUSHALL",), []),
        ((b"SWAPDB", b"0", b"1"), []),
    ],
)
def test_keys_by_key_specs(argv: tuple[bytes, ...], expected: list[bytes]) -> None:
    assert keys(*argv) == expected


def test_incomplete_and_unknown_specs_say_so() -> None:
    assert complete(b"SET", b"k", b"v")
    assert not complete(b"SORT", b"k", b"STORE", b"d")  # STORE's spec is "unknown"
    assert not complete(b"MIGRATE", b"h", b"1", b"", b"0", b"5000", b"KEYS", b"k1")  # incomplete
    assert not complete(b"EVAL", b"s", b"x")  # numkeys not a number
    assert not complete(b"EVAL", b"s", b"5", b"a")  # more keys declared than given
    assert not complete(b"EVAL", b"s", b"-1")


def test_write_and_effect_come_from_flags_and_acl_categories() -> None:
    table = snapshot()
    for name in ("set", "del", "flushall", "swapdb", "function|load", "xgroup|create", "move"):
        spec = table.get(name)
        assert spec is not None and spec.is_write and spec.is_effect, name
    for name in ("get", "ping", "select", "multi", "exec", "publish", "replconf", "eval_ro"):
        spec = table.get(name)
        assert spec is not None and not spec.is_effect, name
    # scripts carry no write flag but may write: effects (7.0 sends their effects, an older
    # master the script itself)
    for name in ("eval", "evalsha", "fcall", "script|load", "script|flush"):
        spec = table.get(name)
        assert spec is not None and not spec.is_write and spec.is_effect, name
    # the write flag and the @write ACL category agree across the whole 7.0.15 table
    assert all(("write" in s.flags) == ("@write" in s.acl_categories) for s in table.specs.values())


def test_resp2_flat_maps_are_read_like_resp3_maps() -> None:
    assert _as_map(["type", "index", "spec", ["index", 1]]) == {
        "type": "index",
        "spec": ["index", 1],
    }
    assert _as_map({"a": 1}) == {"a": 1}
    assert _as_map([]) == {}
    with pytest.raises(ValueError):
        _as_map(["odd"])


def test_from_raw_round_trips_a_minimal_table() -> None:
    raw = {
        "redis_version": "9.9.9",
        "commands": {
            "newcmd": {
                "arity": -2,
                "flags": ["write"],
                "acl_categories": ["@write"],
                "key_specs": [
                    {
                        "flags": ["RW", "update"],
                        "begin_search": {"type": "index", "spec": {"index": 1}},
                        "find_keys": {
                            "type": "range",
                            "spec": {"keystep": 1, "lastkey": -1, "limit": 0},
                        },
                    }
                ],
                "group": "generic",
                "subcommands": [],
            }
        },
    }
    table = CommandTable.from_json(json.dumps(raw))
    spec = table.lookup([b"NEWCMD", b"a", b"b"])
    assert spec is not None and spec.is_write and table.redis_version == "9.9.9"
    assert [k.key for k in spec.find_keys([b"NEWCMD", b"a", b"b"]).keys] == [b"a", b"b"]
    assert spec.find_keys([b"NEWCMD", b"a"]).keys[0].flags == frozenset({"rw", "update"})
