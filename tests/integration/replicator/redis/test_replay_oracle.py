"""The oracle on real servers: writes on redis-server A, A's real replication stream (read here
as a replica on a raw socket: ``PSYNC ? -1``, the RDB skipped, commands parsed by a tiny reader
local to this test), EventBuilder + routing to N queues, the queues replayed into redis-server
B in arbitrary interleavings that keep each queue's order: ``DEBUG DIGEST`` and the function
library of B equal A's (issue 18: SET k 1; FLUSHALL; SET k 2, RENAME across queues, MULTI/EXEC
across dbs, SWAPDB, MOVE, COPY … DB, EVAL, FCALL, MSET)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest
import redis

from replicator.redis.events import EventBuilder, OutMessage
from replicator.redis.replay import RedisTarget, Replayer
from replicator.redis.routing import queue_of
from tests.redis_harness import RedisServer

pytestmark = pytest.mark.integration

QUEUES = 4  # what the workload's RENAME keys are picked for (the test runs other counts too)
CONFIG = {"repl-diskless-sync": "no", "enable-debug-command": "local"}


class RawReplica:
    """Just enough of a replica to read a master's command stream (not the product's parser)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        self.sock.sendall(b"*3\r\n$5\r\nPSYNC\r\n$1\r\n?\r\n$2\r\n-1\r\n")
        line = self._line()
        while line == b"":  # keepalive newlines while the master runs BGSAVE
            line = self._line()
        assert line.startswith(b"+FULLRESYNC "), line
        _, replid, offset = line.split()
        self.replid, self.offset = replid.decode(), int(offset)
        line = self._line()
        while line == b"":
            line = self._line()
        assert line.startswith(b"$"), line
        self._take(int(line[1:]))  # the RDB (disk sync: no trailing CRLF)

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("master closed the link")
        self.buf += data

    def _line(self) -> bytes:
        while b"\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\n")
        return line.rstrip(b"\r")

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def command(self) -> tuple[list[bytes], int, int]:
        """The next command and its [start, end) offsets (every byte counts)."""
        start = self.offset
        head = self._line()
        used = len(head) + 2
        assert head.startswith(b"*"), head
        argv = []
        for _ in range(int(head[1:])):
            bulk = self._line()
            n = int(bulk[1:])
            argv.append(self._take(n + 2)[:n])
            used += len(bulk) + 2 + n + 2
        self.offset += used
        return argv, start, self.offset

    def close(self) -> None:
        self.sock.close()


def keys_on_different_queues() -> tuple[bytes, bytes]:
    a = b"ren:a"
    b = next(
        k
        for k in (b"ren:b%d" % i for i in range(100))
        if queue_of(k, QUEUES) != queue_of(a, QUEUES)
    )
    return a, b


LIB = b"#!lua name=oraclelib\nredis.register_function('bump', function(keys, args) redis.call('incr', keys[1]); return redis.call('set', keys[2], args[1]) end)"


