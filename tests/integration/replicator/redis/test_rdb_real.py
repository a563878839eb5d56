"""The RDB parser against dumps of a real redis-server 7.0.15 holding every encoding it writes.

Oracle: parse ``dump.rdb`` in random chunk sizes, replay the commands (rdb/commands.py) into a
second, empty server and compare ``DEBUG DIGEST``; on a mismatch the failure lists the keys
whose ``DEBUG DIGEST-VALUE`` differ. Each encoding is checked to be really there
(``OBJECT ENCODING`` before SAVE, and the RDB type bytes the parser saw).
"""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import pytest
import redis

from replicator.redis.errors import RdbChecksumError, RdbError
from replicator.redis.rdb import NEED_DATA, RdbParser
from replicator.redis.rdb.commands import CommandReplay
from replicator.redis.rdb.events import Eof, Event, FunctionLib, KeyBegin, ModuleAux
from tests.redis_harness import RedisServer

pytestmark = pytest.mark.integration

SMALL = {
    "list-max-listpack-size": "4",
    "list-compress-depth": "1",
    "set-max-intset-entries": "16",
    "hash-max-listpack-entries": "8",
    "zset-max-listpack-entries": "8",
    "enable-debug-command": "yes",
    "databases": "16",
}
LIBRARY = (
    b"#!lua name=rdblib\nredis.register_function('echo1', function(keys, args) return args[1] end)"
)


