"""The Redis replicator's CPU per replicated write, in one process, without sockets.

    python -m bench.redis_pipeline [--writes 100000] [--queues 4] [--profile] [--snapshot]

``bench/redis_replicate.py`` measures the whole system on a shared machine, where the
replicator's CPU share decides what it delivers. This isolates the replicator: a replication
stream of ``SET key:i value`` (what the paced writer makes) is fed in 256 KiB reads, as the
driver does, through the protocol object, the event spool, the pass (``_Pass.on_event``:
EventBuilder, Watermark, fencing) and the RocketMQ sink, whose connection is replaced by one
that encodes each request frame and answers PUT_OK on the next loop turn. The result is the
process CPU (user + system) per write, and its profile with ``--profile``.

``--snapshot``: a full sync instead, an RDB of ``--writes`` 512-byte random strings (what
``bench.redis_replicate --parts sync`` fills) fed in 256 KiB chunks after ``+FULLRESYNC``
(parse, replay, snapshot messages, the sink), timed to the confirmation of SNAPSHOT_END.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from nameserver.client import BrokerGroup, QueueData, Route  # noqa: E402
from replicator import gctune  # noqa: E402
from replicator.redis import protocol as rp  # noqa: E402
from replicator.redis import replicator as rr  # noqa: E402
from replicator.redis.checkpoint import Checkpoint  # noqa: E402
from replicator.redis.commands import snapshot  # noqa: E402
from replicator.redis.driver import READ_BYTES  # noqa: E402
from replicator.redis.metrics import RedisMetrics  # noqa: E402
from replicator.redis.protocol import Phase, ReplicaConfig, ReplicaProtocol  # noqa: E402
from replicator.redis.resp import NeedData, encode_command  # noqa: E402
from replicator.redis.spool import EventSpool  # noqa: E402
from replicator.sinks.rocketmq import RocketMQSink, RocketMQSinkConfig  # noqa: E402
from rmq import connection  # noqa: E402
from rmq.codec import RemotingCommand, encode  # noqa: E402

REPLID = "a" * 40


class _Routes:
    def __init__(self, queues: int) -> None:
        self.queues = queues

    def route_get(self, topic: str) -> Route:
        return Route(
            topic,
            [BrokerGroup("c", "b", {0: "127.0.0.1:1"}, "", False)],
            [QueueData("b", self.queues, self.queues, 6)],
            "",
            1,
        )


class _Conn:
    """A connection that encodes each frame and answers PUT_OK on the next loop turn."""

    usable = True

    def __init__(self) -> None:
        self.frames = 0
        self.bytes = 0

    def send(self, command: RemotingCommand, callback: Any, timeout_s: float) -> None:
        data = encode(command.replace(opaque=1))
        self.frames += 1
        self.bytes += len(data)
        answer = command.response(0, ext_fields={"queueOffset": "0"})
        asyncio.get_running_loop().call_soon(callback, answer, None)

    def close(self) -> None:
        pass

    def abort(self) -> None:  # the sink's close aborts its connections
        pass


class _Role:
    active = True

    def check(self) -> None:
        pass


def stream(writes: int, value: bytes = b"1764170000000000000") -> bytes:
    return b"".join(encode_command([b"SET", b"bench:%d" % i, value]) for i in range(writes))


def snapshot_rdb(keys: int, value_bytes: int = 512) -> bytes:
    """An RDB (version 10, db 0) of ``keys`` random strings of ``value_bytes``."""
    import os

    from tests.unit.replicator.redis.rdb import rdbgen as g

    s = g.string
    body = [b"\xfe\x00\xfb" + g.length(keys) + g.length(0)]
    body += [b"\x00" + s(b"key:%d" % i) + s(os.urandom(value_bytes)) for i in range(keys)]
    return g.rdb(b"".join(body), version=10)


async def run(writes: int, queues: int, full_sync: bool = False) -> dict[str, float]:
    conn = _Conn()

    async def fake_open(address: str, timeout_s: float) -> _Conn:
        return conn

    connection.RemotingConnection.open = fake_open  # type: ignore[assignment,method-assign]
    sink = RocketMQSink(RocketMQSinkConfig(topics=("T",)), _Routes(queues))
    await sink.start()
    config = SimpleNamespace(
        topic="T",
        source=rr.Source("127.0.0.1", 1),
        capa_eof=True,
        capa_psync2=True,
        read_timeout_s=60.0,
        spool_dir=None,
        spool_memory_bytes=64 << 20,
        job="bench",
        worker="bench",
    )
    owner = SimpleNamespace(config=config, role=_Role(), metrics=RedisMetrics("bench"))
    fence = SimpleNamespace(lease_id=1, token=1)
    p = rr._Pass(owner, fence, Checkpoint(REPLID, 0), sink, snapshot(), config.source)  # type: ignore[arg-type]
    proto = ReplicaProtocol(ReplicaConfig(resume=(REPLID, 0)))
    proto.phase = Phase.RDB_PAYLOAD  # straight to the command stream (no handshake here)
    proto.offset = 0
    proto._start_stream()
    p.replid = REPLID
    if full_sync:
        return await _sync(p, sink, conn, writes)
    data = stream(writes)
    spool = EventSpool(None, 64 << 20)

    async def consume() -> None:
        while True:
            event = await spool.get()
            if event is None:
                return
            await p.on_event(event)

    t0, c0 = time.monotonic(), time.process_time()
    consumer = asyncio.create_task(consume())
    for pos in range(0, len(data), READ_BYTES):
        proto.receive_data(data[pos : pos + READ_BYTES])
        while not isinstance(event := proto.next_event(), NeedData):
            spool.put(event)
        await asyncio.sleep(0)
    spool.close()
    await consumer
    while p.confirmed < p.sent:
        await asyncio.sleep(0.001)
    c1, t1 = time.process_time(), time.monotonic()
    assert p.watermark.safe().offset == len(data), (p.watermark.safe(), len(data))
    await sink.close()
    return {
        "writes": writes,
        "cpu_us_per_write": (c1 - c0) / writes * 1e6,
        "writes_per_cpu_s": writes / (c1 - c0),
        "wall_s": t1 - t0,
        "frames": conn.frames,
        "msgs_per_frame": p.sent / max(conn.frames, 1),
    }


async def _sync(p: Any, sink: RocketMQSink, conn: _Conn, keys: int) -> dict[str, float]:
    rdb = snapshot_rdb(keys)
    t0, c0 = time.monotonic(), time.process_time()
    await p.on_event(rp.FullSync(REPLID, 1000))
    await p.on_event(rp.RdbBegin(len(rdb)))
    for pos in range(0, len(rdb), READ_BYTES):
        await p.on_event(rp.RdbChunk(rdb[pos : pos + READ_BYTES]))
    await p.on_event(rp.RdbEnd())
    while p.watermark.safe().offset != 1000:
        await asyncio.sleep(0.001)
    c1, t1 = time.process_time(), time.monotonic()
    await sink.close()
    return {
        "keys": keys,
        "cpu_us_per_key": (c1 - c0) / keys * 1e6,
        "cpu_s_per_mb": (c1 - c0) / (len(rdb) / 1e6),
        "wall_s": t1 - t0,
        "frames": conn.frames,
        "msgs_per_frame": p.sent / max(conn.frames, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--writes", type=int, default=100_000)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--snapshot", action="store_true", help="a full sync of --writes keys")
    ap.add_argument("--default-gc", action="store_true", help="without replicator.gctune")
    args = ap.parse_args(argv)
    if not args.default_gc:
        gctune.tune()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        out = asyncio.run(run(args.writes, args.queues, args.snapshot))
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    else:
        out = asyncio.run(run(args.writes, args.queues, args.snapshot))
    print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
