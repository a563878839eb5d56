"""Coordination load, etcd 3.4 and metaledger side by side (issue 4's performance section).

    python -m bench.coord_bench [--scenarios lease,watch] [--systems etcd,metaledger] ...

Same clusters as ``bench.compare_etcd`` (3 members on loopback, one system at a time, stopped
by PID), same load generator for both (grpc.aio, the etcd wire protocol):

* **lease**: grant ``--leases`` leases (TTL ``--lease-ttl``), keep them all alive from
  ``--lease-clients`` clients (one LeaseKeepAlive stream each, spread over the members, up to
  ``--window`` keepalives in flight per stream) for ``--duration`` s: keepalives/s, p50/p99,
  and the leader's CPU. Then stop: how long after the TTL until every lease is gone (the
  leader expires them), and the leader's CPU seconds spent meanwhile.
* **watch**: the watchers of ``--watch-rows`` on one prefix over ``--streams`` streams (spread over the
  members, held by ``--receiver-procs`` receiver processes); one writer puts at the rates of ``--watch-rows``
  for ``--duration`` s, each value its send time. Per delivered event: delivery latency
  (receive time - send time) p50/p99; delivered events/s, the fraction delivered within the
  drain time, and the leader's CPU.

Results: ``bench/results/coord-<date>.json`` and ``.md``. Everything is bounded: each phase
has a deadline, receivers stop themselves, and every process started is stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from bench.compare_etcd import (
    ROOT,
    Cluster,
    env_with_root,
    start_system,
)
from bench.report import RESULTS_DIR, machine, timestamp, write_report
from nameserver.loadgen.procstats import process_cpu_s
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc

PREFIX = b"bench/watch/"
CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0)]


def percentile_ms(sorted_s: Sequence[float], q: float) -> float | None:
    if not sorted_s:
        return None
    return sorted_s[min(len(sorted_s) - 1, int(q * len(sorted_s)))] * 1000


def leader_pid(cluster: Cluster) -> int:
    return cluster.server_pids[cluster.endpoints.index(cluster.leader)]


class CpuMeter:
    """CPU seconds of one process between start() and stop()."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.t0 = 0.0
        self.c0 = 0.0

    def start(self) -> None:
        self.t0, self.c0 = time.monotonic(), process_cpu_s([self.pid])[0] or 0.0

    def stop(self) -> dict[str, float]:
        wall = time.monotonic() - self.t0
        cpu = (process_cpu_s([self.pid])[0] or 0.0) - self.c0
        return {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "cores": round(cpu / wall, 2)}


async def until_none(queue: asyncio.Queue[Any]) -> AsyncIterator[Any]:
    """A request stream: the queue's items until a None."""
    while True:
        item = await queue.get()
        if item is None:
            return
        yield item


# --------------------------------------------------------------------------- leases
async def _grant_all(stubs: list[Any], n: int, ttl: int, deadline: float) -> list[int]:
    ids: list[int] = []
    next_i = 0

    async def worker(k: int) -> None:
        nonlocal next_i
        stub = stubs[k % len(stubs)]
        while next_i < n:
            next_i += 1
            if time.monotonic() > deadline:
                raise TimeoutError("granting leases took too long")
            resp = await stub.LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=ttl), timeout=10)
            ids.append(resp.ID)

    await asyncio.gather(*(worker(k) for k in range(64)))
    return ids


async def _keep_alive(
    stub: Any, leases: list[int], window: int, stop_at: float, lat: list[float]
) -> tuple[int, int]:
    """One stream: keep ``leases`` alive round-robin until ``stop_at``; returns (ok, zero-TTL)."""
    sent: deque[float] = deque()
    queue: asyncio.Queue[rpc_pb2.LeaseKeepAliveRequest | None] = asyncio.Queue()
    credit = asyncio.Semaphore(window)

    call = stub.LeaseKeepAlive(until_none(queue))
    ok = zero = 0

    async def send() -> None:
        i = 0
        while time.monotonic() < stop_at:
            await credit.acquire()
            sent.append(time.perf_counter())
            await queue.put(rpc_pb2.LeaseKeepAliveRequest(ID=leases[i % len(leases)]))
            i += 1
        await queue.put(None)

    sender = asyncio.ensure_future(send())
    try:
        async for resp in call:
            lat.append(time.perf_counter() - sent.popleft())
            credit.release()
            if resp.TTL > 0:
                ok += 1
            else:
                zero += 1
            if sender.done() and not sent:
                break
    finally:
        sender.cancel()
        call.cancel()
    return ok, zero