def _populate(r: redis.Redis, rng: random.Random) -> dict[bytes, bytes]:
    """Keys of every encoding; returns {key: expected OBJECT ENCODING} for db 0."""
    want: dict[bytes, bytes] = {}
    r.execute_command("DEBUG", "QUICKLIST-PACKED-THRESHOLD", "200")
    r.set(b"s:int", b"-12345")
    r.set(b"s:int8", b"7")
    r.set(b"s:emb", b"short")
    r.set(b"s:raw", b"x" * 100 + rng.randbytes(50))
    r.set(b"s:lzf", b"abcdefgh" * 20000)  # 160 KB, compresses
    r.set(b"s:big", rng.randbytes(200_000))  # raw, streamed in parts
    r.set(bytes(range(256)), bytes(range(256)))  # every byte value in a key
    want |= {b"s:int": b"int", b"s:emb": b"embstr", b"s:raw": b"raw"}
    r.rpush(b"l:small", b"a", b"-300", b"70000", b"5000000000")
    r.rpush(b"l:ints", b"1", b"10000", b"-70000000", b"-1")
    want |= {b"l:small": b"quicklist", b"l:ints": b"quicklist"}  # 7.0: lists are quicklists
    r.rpush(b"l:nodes", *[b"item-%d" % i for i in range(200)])  # many packed nodes, compressed
    r.rpush(b"l:plain", b"a", b"p" * 500, b"b", rng.randbytes(300))  # plain nodes
    want |= {b"l:nodes": b"quicklist", b"l:plain": b"quicklist"}
    r.sadd(b"set:int", 1, 2, 3, -40000, 5_000_000_000)
    r.sadd(b"set:bigint", *range(100))
    r.sadd(b"set:str", b"a", b"b", bytes([0, 255]))
    want |= {b"set:int": b"intset", b"set:bigint": b"hashtable", b"set:str": b"hashtable"}
    r.hset(b"h:small", mapping={b"f1": b"v1", b"n": b"12", bytes([0]): bytes([255])})
    r.hset(b"h:big", mapping={b"f%d" % i: b"v" * (i % 7) for i in range(50)})
    want |= {b"h:small": b"listpack", b"h:big": b"hashtable"}
    scores = [0.1, -0.0, 1e-300, 2.0**53 + 1, float("inf"), float("-inf"), 3, -7.25]
    r.zadd(b"z:small", {b"m%d" % i: s for i, s in enumerate(scores[:6])})
    r.zadd(b"z:big", {b"m%d" % i: rng.uniform(-1e6, 1e6) for i in range(40)} | {b"x": 1 / 3})
    want |= {b"z:small": b"listpack", b"z:big": b"skiplist"}
    r.set(b"exp:s", b"v", pxat=4102444800123)
    r.rpush(b"exp:l", b"a")
    r.pexpireat(b"exp:l", 4102444800999)
    # streams: entries with same and different fields, deleted entries, groups, PEL, consumers
    for i in range(30):
        fields = {b"a": b"%d" % i} if i % 3 else {b"a": b"x", b"b%d" % i: b"y"}
        r.xadd(b"x:full", fields, id=b"%d-%d" % (1000 + i // 4, i))
    r.xdel(b"x:full", b"1000-1", b"1007-29")
    r.xgroup_create(b"x:full", b"g1", id=b"0")
    r.xgroup_create(b"x:full", b"g-unread", id=b"$")
    r.xreadgroup(b"g1", b"alice", {b"x:full": b">"}, count=5)
    r.xreadgroup(b"g1", b"bob", {b"x:full": b">"}, count=3)
    r.xack(b"x:full", b"g1", b"1000-2")
    r.execute_command("XGROUP", "CREATECONSUMER", b"x:full", b"g1", b"idle")
    r.xgroup_create(b"x:empty", b"g", id=b"$", mkstream=True)
    want |= {b"x:full": b"stream", b"x:empty": b"stream"}
    r.function_load(LIBRARY.decode())
    for db in range(1, 16):
        r.execute_command("SELECT", db)
        r.set(b"db", b"%d" % db)
        r.hset(b"h", b"db", b"%d" % db)
    r.execute_command("SELECT", 0)
    return want


def _parse(data: bytes, rng: random.Random, verify: bool = True) -> list[Event]:
    parser = RdbParser(verify_checksum=verify)
    events: list[Event] = []
    i = 0
    while i < len(data):
        n = rng.choice([1, 7, 100, 4096, 65536, 1 << 20])
        parser.feed(data[i : i + n])
        i += n
        while (event := parser.next_event()) is not NEED_DATA:
            events.append(event)  # type: ignore[arg-type]
    parser.close()
    return events


def _replay(events: list[Event], target: RedisServer) -> None:
    r = target.client()
    replay = CommandReplay()
    pipe = r.pipeline(transaction=False)
    for event in events:
        for argv in replay.commands(event):
            pipe.execute_command(*argv)
        if len(pipe) > 1000:
            pipe.execute()
    pipe.execute()


def _diff(a: redis.Redis, b: redis.Redis) -> list[Any]:
    out = []
    for db in range(16):
        a.execute_command("SELECT", db)
        b.execute_command("SELECT", db)
        for key in a.keys(b"*"):
            da = a.execute_command("DEBUG", "DIGEST-VALUE", key)
            db_ = b.execute_command("DEBUG", "DIGEST-VALUE", key)
            if da != db_:
                out.append((db, key, a.type(key), b.type(key)))
    return out


@pytest.mark.parametrize("policy", ["allkeys-lfu", "allkeys-lru"])
def test_every_encoding_replays_to_the_same_digest(tmp_path: Path, policy: str) -> None:
    rng = random.Random(policy)
    config = SMALL | {"maxmemory-policy": policy}
    with (
        RedisServer(tmp_path, config, name="source") as source,
        RedisServer(tmp_path, config, name="target") as target,
    ):
        r = source.client()
        want = _populate(r, rng)
        for key, encoding in want.items():
            assert r.object("encoding", key) == encoding, key
        r.save()
        data = (source.dir / "dump.rdb").read_bytes()
        events = _parse(data, rng)
        types = {e.rdb_type for e in events if isinstance(e, KeyBegin)}
        assert {0, 2, 4, 5, 11, 16, 17, 18, 19} <= types
        assert len({e.db for e in events if isinstance(e, KeyBegin)}) == 16
        assert [e.code for e in events if isinstance(e, FunctionLib)] == [LIBRARY]
        assert not [e for e in events if isinstance(e, ModuleAux)]
        begins = [e for e in events if isinstance(e, KeyBegin)]
        if policy == "allkeys-lfu":
            assert all(e.lfu_freq is not None and e.lru_idle is None for e in begins)
        else:
            assert all(e.lru_idle is not None and e.lfu_freq is None for e in begins)
        assert {e.key: e.expire_ms for e in begins if e.expire_ms} == {
            b"exp:s": 4102444800123,
            b"exp:l": 4102444800999,
        }
        _replay(events, target)
        t = target.client()
        source_digest = r.execute_command("DEBUG", "DIGEST")
        assert source_digest != b"0" * 40
        assert t.execute_command("DEBUG", "DIGEST") == source_digest, _diff(r, t)
        assert t.pexpiretime(b"exp:s") == 4102444800123
        assert t.function_list() == r.function_list() != []
        # what the digest does not cover: stream groups, PEL and consumers
        for key in (b"x:full", b"x:empty"):
            assert (
                t.xinfo_stream(key)["last-generated-id"] == r.xinfo_stream(key)["last-generated-id"]
            )
            assert t.xinfo_stream(key)["entries-added"] == r.xinfo_stream(key)["entries-added"]
            assert (
                t.xinfo_stream(key)["max-deleted-entry-id"]
                == r.xinfo_stream(key)["max-deleted-entry-id"]
            )
            assert _groups(t, key) == _groups(r, key)


def _groups(r: redis.Redis, key: bytes) -> list[Any]:
    out = []
    for g in r.xinfo_groups(key):
        pel = r.xpending_range(key, g["name"], b"-", b"+", 1000)
        out.append(
            (
                g["name"],
                g["last-delivered-id"],
                g["entries-read"],
                g["pending"],
                sorted((p["message_id"], p["consumer"], p["times_delivered"]) for p in pel),
                sorted((c["name"], c["pending"]) for c in r.xinfo_consumers(key, g["name"])),
            )
        )
    return out


def test_flipped_bit_and_checksum_off(tmp_path: Path) -> None:
    rng = random.Random(7)
    with RedisServer(tmp_path, SMALL, name="source") as source:
        r = source.client()
        _populate(r, rng)
        r.save()
        data = (source.dir / "dump.rdb").read_bytes()
        for _ in range(20):
            at = rng.randrange(9, len(data) - 8)
            broken = bytearray(data)
            broken[at] ^= 1 << rng.randrange(8)
            with pytest.raises(RdbError):
                _parse(bytes(broken), rng)
        # a flip inside a raw string's bytes leaves the structure whole: only the CRC sees it
        at = data.index(b"s:big") + 1000  # inside its 200 KB of random (raw) bytes
        broken = bytearray(data)
        broken[at] ^= 0x01
        with pytest.raises(RdbChecksumError):
            _parse(bytes(broken), rng)
    # rdbchecksum is immutable at run time: a server started with it off
    with RedisServer(tmp_path, SMALL | {"rdbchecksum": "no"}, name="nocrc") as nocrc:
        r = nocrc.client()
        _populate(r, rng)
        r.save()
        unchecked = (nocrc.dir / "dump.rdb").read_bytes()
        assert unchecked[-8:] == bytes(8)
        events = _parse(unchecked, rng)
        assert events[-1] == Eof(0)


def test_legacy_encodings_load_the_same_in_redis(tmp_path: Path) -> None:
    """Types 7.0 only reads (1, 3, 9, 10, 12, 13, 14, 15) and a 7.0-rc function (``0xF6``),
    hand-made: redis-server loads the file, our replay of the same file must give its digest."""
    from tests.unit.replicator.redis.rdb import rdbgen as g

    s = g.string
    node_key, lp = g.stream_node(
        (1000, 0), [((1000, 0), [(b"f", b"1")]), ((1001, 5), [(b"g", b"2")])]
    )
    code = b"redis.register_function('legacy_fn', function(keys, args) return 2 end)"
    body = b"\xf6" + s(b"oldlib") + s(b"LUA") + g.length(1) + s(b"7.0-rc format") + s(code)
    body += b"\xfe\x00" + b"\xfb" + g.length(12) + g.length(1)
    body += b"\x00" + s(b"str:int") + g.int_string(-1234)
    body += (
        b"\xfc"
        + struct.pack("<q", 4102444800000)
        + b"\x00"
        + s(b"str:lzf")
        + g.lzf_literal_string(b"q" * 90)
    )
    body += b"\x01" + s(b"list1") + g.length(2) + s(b"a") + g.int_string(5)
    body += b"\x03" + s(b"zset3") + g.length(2) + s(b"a") + b"\x031.5" + s(b"b") + b"\xfe"
    body += b"\x09" + s(b"zipmap") + s(g.zipmap([(b"f", b"v"), (b"g", b"w" * 300)]))
    body += b"\x0a" + s(b"list10") + s(g.ziplist([b"a", 1, -70000, 1 << 40]))
    body += b"\x0c" + s(b"zset12") + s(g.ziplist([b"a", b"0.25", b"b", 7]))
    body += b"\x0d" + s(b"hash13") + s(g.ziplist([b"f", b"v", b"n", 300]))
    body += (
        b"\x0e" + s(b"list14") + g.length(2) + s(g.ziplist([b"x", 2])) + s(g.ziplist([b"y" * 100]))
    )
    body += b"\x0f" + s(b"stream15") + g.length(1) + s(node_key) + s(lp)
    body += g.length(2) + g.length(1001) + g.length(5) + g.length(0)  # length, last id, no groups
    body += b"\x05" + s(b"zset5") + g.length(1) + s(b"m") + struct.pack("<d", 1 / 7)
    body += b"\x0b" + s(b"intset") + s(g.intset([3, 1, -9], 2))
    data = g.rdb(body, version=9)
    config = SMALL
    source = RedisServer(tmp_path, config, name="source", start=False)
    (source.dir / "dump.rdb").write_bytes(data)
    with source, RedisServer(tmp_path, config, name="target") as target:
        source.start()
        r = source.client()
        assert r.dbsize() == 12, source.log_tail()
        _replay(_parse(data, random.Random(3)), target)
        t = target.client()
        assert t.execute_command("DEBUG", "DIGEST") == r.execute_command("DEBUG", "DIGEST"), _diff(
            r, t
        )
        assert t.function_list() == r.function_list() != []
        assert t.fcall("legacy_fn", 0) == r.fcall("legacy_fn", 0) == 2


def test_bench_runs_on_a_small_generated_rdb(tmp_path: Path) -> None:
    from bench import rdb_parse

    report = rdb_parse.main(["--keys", "2000", "--out-dir", str(tmp_path / "results")])
    assert report["ours"]["keys"] == 2000
    assert report["ours_without_crc"]["keys"] == 2000
    assert report["redis_check_rdb"]["seconds"] > 0
    assert len(list((tmp_path / "results").glob("rdb_parse-*.md"))) == 1


def test_dump_payloads_decode_to_the_rdb_events(tmp_path: Path) -> None:
    """Every key's DUMP gives the same value events as the key in the RDB."""
    from replicator.redis.rdb.dump import parse_dump_payload
    from replicator.redis.rdb.events import KeyEnd

    with RedisServer(tmp_path, SMALL, name="source") as source:
        r = source.client()
        _populate(r, random.Random(5))
        r.save()
        events = _parse((source.dir / "dump.rdb").read_bytes(), random.Random(5))
        by_key: dict[bytes, list[Event]] = {}
        current: list[Event] | None = None
        for e in events:
            if isinstance(e, KeyBegin):
                current = by_key.setdefault(e.key, []) if e.db == 0 else None
            elif isinstance(e, KeyEnd):
                current = None
            elif current is not None:
                current.append(e)
        assert len(by_key) > 20
        for key, values in by_key.items():
            decoded = parse_dump_payload(r.dump(key), key)
            assert decoded[1:-1] == values, key
        with pytest.raises(RdbChecksumError):
            payload = bytearray(r.dump(b"s:raw"))
            payload[3] ^= 1
            parse_dump_payload(bytes(payload))