def workload(server: RedisServer) -> None:
    r = redis.Redis(host="127.0.0.1", port=server.port, single_connection_client=True)
    a, b = keys_on_different_queues()
    run = r.execute_command
    run("SET", "k", "1")
    run("FLUSHALL")
    run("SET", "k", "2")
    run("SET", a, "moved")
    run("RENAME", a, b)  # across queues
    run("MULTI")
    run("SET", "t1", "1")
    run("SELECT", "2")
    run("INCR", "t2")
    run("SELECT", "0")
    run("LPUSH", "tl", "x")
    run("EXEC")
    run("SELECT", "1")
    run("SET", "in1", "db1")
    run("SELECT", "0")
    run("SWAPDB", "0", "1")
    run("SET", "mv", "m")
    run("MOVE", "mv", "3")
    run("SET", "cp", "c")
    run("COPY", "cp", "cp2", "DB", "5", "REPLACE")
    run("COPY", "cp", "cp3")
    run("EVAL", "redis.call('set', KEYS[1], 'e1'); redis.call('set', KEYS[2], 'e2')", 2, a, b)
    run("EVAL", "redis.call('set', 'undeclared', 'u')", 0)
    run("FUNCTION", "LOAD", LIB)
    run("FCALL", "bump", 2, "ctr", b, "f")
    run("MSET", "m1", "1", "m2", "2", "m3", "3", "m4", "4")
    run("MSETNX", "n1", "1", "n2", "2")
    run("DEL", "m1", "m2", "nosuch")
    run("SADD", "s1", "a", "b", "c")
    run("SADD", "s2", "b", "c", "d")
    run("SINTERSTORE", "s3", "s1", "s2")
    run("SMOVE", "s1", "s2", "a")
    run("SPOP", "s1")
    run("RPUSH", "l1", "1", "2", "3")
    run("LMOVE", "l1", "l2", "LEFT", "RIGHT")
    run("ZADD", "z1", "1", "a", "2", "b")
    run("ZUNIONSTORE", "z3", "2", "z1", "s3", "WEIGHTS", "2", "1")
    run("HSET", "h", "f", "v", "g", "w")
    run("XADD", "st", "*", "f", "v")
    run("XGROUP", "CREATE", "st", "grp", "0")
    run("XREADGROUP", "GROUP", "grp", "c1", "COUNT", "1", "STREAMS", "st", ">")
    run("SET", "ttl", "v", "EX", "1000")
    run("EXPIRE", "h", "1000")
    run("INCRBYFLOAT", "fl", "1.5")
    run("SETBIT", "b1", "7", "1")
    run("BITOP", "OR", "b2", "b1", "k")
    run("PFADD", "hll", "a", "b")
    rng = random.Random(18)
    for _ in range(300):
        db = rng.randrange(4)
        run("SELECT", db)
        k = f"r{rng.randrange(40)}"
        op = rng.random()
        if op < 0.5:
            run("SET", k, rng.randrange(1000))
        elif op < 0.6:
            run("DEL", k, f"r{rng.randrange(40)}")
        elif op < 0.7:
            run("MSET", k, 1, f"r{rng.randrange(40)}", 2)
        elif op < 0.8:
            run("SADD", "set" + k, rng.randrange(10))
        elif op < 0.9:
            run("MULTI")
            run("INCR", "c" + k)
            run("SELECT", (db + 1) % 4)
            run("SET", k, "tx")
            run("EXEC")
        else:
            run("UNLINK", k)
    run("SELECT", "0")
    run("SET", "k", "last")
    r.close()


def functions(client: redis.Redis) -> list[object]:
    """The function libraries with their code, by name (FUNCTION DUMP's order is a dict's)."""
    libs = client.execute_command("FUNCTION", "LIST", "WITHCODE")
    return sorted(libs, key=repr)


def interleave(msgs: list[OutMessage], rng: random.Random) -> list[OutMessage]:
    per_q: dict[int, list[OutMessage]] = {}
    for m in msgs:
        per_q.setdefault(m.queue_id, []).append(m)
    cursors = dict.fromkeys(per_q, 0)
    out = []
    while cursors:
        q = rng.choice(sorted(cursors))
        out.append(per_q[q][cursors[q]])
        cursors[q] += 1
        if cursors[q] == len(per_q[q]):
            del cursors[q]
    return out


def populate(server: RedisServer) -> None:
    """Data that exists before the replica connects: it comes in the full sync."""
    r = redis.Redis(host="127.0.0.1", port=server.port, single_connection_client=True)
    for db in (0, 3, 15):
        r.execute_command("SELECT", db)
        for i in range(30):
            r.execute_command("SET", f"pre{i}", f"{db}:{i}")
        r.execute_command("RPUSH", "prelist", *range(50))
        r.execute_command("HSET", "prehash", "a", 1, "b", 2)
        r.execute_command("SET", "prettl", "t", "PX", 10_000_000)
        r.execute_command("SET", b"pre\xffbinary", b"\x00")
    r.execute_command(
        "FUNCTION", "LOAD", LIB.replace(b"oraclelib", b"prelib").replace(b"bump", b"prebump")
    )
    r.close()


