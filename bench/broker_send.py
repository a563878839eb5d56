"""Acked sends per second and their latency: the metaledger broker beside NATS JetStream.

    python -m bench.broker_send [--systems jetstream-r3,jetstream-r1,single,async,async3,sync2,quorum2of3]
                                [--size 1024] [--concurrency 64] [--duration 3] [--warmup 1]
                                [--count N] [--connections 4] [--queues 4] [--e2e] [--rounds 1]
                                [--loop uvloop|asyncio] [--flush ASYNC_FLUSH|SYNC_FLUSH]
                                [--out-dir DIR] [--no-plot]

Issue 17's performance section: one run, every system with the same message size and the
same number of concurrent producers (each a task that sends, awaits the acknowledgement,
and sends again), for ``--duration`` seconds after ``--warmup`` seconds (or until ``--count``
sends were acknowledged, whichever comes first); ``--rounds N`` runs the systems in turn N
times (each on fresh processes) and reports each system's median run. Per system: sends/s,
p50/p99 latency of each send (request to acknowledgement), failed sends by reason, the CPU
of this process (the load generator), of the servers and of everything else. Systems:

    jetstream-r3   3 nats-server -js processes in one cluster, a stream of 3 replicas, file
                   storage, ``js.publish`` awaiting each PubAck (bench.jetstream)
    jetstream-r1   one nats-server, a stream of 1 replica: the one-replica reference
    single, async, async3, sync2, quorum2of3
                   the metaledger broker (bench.broker_group.MODES): SEND_MESSAGE_V2 over
                   pipelined remoting connections (bench.rmq_client) to the group's master;
                   skipped, with a line saying so, when ``metaledger broker`` is not there

``--e2e`` also consumes while it sends (JetStream: an ordered push consumer; the broker: a
long-polling PULL_MESSAGE loop per queue) and reports produce-to-consume latency p50/p99:
each payload starts with the sender's clock (``perf_counter_ns``, one process).

Every process is started on free 127.0.0.1 ports and stopped by PID. Results:
``bench/results/broker_send-<date>.json`` and ``.md`` (bench.report) and, with matplotlib
(``pip install -e .[bench]``), a ``.png`` beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import struct
import sys
import time
import traceback
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.broker_send_report import markdown, median_run, plot, ratios  # noqa: E402
from bench.report import RESULTS_DIR, machine, result_stem, timestamp, write_report  # noqa: E402
from nameserver.loadgen.procstats import machine_busy_jiffies, process_cpu_s  # noqa: E402

JETSTREAM = ("jetstream-r3", "jetstream-r1")
BROKER = ("single", "async", "async3", "sync2", "quorum2of3")
SYSTEMS = JETSTREAM + BROKER
_STAMP = struct.Struct(">Q")


class Target(Protocol):
    async def open(self, timeout_s: float = 30.0) -> None: ...
    async def send(self, worker: int, payload: bytes) -> None: ...
    async def consume(self, on_payload: Callable[[bytes], None]) -> None: ...
    async def close(self) -> None: ...


def percentile(sorted_values: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile (0..1) of an ascending list; None when empty."""
    if not sorted_values:
        return None
    rank = max(1, round(q * len(sorted_values) + 0.5 - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary(latencies_ns: list[int], prefix: str = "") -> dict[str, float | None]:
    ms = sorted(v / 1e6 for v in latencies_ns)
    return {
        f"{prefix}p50_ms": _round(percentile(ms, 0.50)),
        f"{prefix}p99_ms": _round(percentile(ms, 0.99)),
        f"{prefix}max_ms": _round(ms[-1] if ms else None),
    }


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


async def measure(
    name: str,
    target: Target,
    args: argparse.Namespace,
    server_cpu_s: Callable[[], float],
    log: Callable[[str], None] = print,
    per_process: Callable[[], list[float]] | None = None,
) -> dict[str, Any]:
    """Drive ``target`` with ``args.concurrency`` senders; the measured window starts
    ``args.warmup`` s after the first send and ends after ``args.duration`` s or
    ``args.count`` measured sends. A send counts when it started and was acknowledged
    inside the window. The servers' CPU per send is their CPU over the whole run (warm-up
    included) over every send acknowledged in it; ``per_process`` (each server's CPU
    seconds) adds it per process."""
    try:
        return await _measure(name, target, args, server_cpu_s, log, per_process)
    finally:
        await target.close()


async def _measure(
    name: str,
    target: Target,
    args: argparse.Namespace,
    server_cpu_s: Callable[[], float],
    log: Callable[[str], None],
    per_process: Callable[[], list[float]] | None = None,
) -> dict[str, Any]:
    await target.open()
    pad = b"x" * (args.size - _STAMP.size)
    e2e: list[int] = []
    lat: list[int] = []
    errors: collections.Counter[str] = collections.Counter()
    stop = asyncio.Event()
    t0 = time.perf_counter_ns()
    window_from = t0 + int(args.warmup * 1e9)
    window_to = window_from + int(args.duration * 1e9)
    ended_at = window_to
    acked = 0  # every acknowledged send, warm-up included (the CPU per send)

    def on_payload(payload: bytes) -> None:
        (sent,) = _STAMP.unpack_from(payload)
        if window_from <= sent <= window_to:
            e2e.append(time.perf_counter_ns() - sent)

    if args.e2e:
        await target.consume(on_payload)

    async def sender(worker: int) -> None:
        nonlocal ended_at, acked
        while not stop.is_set():
            start = time.perf_counter_ns()
            try:
                await target.send(worker, _STAMP.pack(start) + pad)
            except Exception as exc:
                errors[_reason(exc)] += 1
                await asyncio.sleep(0.01)  # no hot loop against a refusing server
                continue
            end = time.perf_counter_ns()
            acked += 1
            if stop.is_set():
                return  # acknowledged after the window closed
            if start >= window_from and end <= window_to:
                lat.append(end - start)
                if args.count and len(lat) >= args.count:
                    ended_at = end
                    stop.set()

    async def progress() -> None:
        last_n, last_t = 0, time.perf_counter_ns()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.progress)
            now = time.perf_counter_ns()
            phase = "warm-up" if now < window_from else "measuring"
            rate = (len(lat) - last_n) / max(1e-9, (now - last_t) / 1e9)
            err = sum(errors.values())
            log(
                f"  {name}: {(now - t0) / 1e9:5.1f} s {phase:9} {len(lat):>8} acked"
                f" {rate:>9.0f}/s  errors {err}"
            )
            last_n, last_t = len(lat), now

    async def timer() -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), (window_to - time.perf_counter_ns()) / 1e9)
        stop.set()

    wall0, cpu0 = time.perf_counter_ns(), time.process_time()
    server0, machine0 = server_cpu_s(), machine_busy_jiffies()
    each0 = per_process() if per_process is not None else []
    acked0 = acked
    tasks = [asyncio.create_task(sender(w)) for w in range(args.concurrency)]
    helpers = [asyncio.create_task(progress()), asyncio.create_task(timer())]
    try:
        await asyncio.gather(*helpers)
        # the senders end after their send in flight; a wedged send is cut off
        _, late = await asyncio.wait(tasks, timeout=35)
        for task in late:
            task.cancel()
        window_s = max(1e-9, (min(ended_at, window_to) - window_from) / 1e9)
        elapsed_total = (time.perf_counter_ns() - wall0) / 1e9
        client_cpu, server_cpu = time.process_time() - cpu0, server_cpu_s() - server0
        each = [b - a for a, b in zip(each0, per_process(), strict=True)] if per_process else []
        sends_total = max(1, acked - acked0)
        machine_pct = _machine_pct(machine0, machine_busy_jiffies())
        if args.e2e:  # the window's last messages arrive: wait until none came for 0.3 s
            last, deadline = -1, time.monotonic() + 3.0
            while len(e2e) != last and time.monotonic() < deadline:
                last = len(e2e)
                await asyncio.sleep(0.3)
    finally:
        for task in tasks:
            task.cancel()
    result: dict[str, Any] = {
        "system": name,
        "sends": len(lat),
        "window_s": round(window_s, 3),
        "sends_per_s": round(len(lat) / window_s),
        **latency_summary(lat),
        "errors": dict(errors),
        "client_cpu_pct": round(100 * client_cpu / elapsed_total),
        "server_cpu_pct": round(100 * server_cpu / elapsed_total),
        "server_cpu_us_per_send": round(1e6 * server_cpu / sends_total, 1),
        "machine_cpu_pct": machine_pct,
        "foreign_cpu_pct": (
            None
            if machine_pct is None
            else round(machine_pct - 100 * (client_cpu + server_cpu) / elapsed_total)
        ),
    }
    if each:
        result["process_cpu_us_per_send"] = [round(1e6 * s / sends_total, 1) for s in each]
    if args.e2e:
        result.update(latency_summary(e2e, "e2e_"))
        result["e2e_received"] = len(e2e)
    return result


