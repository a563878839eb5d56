"""Micro-benchmark of the leader's per-request Python: ``KVService.Put``/``Range`` on one loop.

What the leader's event-loop thread runs for a Put besides gRPC itself: the handler's checks
and encoding, ``NodeFacade.propose``, ``ReplicatedLog.propose`` (group commit, waiter,
deadline), the answer from the apply thread, the response and its header. Consensus is the
in-memory engine (a proposal commits at once) and the apply thread is real, so the loop
also pays for being woken with the results. ``--clients`` coroutines each keep one request
in flight, as ``nameserver.loadgen`` does over gRPC.

Prints the event loop's CPU per request (``time.thread_time`` of the loop's thread); asserts
nothing. Runs against whatever ``nameserver`` is on ``PYTHONPATH``, so the same file can
measure an older tree (``PYTHONPATH=/path/to/old python /path/to/kv_handler_bench.py``).

    python -m bench.kv_handler_bench [--op put|range] [--requests 20000] [--clients 64]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from nameserver.config import ServerConfig
from nameserver.kinds import REGISTRY
from nameserver.kv.service import KVService
from nameserver.state.machine import MetadataStateMachine
from protos.etcdserverpb import rpc_pb2
from raftlog import InMemoryEngine, ReplicatedLog, SegmentConfig, SegmentLog

try:
    from nameserver.node import NodeFacade
except ImportError:  # a tree older than the node's facade: its gRPC request context
    from nameserver.grpc.context import NodeContext as NodeFacade  # type: ignore[no-redef]


class _Context:
    """What the handlers read from a gRPC call: no metadata (loadgen sends none)."""

    def invocation_metadata(self) -> tuple[()]:
        return ()

    async def abort(self, code: Any, message: str) -> None:
        raise RuntimeError(f"{code}: {message}")


async def _run(args: argparse.Namespace, data_dir: Path) -> tuple[float, float]:
    sm = MetadataStateMachine.empty(REGISTRY)
    segments = SegmentLog.open(data_dir / "log", SegmentConfig(fsync_policy="batch"))
    engine = InMemoryEngine()
    rlog = ReplicatedLog(engine, sm, segments, "n0")
    rlog.start()
    config = ServerConfig(node_id="n0", data_dir=str(data_dir))
    node = NodeFacade(config, rlog, sm, 1, engine)  # type: ignore[arg-type]
    kv = KVService(node)
    ctx = _Context()
    rng = random.Random(1)
    value = bytes(rng.randrange(256) for _ in range(args.value_size))
    keys = [b"/bench/key-%08d" % i for i in range(args.keys)]
    try:
        for key in keys:  # the key space exists (range) and puts overwrite (put)
            await kv.Put(rpc_pb2.PutRequest(key=key, value=value), ctx)
        per_client = args.requests // args.clients

        async def client() -> None:
            for _ in range(per_client):
                key = keys[rng.randrange(len(keys))]
                if args.op == "put":
                    await kv.Put(rpc_pb2.PutRequest(key=key, value=value), ctx)
                else:
                    await kv.Range(rpc_pb2.RangeRequest(key=key, serializable=True), ctx)

        cpu0, wall0 = time.thread_time(), time.perf_counter()
        await asyncio.gather(*(client() for _ in range(args.clients)))
        cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
        done = per_client * args.clients
        return cpu / done * 1e6, done / wall
    finally:
        rlog.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", choices=("put", "range"), default="put")
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--value-size", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-uvloop", action="store_true")
    args = p.parse_args()
    runner: Any = asyncio.run
    if not args.no_uvloop:
        import uvloop

        runner = uvloop.run
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="kv-handler-bench-") as tmp:
            runs.append(runner(_run(args, Path(tmp))))
    best = min(r[0] for r in runs)
    print(
        f"op={args.op} requests={args.requests} clients={args.clients} keys={args.keys} "
        f"value={args.value_size}B loop={'asyncio' if args.no_uvloop else 'uvloop'}"
    )
    print(
        f"event loop: {best:.1f} us/request (best of {args.repeat}: "
        f"{', '.join(f'{r[0]:.1f}' for r in runs)}); "
        f"{', '.join(f'{r[1]:,.0f}' for r in runs)} requests/s"
    )


if __name__ == "__main__":
    main()