def snapshot_commands(server: RedisServer) -> list[tuple[int, list[bytes]]]:
    """What the RDB holds, as replayable commands: FUNCTION RESTORE and RESTORE … ABSTTL per key
    (read with DUMP while nothing writes; the product reads the RDB itself, rdb/commands.py)."""
    r = redis.Redis(host="127.0.0.1", port=server.port, single_connection_client=True)
    out: list[tuple[int, list[bytes]]] = [(0, [b"FUNCTION", b"RESTORE", r.function_dump()])]
    for db in range(16):
        r.execute_command("SELECT", db)
        for key in sorted(r.scan_iter(count=1000)):
            at = int(r.execute_command("PEXPIRETIME", key))
            argv = [b"RESTORE", key, b"%d" % max(at, 0), r.dump(key), b"REPLACE"]
            out.append((db, [*argv, b"ABSTTL"] if at > 0 else argv))
    r.close()
    return out


@pytest.mark.parametrize("queues", [1, 4, 7])
def test_replayed_queues_equal_the_master(tmp_path: Path, queues: int) -> None:
    with RedisServer(tmp_path, CONFIG, name="a") as a, RedisServer(tmp_path, CONFIG, name="b") as b:
        populate(a)
        replica = RawReplica(a.port)
        try:
            builder = EventBuilder("T", queues, replica.replid)
            msgs: list[OutMessage] = list(
                builder.begin_snapshot(replica.replid, replica.offset).messages
            )
            for db, argv in snapshot_commands(a):
                msgs += builder.snapshot_entry(db, argv).messages
            end = builder.end_snapshot()
            assert end.boundary == replica.offset
            msgs += end.messages
            workload(a)
            master_offset = int(a.client().info("replication")["master_repl_offset"])
            seen: list[bytes] = []
            while replica.offset < master_offset:
                argv, start, end = replica.command()
                seen.append(argv[0].upper())
                batch = builder.on_command(argv, start, end)
                msgs += batch.messages
            assert replica.offset == master_offset
            assert batch.boundary == master_offset and not builder.in_transaction
        finally:
            replica.close()
        # the stream held what the test is about
        assert {b"SELECT", b"MULTI", b"EXEC", b"SWAPDB", b"FLUSHALL", b"MOVE", b"COPY"} <= set(seen)
        assert {b"RENAME", b"FUNCTION", b"MSET"} <= set(seen)
        if queues > 1:
            assert {m.properties.get("REDIS_PART", "")[:2] for m in msgs} >= {"", "*/"}
        assert any("REDIS_TXID" in m.properties for m in msgs)
        assert sum(m.properties["REDIS_KIND"] == "snapshot" for m in msgs) > 16
        assert len({m.queue_id for m in msgs}) == queues

        source = a.client()
        want = (
            source.execute_command("DEBUG", "DIGEST"),
            functions(source),
        )
        dest = b.client()
        for seed in range(3):
            # B holds stale data: SNAPSHOT_BEGIN must clear it
            dest.flushall()
            dest.function_flush()
            dest.mset({"stale1": 1, "pre1": "old"})
            dest.function_load(LIB.replace(b"oraclelib", b"stalelib").replace(b"bump", b"stale"))
            target = RedisTarget(dest)
            replayer = Replayer(target)
            for m in interleave(msgs, random.Random(seed)):
                replayer.offer_message(m)
            assert replayer.pending == 0
            target.close()
            got = (
                dest.execute_command("DEBUG", "DIGEST"),
                functions(dest),
            )
            assert got == want, f"interleaving {seed}: B differs from A"
        # and a replay with every message sent twice (at-least-once) is still equal
        target = RedisTarget(dest)
        target.flush_all()
        replayer = Replayer(target)
        for m in interleave(msgs + msgs, random.Random(99)):
            replayer.offer_message(m)
        target.close()
        assert replayer.duplicates == len(msgs)
        assert (dest.execute_command("DEBUG", "DIGEST"), functions(dest)) == want