def _machine_pct(a: tuple[int, int] | None, b: tuple[int, int] | None) -> int | None:
    """The whole machine's CPU between two /proc/stat samples, in percent of one core."""
    if a is None or b is None or b[1] <= a[1]:
        return None
    return round((b[0] - a[0]) / (b[1] - a[1]) * (os.cpu_count() or 1) * 100)


def _reason(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    return f"code {code}" if isinstance(code, int) else type(exc).__name__


def _run_loop(coro: Coroutine[Any, Any, dict[str, Any]], loop: str) -> dict[str, Any]:
    if loop == "uvloop":
        import uvloop

        result: dict[str, Any] = uvloop.run(coro)
        return result
    return asyncio.run(coro)


def _cpu_s(pids: list[int]) -> float:
    return sum(s or 0.0 for s in process_cpu_s(pids))


def run_jetstream(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from bench.jetstream import JetStreamTarget, NatsCluster, nats_server_path

    binary = nats_server_path()
    if binary is None:
        return {"system": name, "skipped": "nats-server not installed"}
    replicas = 3 if name == "jetstream-r3" else 1
    cluster = NatsCluster(size=replicas, binary=binary)
    print(f"{name}: starting {replicas} nats-server -js", flush=True)
    cluster.start()
    try:
        target = JetStreamTarget(cluster.urls, replicas, args.connections)
        pids = cluster.pids
        result = _run_loop(measure(name, target, args, lambda: _cpu_s(pids)), args.loop)
    finally:
        cluster.stop()
    result["setup"] = f"{replicas} nats-server, stream R{replicas}, file storage, acked publish"
    return result


def run_broker(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from bench import broker_group
    from bench.rmq_client import RmqTarget

    reason = broker_group.unavailable_reason()
    if reason is not None:
        return {"system": name, "skipped": reason}
    mode = broker_group.MODES[name]
    flush = ("--flush", args.flush) if args.flush else ()
    group = broker_group.BrokerGroup(mode, queues=args.queues, extra_args=flush)
    print(f"{name}: starting a metaledger node and {mode.replicas} broker replica(s)", flush=True)
    group.start()
    try:
        target = RmqTarget(
            group.master_address,
            broker_group.TOPIC,
            broker_group.GROUP,
            queues=args.queues,
            connections=args.connections,
        )
        pids = [p.pid for n, p in group.procs.items() if n != "meta"]  # r0 (the master) first
        result = _run_loop(
            measure(
                name,
                target,
                args,
                lambda: _cpu_s(pids),
                per_process=lambda: [s or 0.0 for s in process_cpu_s(pids)],
            ),
            args.loop,
        )
    finally:
        group.stop()
    result["setup"] = mode.what
    return result


def run_system(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One system, start to stop; a failure is reported as that system's result."""
    try:
        if name in JETSTREAM:
            result = run_jetstream(name, args)
        else:
            result = run_broker(name, args)
    except Exception as exc:
        traceback.print_exc()
        result = {"system": name, "failed": f"{type(exc).__name__}: {exc}"}
    if "skipped" in result:
        print(f"{name}: skipped: {result['skipped']}", flush=True)
    elif "failed" in result:
        print(f"{name}: FAILED: {result['failed']}", flush=True)
    else:
        print(
            f"{name}: {result['sends_per_s']} sends/s, p50 {result['p50_ms']} ms,"
            f" p99 {result['p99_ms']} ms, errors {sum(result['errors'].values())}",
            flush=True,
        )
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.broker_send",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, in run order")
    ap.add_argument("--size", type=int, default=1024, help="message bytes (default 1024)")
    ap.add_argument("--concurrency", type=int, default=64, help="concurrent producers (64)")
    ap.add_argument("--duration", type=float, default=3.0, help="measured seconds (3)")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring (1)")
    ap.add_argument("--count", type=int, default=0, help="stop after N measured sends (0: none)")
    ap.add_argument("--connections", type=int, default=4, help="connections per system (4)")
    ap.add_argument("--queues", type=int, default=4, help="the broker topic's queues (4)")
    ap.add_argument("--e2e", action="store_true", help="also produce-to-consume latency")
    ap.add_argument(
        "--rounds", type=int, default=1, help="run the systems in turn N times; report medians"
    )
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument(
        "--flush",
        choices=("ASYNC_FLUSH", "SYNC_FLUSH"),
        default=None,
        help="the broker replicas' --flush (default: theirs, ASYNC_FLUSH)",
    )
    ap.add_argument("--progress", type=float, default=1.0, help="seconds between progress lines")
    ap.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(SYSTEMS)}")
    if args.size < _STAMP.size:
        ap.error(f"--size must be at least {_STAMP.size} (the payload carries a timestamp)")
    if min(args.concurrency, args.connections, args.rounds) < 1 or args.duration <= 0:
        ap.error("--concurrency, --connections, --rounds and --duration must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report: dict[str, Any] = {
        "date": timestamp(),
        "machine": machine(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "params": {
            k: getattr(args, k)
            for k in (
                "size",
                "concurrency",
                "duration",
                "warmup",
                "count",
                "connections",
                "queues",
                "e2e",
                "loop",
                "rounds",
            )
        },
        "results": [],
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.systems}
    for round_ in range(args.rounds):
        if args.rounds > 1:
            print(f"round {round_ + 1} of {args.rounds}", flush=True)
        for name in args.systems:
            runs[name].append(run_system(name, args))
    report["results"] = [median_run(runs[name]) for name in args.systems]
    report["ratios"] = ratios(report["results"])
    for r in report["ratios"]:
        print(f"ratio {r['of']} / {r['to']}: {r['ratio']} ({r['what']})")
    json_path, md_path = write_report("broker_send", report, markdown(report), args.out_dir)
    print(f"wrote {json_path} and {md_path}")
    if not args.no_plot:
        png = plot(
            report, result_stem("broker_send", report["date"], args.out_dir).with_suffix(".png")
        )
        print(
            f"wrote {png}" if png else "no plot: matplotlib not installed (pip install -e .[bench])"
        )
    failed = [r["system"] for r in report["results"] if "failed" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