async def _lease_count(stub: Any) -> int:
    resp = await stub.LeaseLeases(rpc_pb2.LeaseLeasesRequest(), timeout=10)
    return len(resp.leases)


async def lease_scenario(cluster: Cluster, args: argparse.Namespace) -> dict[str, Any]:
    channels = [grpc.aio.insecure_channel(e, options=CHANNEL_OPTIONS) for e in cluster.endpoints]
    try:
        stubs = [rpc_pb2_grpc.LeaseStub(ch) for ch in channels]
        leader_stub = stubs[cluster.endpoints.index(cluster.leader)]
        t0 = time.monotonic()
        ids = await _grant_all(stubs, args.leases, args.lease_ttl, t0 + 120)
        grant_s = time.monotonic() - t0
        print(f"   granted {len(ids)} leases in {grant_s:.1f}s", file=sys.stderr, flush=True)
        per = [ids[k :: args.lease_clients] for k in range(args.lease_clients)]
        meter = CpuMeter(leader_pid(cluster))
        lat: list[float] = []
        meter.start()
        stop_at = time.monotonic() + args.duration
        results = await asyncio.gather(
            *(
                _keep_alive(stubs[k % len(stubs)], per[k], args.window, stop_at, lat)
                for k in range(args.lease_clients)
            )
        )
        keep_cpu = meter.stop()
        ok = sum(r[0] for r in results)
        zero = sum(r[1] for r in results)
        alive_after = await _lease_count(leader_stub)
        # Expiry: nobody keeps anything alive from now on.
        stopped = time.monotonic()
        meter.start()
        remaining = alive_after
        gone_at = None
        while time.monotonic() < stopped + args.lease_ttl + 120:
            remaining = await _lease_count(leader_stub)
            if remaining == 0:
                gone_at = time.monotonic()
                break
            await asyncio.sleep(0.25)  # polling interval of the expiry observer
        expire_cpu = meter.stop()
        lat.sort()
        return {
            "leases": len(ids),
            "grant_per_s": round(len(ids) / grant_s, 1),
            "keepalive_per_s": round(ok / keep_cpu["wall_s"], 1),
            "keepalive_p50_ms": percentile_ms(lat, 0.5),
            "keepalive_p99_ms": percentile_ms(lat, 0.99),
            "keepalive_ttl0": zero,
            "alive_after_keepalive": alive_after,
            "leader_cpu_keepalive": keep_cpu,
            "all_expired_after_ttl_s": None
            if gone_at is None
            else round(gone_at - stopped - args.lease_ttl, 2),
            "not_expired": remaining,
            "leader_cpu_expiry": expire_cpu,
        }
    finally:
        for ch in channels:
            await ch.close()


