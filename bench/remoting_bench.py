"""The RocketMQ nameserver front under load (issue 5's performance section).

    python -m bench.remoting_bench [--duration 8] [--connections 64] [--topics 1000]

On a real 3-node metaledger (tests.harness, loopback, processes stopped by PID):

* **route reads**: GET_ROUTEINFO_BY_TOPIC (105) per second over ``--connections``
  connections (one request in flight each, random topics of ``--topics``, the route of
  ``--route-brokers`` broker names each), all connections on one node, then spread over
  the three nodes. The load comes from ``--loadgen-procs`` processes (asyncio, our codec).
* **ceiling**: the same load against a bare asyncio server that answers each frame with a
  frame of the same size as the route answer (no decoding, no lookup): what Python's
  asyncio and this machine allow, and so how much of it the nameserver keeps.
* **registration storm**: ``--storm-brokers`` brokers each registering ``--topics`` topics
  at once (REGISTER_BROKER frames, spread over the nodes): broker-topics per second until
  every registration was answered SUCCESS.

Results: ``bench/results/remoting-<date>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import timestamp, write_report  # noqa: E402
from rmq.codec import encode  # noqa: E402
from rmq.headers import GetRouteInfoHeader  # noqa: E402
from tests.harness import Cluster, wait_until  # noqa: E402
from tests.remoting_client import AsyncRemotingClient, call, register_request  # noqa: E402


def topic_name(i: int) -> str:
    return f"BenchTopic-{i:04d}"


# ------------------------------------------------------------------- load generator
async def _load(
    addresses: list[str], connections: int, topics: int, duration_s: float, ok_code: int = 0
) -> dict[str, Any]:
    clients = [
        await AsyncRemotingClient(addresses[i % len(addresses)]).connect()
        for i in range(connections)
    ]
    requests = [GetRouteInfoHeader(topic=topic_name(i)).request() for i in range(topics)]
    done = 0
    errors = 0
    latencies: list[float] = []
    stop_at = time.monotonic() + duration_s

    async def worker(client: AsyncRemotingClient) -> None:
        nonlocal done, errors
        rnd = random.Random(id(client))
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            reply = await client.call(rnd.choice(requests), timeout=30)
            latencies.append(time.perf_counter() - t0)
            if reply.code == ok_code:
                done += 1
            else:
                errors += 1

    started = time.monotonic()
    await asyncio.gather(*(worker(c) for c in clients))
    elapsed = time.monotonic() - started
    for c in clients:
        await c.close()
    latencies.sort()
    return {
        "replies": done,
        "errors": errors,
        "elapsed_s": elapsed,
        "p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else 0,
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)] if latencies else 0,
    }


def run_load(addresses: list[str], args: argparse.Namespace, echo: bool = False) -> dict[str, Any]:
    """``--loadgen-procs`` processes sharing ``--connections``; replies per second."""
    per = args.connections // args.loadgen_procs
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.remoting_bench",
                "--loadgen",
                ",".join(addresses),
                "--connections",
                str(per),
                "--topics",
                str(args.topics),
                "--duration",
                str(args.duration),
                *(["--echo"] if echo else []),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(args.loadgen_procs)
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=args.duration + 120)
        results.append(json.loads(out.strip().splitlines()[-1]))
    replies = sum(r["replies"] for r in results)
    elapsed = max(r["elapsed_s"] for r in results)
    return {
        "replies_per_s": round(replies / elapsed),
        "errors": sum(r["errors"] for r in results),
        "p50_ms": round(max(r["p50_ms"] for r in results), 2),
        "p99_ms": round(max(r["p99_ms"] for r in results), 2),
        "connections": per * args.loadgen_procs,
    }


# ------------------------------------------------------------------------ ceiling
async def _echo_server(reply_size: int) -> tuple[asyncio.Server, int]:
    """Answers every frame with its own header (so the client matches the ``opaque``), marked
    a response (the JSON header's ``"flag":0`` becomes ``"flag":1``, the same length), and a
    body that pads the answer to ``reply_size`` bytes, the size of a route answer: the
    length prefixes are all it reads, nothing is decoded or looked up."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (length,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(length)
                (header_field,) = struct.unpack_from(">i", frame)
                header = frame[: 4 + (header_field & 0xFFFFFF)].replace(b'"flag":0', b'"flag":1', 1)
                body = b"x" * max(0, reply_size - 4 - len(header))
                writer.write(struct.pack(">i", len(header) + len(body)) + header + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def run_ceiling(reply_size: int, args: argparse.Namespace) -> dict[str, Any]:
    import threading

    loop = asyncio.new_event_loop()
    ready: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        server, port = loop.run_until_complete(_echo_server(reply_size))
        ready["port"], ready["server"] = port, server
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_until(lambda: "port" in ready, 10, "echo server")
    # the echo server runs in its own process in spirit: keep this one idle meanwhile
    try:
        return run_load([f"127.0.0.1:{ready['port']}"], args, echo=True)
    finally:

        async def shutdown() -> None:
            ready["server"].close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


# -------------------------------------------------------------------------- storm
async def _storm(addresses: list[str], brokers: int, topics: int) -> tuple[float, int]:
    names = [topic_name(t) for t in range(topics)]

    async def one(b: int) -> int:
        request = register_request(f"storm-{b:03d}", f"10.9.{b // 250}.{b % 250}:10911", names)
        attempts = 0
        while True:
            attempts += 1
            client = await AsyncRemotingClient(addresses[(b + attempts) % len(addresses)]).connect()
            try:
                reply = await client.call(request, timeout=60)
            finally:
                await client.close()
            if reply.code == 0:
                return attempts
            await asyncio.sleep(0.2)

    started = time.monotonic()
    attempts = await asyncio.gather(*(one(b) for b in range(brokers)))
    return time.monotonic() - started, sum(attempts) - brokers


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--route-brokers", type=int, default=2)
    p.add_argument("--loadgen-procs", type=int, default=2)
    p.add_argument("--storm-brokers", type=int, default=100)
    p.add_argument("--loadgen", help=argparse.SUPPRESS)
    p.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.loadgen:
        # the echo server sends the request's own header back: its code is the request's
        ok = 105 if args.echo else 0
        result = asyncio.run(
            _load(args.loadgen.split(","), args.connections, args.topics, args.duration, ok)
        )
        print(json.dumps(result))
        return 0

    results: dict[str, Any] = {
        "params": vars(args),
        "date": timestamp(),
    }
    with tempfile.TemporaryDirectory() as d, Cluster(Path(d) / "cluster", n=3) as c:
        c.wait_ready(30)
        c.wait_announced(30)
        addrs = [f"127.0.0.1:{s.remoting_port}" for s in c.nodes]
        names = [topic_name(t) for t in range(args.topics)]
        for b in range(args.route_brokers):
            reply = call(addrs[0], register_request(f"bench-{b}", f"127.0.0.1:{30911 + b}", names))
            assert reply.code == 0, reply.remark
        wait_until(
            lambda: all(
                call(a, GetRouteInfoHeader(topic=names[-1]).request()).code == 0 for a in addrs
            ),
            30,
            "routes on every node",
        )
        sample = call(addrs[0], GetRouteInfoHeader(topic=names[0]).request())
        reply_frame = encode(sample)
        results["route_frame_bytes"] = len(reply_frame)
        results["one_node"] = run_load(addrs[:1], args)
        print("route reads, one node:", results["one_node"], flush=True)
        results["three_nodes"] = run_load(addrs, args)
        print("route reads, three nodes:", results["three_nodes"], flush=True)
        elapsed, retries = asyncio.run(_storm(addrs, args.storm_brokers, args.topics))
        results["storm"] = {
            "brokers": args.storm_brokers,
            "topics": args.topics,
            "elapsed_s": round(elapsed, 2),
            "broker_topics_per_s": round(args.storm_brokers * args.topics / elapsed),
            "registrations_per_s": round(args.storm_brokers / elapsed, 1),
            "retries": retries,
        }
        print("registration storm:", results["storm"], flush=True)
    results["ceiling"] = run_ceiling(len(reply_frame), args)
    print("asyncio echo ceiling:", results["ceiling"], flush=True)
    results["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    one, three, ceil, storm = (
        results["one_node"],
        results["three_nodes"],
        results["ceiling"],
        results["storm"],
    )
    md = [
        f"# RocketMQ remoting front, {results['date']}",
        "",
        f"3 metaledger nodes on loopback, {os.cpu_count()} cores shared; {args.connections} connections "
        f"({args.loadgen_procs} load processes), one request in flight each, {args.topics} topics, "
        f"route of {args.route_brokers} broker names ({results['route_frame_bytes']} B answer frame), "
        f"{args.duration:g} s per run.",
        "",
        "| run | GET_ROUTEINFO_BY_TOPIC /s | p50 ms | p99 ms | errors |",
        "|---|---|---|---|---|",
        f"| one node | {one['replies_per_s']} | {one['p50_ms']} | {one['p99_ms']} | {one['errors']} |",
        f"| three nodes | {three['replies_per_s']} | {three['p50_ms']} | {three['p99_ms']} | {three['errors']} |",
        f"| bare asyncio echo (ceiling) | {ceil['replies_per_s']} | {ceil['p50_ms']} | {ceil['p99_ms']} | {ceil['errors']} |",
        "",
        f"Registration storm: {storm['brokers']} brokers x {storm['topics']} topics in {storm['elapsed_s']} s = "
        f"{storm['broker_topics_per_s']} broker-topics/s ({storm['registrations_per_s']} registrations/s), "
        f"{storm['retries']} retries.",
        "",
    ]
    json_path, md_path = write_report("remoting", results, "\n".join(md))
    print("\n".join(md))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
