"""The command table against a real redis-server 7.0.15: the checked-in snapshot has not drifted,
the live table equals it, and our key extraction agrees with the server's COMMAND GETKEYS."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import redis

from replicator.redis.commands import CommandTable, snapshot, snapshot_text
from tests.redis_harness import RedisServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = ROOT / "scripts" / "gen_redis_command_table.py"


def test_snapshot_has_not_drifted(tmp_path: Path) -> None:
    """Like scripts/gen_protos.sh --check: regenerate from the real server and compare."""
    out = tmp_path / "table.json"
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], check=True, timeout=60)
    assert out.read_text(encoding="utf-8") == snapshot_text(), (
        "replicator/redis/command_table.json drifted: run scripts/gen_redis_command_table.py"
    )
    check = subprocess.run([sys.executable, str(SCRIPT), "--check"], timeout=60)
    assert check.returncode == 0


GETKEYS_CASES: list[list[bytes]] = [
    [b"SET", b"k", b"v", b"PXAT", b"1"],
    [b"MSET", b"a", b"1", b"b", b"2", b"c", b"3"],
    [b"MSETNX", b"a", b"1", b"b", b"2"],
    [b"DEL", b"a", b"b"],
    [b"UNLINK", b"a"],
    [b"RENAME", b"a", b"b"],
    [b"LMOVE", b"a", b"b", b"LEFT", b"RIGHT"],
    [b"SMOVE", b"a", b"b", b"m"],
    [b"SUNIONSTORE", b"d", b"a", b"b"],
    [b"ZUNIONSTORE", b"d", b"2", b"a", b"b", b"WEIGHTS", b"1", b"2"],
    [b"ZINTERSTORE", b"d", b"1", b"a"],
    [b"BITOP", b"AND", b"d", b"a", b"b"],
    [b"COPY", b"a", b"b", b"DB", b"3", b"REPLACE"],
    [b"MOVE", b"a", b"3"],
    [b"EVAL", b"return 1", b"2", b"x", b"y", b"arg"],
    [b"FCALL", b"f", b"1", b"x", b"arg"],
    [b"LMPOP", b"2", b"a", b"b", b"LEFT"],
    [b"XADD", b"s", b"1-1", b"f", b"v"],
    [b"XGROUP", b"CREATE", b"st", b"g", b"$"],
    [b"XCLAIM", b"st", b"g", b"c", b"0", b"1-1"],
    [b"XREADGROUP", b"GROUP", b"g", b"c", b"STREAMS", b"s1", b"s2", b"0", b"0"],
    [b"PFMERGE", b"d", b"a", b"b"],
    [b"GEOADD", b"g", b"1", b"2", b"m"],
    [b"SINTERCARD", b"2", b"a", b"b"],
    [b"RESTORE", b"k", b"0", b"payload"],
    [b"BLMOVE", b"a", b"b", b"LEFT", b"LEFT", b"0"],
    [b"HSET", b"h", b"f", b"v"],
    [b"PEXPIREAT", b"k", b"1"],
    [b"GETEX", b"k", b"PERSIST"],
    [b"OBJECT", b"FREQ", b"k"],
]


def raw(client: redis.Redis, *argv: bytes | str) -> object:
    """A reply without redis-py's COMMAND callback (it expects COMMAND INFO's shape)."""
    conn = client.connection_pool.get_connection()
    try:
        conn.send_command(*argv)
        return conn.read_response()
    finally:
        client.connection_pool.release(conn)


def test_live_table_equals_snapshot_and_keys_match_getkeys(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as server:
        client = server.client()
        live = CommandTable.from_server(client)
        assert live.redis_version == snapshot().redis_version == "7.0.15"
        assert live.specs == snapshot().specs
        # RESP2 (flat arrays for maps) reads the same table as RESP3
        resp2 = server.client(protocol=2)
        assert CommandTable.from_server(resp2).specs == live.specs
        for argv in GETKEYS_CASES:
            spec = live.lookup(argv)
            assert spec is not None, argv
            ours = [k.key for k in spec.find_keys(argv).keys]
            theirs = raw(client, "COMMAND", "GETKEYS", *argv)
            assert isinstance(theirs, list)
            assert sorted(ours) == sorted(theirs), argv
        # a command without keys: the server says so with an error, we with []
        with pytest.raises(redis.ResponseError):
            raw(client, "COMMAND", "GETKEYS", "FLUSHALL")
        spec = live.lookup([b"FLUSHALL"])
        assert spec is not None and spec.find_keys([b"FLUSHALL"]).keys == ()
