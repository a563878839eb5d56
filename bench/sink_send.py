"""Confirmed messages per second and confirm latency of the two RocketMQ sinks against one real
``metaledger broker``: the asyncio producer on the project's remoting codec
(``replicator.sinks.rocketmq``) beside the ``rocketmq`` 0.4.4 wheel (``replicator.sinks.wheel``).

    python -m bench.sink_send [--sinks codec,wheel] [--size 1024] [--in-flight 256]
                              [--duration 5] [--count N] [--warmup 1] [--queues 4]
                              [--mode single] [--threads 8] [--out-dir DIR]

Issue 18 §6 ("measure it against an asyncio producer on the project's own remoting codec and
keep what is faster"). One metaledger node and one broker group (``bench.broker_group``, mode
``single`` by default) serve both sinks in turn, each on a topic of its own with ``--queues``
queues. The load is one asyncio task that submits ``--size``-byte messages round-robin over
the queues, at most ``--in-flight`` unconfirmed (the sink's ``max_in_flight``: ``submit``
waits for capacity), for ``--duration`` seconds after ``--warmup`` seconds (or ``--count``
confirmations). Latency is submit-to-confirmation of each message (so it includes the time a
message waits in the sink behind others of its queue). Progress: one line a second.

Results: ``bench/results/sink_send-<date>.json`` and ``.md`` (bench.report).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.broker_group import GROUP, MODES, BrokerGroup  # noqa: E402
from bench.report import RESULTS_DIR, fmt, machine, timestamp, write_report  # noqa: E402
from nameserver.client import Client, QueueData  # noqa: E402
from replicator.sinks.base import OutMessage, Sink  # noqa: E402
from replicator.sinks.errors import SinkError  # noqa: E402
from replicator.sinks.rocketmq import RocketMQSink, RocketMQSinkConfig  # noqa: E402

SINKS = ("codec", "codec1", "wheel")


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def make_sink(name: str, topic: str, args: argparse.Namespace, endpoints: str) -> Sink:
    client = Client([endpoints], timeout_s=10)
    if name in ("codec", "codec1"):
        # codec1: one message a request, as the wheel sends (no batching): the same protocol
        # work per message, so the difference is the client, not the batching
        one = {"max_batch_messages": 1} if name == "codec1" else {}
        config = RocketMQSinkConfig(topics=(topic,), max_in_flight=args.in_flight, **one)
        return RocketMQSink(config, client)
    from replicator.sinks.wheel import WheelSink, WheelSinkConfig

    host, _, port = endpoints.rpartition(":")
    namesrv = f"{host}:{int(port) + 2}"  # bench.broker_group: client port B, remoting B+2
    wconfig = WheelSinkConfig(namesrv, (topic,), max_in_flight=args.in_flight, threads=args.threads)
    return WheelSink(wconfig, client)


async def measure(name: str, sink: Sink, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    await sink.start()
    queues = sink.queue_count(topic)
    payload = os.urandom(args.size)
    latencies: list[float] = []
    failures: dict[str, int] = {}
    state = {"confirmed": 0, "measuring": False}
    loop = asyncio.get_running_loop()

    pending: set[asyncio.Future[None]] = set()

    def done(started: float, future: asyncio.Future[None]) -> None:
        pending.discard(future)
        exc = future.exception()
        if exc is not None:
            key = type(exc).__name__
            failures[key] = failures.get(key, 0) + 1
            return
        if state["measuring"]:
            state["confirmed"] += 1
            latencies.append(loop.time() - started)

    start = loop.time()
    warm_end = start + args.warmup
    end = warm_end + args.duration
    next_progress = start + 1
    measured_from = warm_end
    i = 0
    last: asyncio.Future[None] | None = None
    while True:
        now = loop.time()
        if not state["measuring"] and now >= warm_end:
            state["measuring"] = True
            measured_from = now
        if now >= end or (args.count and state["confirmed"] >= args.count):
            break
        if now >= next_progress:
            rate = state["confirmed"] / max(now - measured_from, 1e-9)
            print(
                f"  {name}: {now - start:4.1f} s, {state['confirmed']} confirmed"
                + (f", {rate:,.0f}/s" if state["measuring"] else " (warming up)"),
                flush=True,
            )
            next_progress += 1
        msg = OutMessage(topic, i % queues, payload, "BENCH", f"k{i}", {"i": str(i)}, i)
        try:
            last = await sink.submit(msg)
        except SinkError as exc:
            failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
            break
        pending.add(last)
        last.add_done_callback(lambda f, t=loop.time(): done(t, f))
        i += 1
    elapsed = loop.time() - measured_from
    confirmed = state["confirmed"]
    state["measuring"] = False
    if pending:
        await asyncio.wait(set(pending), timeout=30)  # drain: no failure is counted at close
    await sink.close()
    return {
        "sink": name,
        "confirmed": confirmed,
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(confirmed / elapsed, 1) if elapsed > 0 else None,
        "p50_ms": round(1000 * p, 2) if (p := percentile(latencies, 0.50)) else None,
        "p99_ms": round(1000 * p, 2) if (p := percentile(latencies, 0.99)) else None,
        "mean_ms": round(1000 * statistics.fmean(latencies), 2) if latencies else None,
        "failures": failures,
    }


def markdown(report: dict[str, Any]) -> str:
    a = report["args"]
    lines = [
        f"# Sink send: codec sink vs wheel sink ({report['date']})",
        "",
        "`codec`: replicator.sinks.rocketmq as configured by default (one request per queue "
        "outstanding, the messages behind it batched); `codec1`: the same with one message a "
        "request (what the wheel does); `wheel`: replicator.sinks.wheel (the `rocketmq` 0.4.4 "
        "wheel's blocking `send_orderly`, one send per queue at a time, on a thread pool).",
        "",
        f"One broker group (mode `{a['mode']}`), {a['queues']} queues per topic, "
        f"{a['size']}-byte messages, at most {a['in_flight']} unconfirmed, "
        f"{a['duration']} s after {a['warmup']} s of warm-up"
        + (f" (or {a['count']} confirmations)" if a["count"] else "")
        + f"; wheel sink on {a['threads']} threads.",
        "",
        "| sink | confirmed | msgs/s | p50 ms | p99 ms | failures |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in report["results"]:
        lines.append(
            f"| {r['sink']} | {r['confirmed']} | {fmt(r['msgs_per_s'])} | "
            f"{fmt(r['p50_ms'], '.2f')} | {fmt(r['p99_ms'], '.2f')} | {r['failures'] or ''} |"
        )
    m = report["machine"]
    lines += [
        "",
        report["verdict"],
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu_model']}), kernel {m['kernel']}, "
        f"Python {m['python']}.",
    ]
    if report.get("note"):
        lines += ["", report["note"]]
    return "\n".join(lines)


def verdict(results: list[dict[str, Any]]) -> str:
    rate = {r["sink"]: r["msgs_per_s"] for r in results if r.get("msgs_per_s")}
    wheel = rate.get("wheel")
    if not wheel:
        return "The wheel sink was not measured: no comparison."
    parts = [
        f"`{name}` {rate[name]:,.0f} vs `wheel` {wheel:,.0f} msgs/s "
        f"({rate[name] / wheel:.1f}x: {'faster' if rate[name] > wheel else 'slower'})"
        for name in ("codec", "codec1")
        if name in rate
    ]
    return "; ".join(parts) + "." if parts else "Only the wheel sink was measured."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sinks", default=",".join(SINKS), help="codec, codec1 (no batching), wheel")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--in-flight", type=int, default=256)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--mode", default="single", choices=sorted(MODES))
    p.add_argument("--threads", type=int, default=8, help="the wheel sink's thread pool")
    p.add_argument("--note", default="", help="a line for the report (e.g. machine load)")
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    sinks = [s for s in args.sinks.split(",") if s]
    unknown = set(sinks) - set(SINKS)
    if unknown:
        p.error(f"unknown sinks: {sorted(unknown)}")
    report: dict[str, Any] = {
        "date": timestamp(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": machine(),
        "note": args.note,
        "results": [],
    }
    group = BrokerGroup(MODES[args.mode], queues=args.queues)
    print(f"starting one metaledger node and broker group ({args.mode}) in {group.root}")
    group.start()
    os.environ["HOME"] = str(group.root)  # the wheel's C++ core logs to $HOME/logs
    try:
        with Client([group.endpoints], timeout_s=10) as admin:
            for name in sinks:
                topic = f"SinkBench_{name}"
                admin.route_topic_create(topic, [QueueData(GROUP, args.queues, args.queues, 6)])
                print(f"{name}: sending to {topic}", flush=True)
                sink = make_sink(name, topic, args, group.endpoints)
                result = asyncio.run(measure(name, sink, topic, args))
                print(
                    f"{name}: {result['msgs_per_s']} msgs/s, p50 {result['p50_ms']} ms, "
                    f"p99 {result['p99_ms']} ms, failures {result['failures']}",
                    flush=True,
                )
                report["results"].append(result)
    finally:
        group.stop()
    report["verdict"] = verdict(report["results"])
    json_path, md_path = write_report("sink_send", report, markdown(report), args.out_dir)
    print(report["verdict"])
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