# --------------------------------------------------------------------------- watch
async def _receiver(args: argparse.Namespace) -> None:
    """A receiver process: ``--watches`` watches over ``--streams`` streams; prints 'ready',
    then collects until ``--until`` (a time.time()), then prints one JSON line."""
    endpoints = args.endpoints.split(",")
    channels = [grpc.aio.insecure_channel(e, options=CHANNEL_OPTIONS) for e in endpoints]
    lat: list[float] = []
    counts = {"events": 0, "responses": 0}
    canceled: list[str] = []
    got: list[int] = [0] * args.streams
    ready = 0
    streams = args.streams
    per_stream = [args.watches // streams + (k < args.watches % streams) for k in range(streams)]
    created = asyncio.Event()
    until = args.until
    last_event = [0.0]

    async def one(k: int) -> None:
        nonlocal ready
        # Raw bytes in, parsed only when they carry events: the receivers, not the servers,
        # are what runs out of CPU first here.
        watch = channels[(k + args.offset) % len(channels)].stream_stream(
            "/etcdserverpb.Watch/Watch",
            request_serializer=rpc_pb2.WatchRequest.SerializeToString,
            response_deserializer=None,
        )
        q: asyncio.Queue[rpc_pb2.WatchRequest | None] = asyncio.Queue()
        end = PREFIX[:-1] + bytes([PREFIX[-1] + 1])
        for _ in range(per_stream[k]):
            q.put_nowait(
                rpc_pb2.WatchRequest(
                    create_request=rpc_pb2.WatchCreateRequest(key=PREFIX, range_end=end)
                )
            )

        call = watch(until_none(q))
        mine = 0
        parse = rpc_pb2.WatchResponse.FromString
        try:
            async for raw in call:
                resp = parse(raw)
                if resp.canceled:
                    canceled.append(f"{resp.watch_id}: {resp.cancel_reason}")
                    continue
                if resp.created:
                    mine += 1
                    if mine == per_stream[k]:
                        ready += 1
                        if ready == streams:
                            created.set()
                    continue
                now = time.time()
                counts["responses"] += 1
                last_event[0] = now
                got[k] += len(resp.events)
                for ev in resp.events:
                    counts["events"] += 1
                    lat.append(now - int(ev.kv.value[:20]) / 1e9)
        finally:
            q.put_nowait(None)
            call.cancel()

    tasks = [asyncio.ensure_future(one(k)) for k in range(streams)]
    await asyncio.wait_for(created.wait(), 120)
    print("ready", flush=True)
    # Done when events stopped coming for --idle seconds (the writer finished and everything
    # was drained), or at the hard deadline.
    while time.time() < until and not all(t.done() for t in tasks):
        if last_event[0] and time.time() - last_event[0] > args.idle:
            break
        await asyncio.sleep(0.2)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    lat.sort()
    print(
        json.dumps(
            {
                **counts,
                "canceled": canceled[:5],
                "per_stream": got,
                "p50_ms": percentile_ms(lat, 0.5),
                "p99_ms": percentile_ms(lat, 0.99),
                "max_ms": lat[-1] * 1000 if lat else None,
            }
        ),
        flush=True,
    )
    for ch in channels:
        await ch.close()


async def _writer(endpoint: str, rate: float, duration: float) -> tuple[int, list[str]]:
    """Put at ``rate``/s for ``duration`` s; returns (acknowledged puts, a few errors)."""
    async with grpc.aio.insecure_channel(endpoint, options=CHANNEL_OPTIONS) as ch:
        stub = rpc_pb2_grpc.KVStub(ch)
        n = 0
        acked = 0
        errors: list[str] = []
        start = time.monotonic()
        inflight: set[asyncio.Future[Any]] = set()

        def done(fut: asyncio.Future[Any]) -> None:
            nonlocal acked
            inflight.discard(fut)
            if fut.exception() is None:
                acked += 1
            elif len(errors) < 5:
                exc = fut.exception()
                code = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else ""
                errors.append(f"{time.monotonic() - start:.1f}s: {code or repr(exc)}")

        while True:
            due = start + n / rate
            now = time.monotonic()
            if due - start >= duration:
                break
            if due > now:
                await asyncio.sleep(due - now)
            value = str(time.time_ns()).encode().rjust(20, b"0")
            key = PREFIX + b"k%06d" % (n % 1000)
            fut = asyncio.ensure_future(
                stub.Put(rpc_pb2.PutRequest(key=key, value=value), timeout=30)
            )
            inflight.add(fut)
            fut.add_done_callback(done)
            n += 1
        if inflight:
            await asyncio.wait(inflight, timeout=60)
        return acked, errors


def watch_scenario(
    cluster: Cluster, args: argparse.Namespace, watchers: int, rate: float
) -> dict[str, Any]:
    procs = args.receiver_procs
    until = time.time() + 120 + args.duration + args.drain  # replaced below once all are ready
    recv: list[subprocess.Popen[str]] = []
    try:
        for p in range(procs):
            watches = watchers // procs + (p < watchers % procs)
            streams = max(1, args.streams // procs)
            cmd = [
                sys.executable,
                "-m",
                "bench.coord_bench",
                "--child-receiver",
                "--endpoints",
                ",".join(cluster.endpoints),
                "--watches",
                str(watches),
                "--streams",
                str(streams),
                "--offset",
                str(p),
                "--until",
                str(until),
                "--idle",
                str(args.drain),
            ]
            recv.append(
                subprocess.Popen(
                    cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env_with_root()
                )
            )
        for r in recv:
            line = r.stdout.readline() if r.stdout else ""
            if line.strip() != "ready":
                raise RuntimeError(f"watch receiver {r.pid} not ready: {line!r}")
        leader = CpuMeter(leader_pid(cluster))
        servers = [CpuMeter(pid) for pid in cluster.server_pids]
        for m in (leader, *servers):
            m.start()
        written, errors = asyncio.run(_writer(cluster.leader, rate, args.duration))
        print(f"   wrote {written} keys; errors: {errors}", file=sys.stderr, flush=True)
        outs = []
        for r in recv:
            out, _ = r.communicate(timeout=until - time.time() + 30)
            outs.append(json.loads(out.strip().splitlines()[-1]))
            if outs[-1]["canceled"]:
                print(f"   watchers canceled: {outs[-1]['canceled']}", file=sys.stderr)
        leader_cpu = leader.stop()  # until every receiver is done (the drain included)
        servers_cpu_s = sum(m.stop()["cpu_s"] for m in servers)
        events = sum(o["events"] for o in outs)
        expected = written * watchers
        return {
            "watchers": watchers,
            "streams": args.streams,
            "rate": rate,
            "written": written,
            "delivered": events,
            "delivered_fraction": round(events / expected, 4) if expected else None,
            "delivered_per_s": round(events / args.duration, 1),
            "p50_ms": max((o["p50_ms"] or 0) for o in outs),
            "p99_ms": max((o["p99_ms"] or 0) for o in outs),
            "max_ms": max((o["max_ms"] or 0) for o in outs),
            "responses": sum(o["responses"] for o in outs),
            "leader_cpu": leader_cpu,
            "leader_cpu_us_per_event": round(leader_cpu["cpu_s"] / events * 1e6, 2)
            if events
            else None,
            "servers_cpu_us_per_event": round(servers_cpu_s / events * 1e6, 2) if events else None,
        }
    finally:
        for r in recv:
            if r.poll() is None:
                r.kill()
                r.wait()


# --------------------------------------------------------------------------- report
def table(report: dict[str, Any]) -> str:
    lines = []
    res = report["results"]
    if any("lease" in v for v in res.values()):
        lines += [
            "| lease | leases | keepalives/s | p50/p99 ms | leader cores (keepalive) "
            "| all expired s after TTL | leader CPU s (expiry) |",
            "|---|---|---|---|---|---|---|",
        ]
        for system, r in res.items():
            x = r.get("lease")
            if not x:
                continue
            if "failed" in x:
                lines.append(f"| {system} | failed: {x['failed']} ||||||")
                continue
            lines.append(
                f"| {system} | {x['leases']} | {x['keepalive_per_s']:.0f} "
                f"| {x['keepalive_p50_ms']:.1f} / {x['keepalive_p99_ms']:.1f} "
                f"| {x['leader_cpu_keepalive']['cores']} | {x['all_expired_after_ttl_s']} "
                f"| {x['leader_cpu_expiry']['cpu_s']} |"
            )
        lines.append("")
    if any("watch" in v for v in res.values()):
        lines += [
            "| watch | watchers | writes | delivered (fraction) | events/s of writing time "
            "| p50/p99 ms "
            "| server CPU µs per delivered event: leader / all 3 |",
            "|---|---|---|---|---|---|---|",
        ]
        for system, r in res.items():
            rows = r.get("watch") or []
            if isinstance(rows, dict):  # the scenario failed
                lines.append(f"| {system} | failed: {rows['failed']} ||||||")
                continue
            for x in rows:
                lines.append(
                    f"| {system} | {x['watchers']} | {x['rate']:.0f}/s: {x['written']} "
                    f"| {x['delivered']} ({x['delivered_fraction']}) "
                    f"| {x['delivered_per_s']:.0f} | {x['p50_ms']:.1f} / {x['p99_ms']:.1f} "
                    f"| {x['leader_cpu_us_per_event']} / {x['servers_cpu_us_per_event']} |"
                )
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    a = report["args"]
    md = [
        f"# Coordination load: etcd vs metaledger — {report['date']}",
        "",
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}, Python {m['python']}. 3 members each "
        "on 127.0.0.1, one system at a time, same load generator (`bench.coord_bench`).",
        f"Lease: {a['leases']} leases, TTL {a['lease_ttl']} s, {a['lease_clients']} keepalive "
        f"streams (window {a['window']}), {a['duration']} s. Watch: watchers x puts/s "
        f"{a['watch_rows']} on one prefix over {a['streams']} streams in "
        f"{a['receiver_procs']} receiver processes, for {a['duration']} s. Leader cores = CPU seconds of "
        "the leader process per wall second. The load generator shares the 2 cores.",
        "",
        table(report),
        "",
    ]
    return "\n".join(md)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.coord_bench", description=__doc__)
    p.add_argument("--scenarios", default="lease,watch")
    p.add_argument("--systems", default="etcd,metaledger")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--leases", type=int, default=10_000)
    p.add_argument("--lease-ttl", type=int, default=15)
    p.add_argument("--lease-clients", type=int, default=10)
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--streams", type=int, default=10)
    p.add_argument("--receiver-procs", type=int, default=2)
    p.add_argument(
        "--watch-rows",
        default="1000x1000,1000x100,100x100",
        help="WATCHERSxRATE: watchers on the prefix and puts/s of the writer; one row each",
    )
    p.add_argument(
        "--drain",
        type=float,
        default=10.0,
        help="a receiver stops once no event came for this long (the writer finished and "
        "everything was delivered)",
    )
    p.add_argument("--etcd", default=os.environ.get("ETCD", "/usr/bin/etcd"))
    p.add_argument("--etcdctl", default=os.environ.get("ETCDCTL", "etcdctl"))
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--keep-data", action="store_true", help="keep the data dirs and logs")
    # receiver child
    p.add_argument("--child-receiver", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--endpoints", help=argparse.SUPPRESS)
    p.add_argument("--watches", type=int, help=argparse.SUPPRESS)
    p.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--until", type=float, help=argparse.SUPPRESS)
    p.add_argument("--idle", type=float, default=3.0, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child_receiver:
        asyncio.run(_receiver(args))
        return 0
    scenarios = [s for s in args.scenarios.split(",") if s]
    systems = [s for s in args.systems.split(",") if s]
    if set(scenarios) - {"lease", "watch"} or set(systems) - {"etcd", "metaledger"}:
        print("coord_bench: --scenarios lease,watch; --systems etcd,metaledger", file=sys.stderr)
        return 2
    report: dict[str, Any] = {
        "date": timestamp(),
        "machine": machine(),
        "args": {k: v for k, v in vars(args).items() if k not in {"out_dir"} and "child" not in k},
        "results": {},
    }
    report["args"].pop("until", None)
    workdir = Path(tempfile.mkdtemp(prefix="coord_bench-"))
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    cluster: Cluster | None = None
    status = 0
    try:
        for system in systems:
            (workdir / system).mkdir()
            cluster = start_system(system, args, workdir / system)
            out = report["results"].setdefault(system, {"version": cluster.version})
            for scenario in scenarios:
                print(f"== {system}: {scenario}", file=sys.stderr, flush=True)
                try:
                    if scenario == "lease":
                        out["lease"] = asyncio.run(lease_scenario(cluster, args))
                    else:
                        out["watch"] = [
                            watch_scenario(cluster, args, int(w), float(r))
                            for w, r in (row.split("x") for row in args.watch_rows.split(","))
                        ]
                except Exception as exc:  # keep going: report the failure in its row
                    out[scenario] = {"failed": f"{type(exc).__name__}: {exc}"}
                print(f"   {json.dumps(out[scenario])}", file=sys.stderr, flush=True)
            cluster.stop()
            cluster = None
    except KeyboardInterrupt:
        status = 130
    finally:
        if cluster is not None:
            cluster.stop()
        if args.keep_data:
            print(f"coord_bench: data and logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    _, path = write_report("coord", report, markdown(report), args.out_dir)
    print(table(report))
    print(f"results: {path}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
