"""The RocketMQ replicator's benchmark: replicated throughput and lag against the ceiling,
memory with a slow destination, the rate limit.

    python -m bench.rocketmq_replicate [--duration 20] [--size 1024] [--queues 4]
                                       [--max-in-flight 4096] [--rate 0]
                                       [--parts ceiling,replicated,slow,rate]
                                       [--limit-rate 2000] [--slow-in-flight 256]
                                       [--slow-duty 0.3] [--note TEXT] [--out-dir DIR]

Issue 19's performance section: "Replicated messages/s and end-to-end lag p50/p99 for 1 KiB
messages, against a producer writing straight into the destination cluster in the same run
(the ceiling): goal >= 0.8x of it."

Processes, all on free 127.0.0.1 ports and stopped by PID: two RocketMQ clusters, "A" (the
source) and "B" (the destination), each one metaledger node and one ``metaledger broker``
registered under its own cluster name (``tests.integration.replicator.rocketmq.clusters``,
what the replicator's integration tests use), and the producer.

The producer (:func:`produce`; its own process, ``--producer ENDPOINTS``, so this one only
starts, watches and reads back): the project's codec sink
(``replicator.sinks.rocketmq.RocketMQSink``, at most ``--max-in-flight`` unconfirmed
messages) sends ``--size``-byte messages round robin over the topic's write queues for
``--duration`` s, as fast as the sink takes them or paced at ``--rate`` msgs/s. Each body
starts with its send time (``time.time_ns()``, 8 bytes big-endian), taken just before
``submit``. It reports msgs/s (confirmed messages over first submit -> last confirmation) and
the ack latency of each message: ``submit`` called -> the sink's confirmation (PUT_OK of the
request that carried it), the wait for in-flight room included.

:func:`run_ceiling`: the producer straight into B. Its end-to-end latency is measured after
the run by reading every message back from B (PULL, :func:`e2e_latencies`): B's store
timestamp (ms) minus the send time in the body. A replicated run measures the same thing for
the same producer writing into A (send into A -> stored in B), so :func:`render` puts every
entry of ``report["runs"]`` beside the ceiling, as a fraction of its stored/s (the
destination's view, the same for both). The runs with a real replicator (the replicated
run, the slow destination, the rate limit) are in ``bench.rocketmq_replicate_runs``; they
need the ceiling first (its rate is their offered load).

Results: ``bench/results/rocketmq_replicate-<date>.json`` and ``.md`` (bench.report), and a
``.png`` (rates over time, RSS against the backlog) when matplotlib is there.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.broker_send import latency_summary  # noqa: E402
from bench.redis_replicate import cpu_seconds  # noqa: E402
from bench.report import (  # noqa: E402
    RESULTS_DIR,
    fmt,
    machine,
    result_stem,
    timestamp,
    write_report,
)
from bench.rocketmq_replicate_report import plot, render_runs  # noqa: E402
from bench.rocketmq_replicate_runs import (  # noqa: E402
    run_drain,
    run_rate,
    run_replicated,
    run_slow,
)

PARTS = ("ceiling", "replicated", "drain", "slow", "rate")

SOURCE, DEST = "A", "B"
_STAMP_BYTES = 8


def progress(msg: str) -> None:
    print(f"[rocketmq_replicate] {msg}", file=sys.stderr, flush=True)


# ---- the producer (its own process: --producer) ---------------------------------------


async def produce(
    endpoints: list[str],
    topic: str,
    duration: float,
    size: int,
    max_in_flight: int,
    rate: int,
    count: int = 0,
) -> dict[str, Any]:
    """Send through the codec sink for ``duration`` s (or until ``count`` messages were
    submitted, when given); see the module docstring."""
    from nameserver.client import Client
    from replicator.sinks.base import OutMessage
    from replicator.sinks.rocketmq import RocketMQSink, RocketMQSinkConfig

    cpu0 = time.process_time()
    pad = os.urandom(max(0, size - _STAMP_BYTES))
    latencies_ns: list[int] = []
    failures: collections.Counter[str] = collections.Counter()
    pending: set[asyncio.Future[Any]] = set()
    last_confirmed = [0.0]

    def done(t_ns: int, fut: asyncio.Future[Any]) -> None:
        pending.discard(fut)
        if fut.cancelled():
            failures["cancelled"] += 1
        elif (exc := fut.exception()) is not None:
            failures[type(exc).__name__] += 1
        else:
            now = time.perf_counter_ns()
            latencies_ns.append(now - t_ns)
            last_confirmed[0] = now / 1e9

    with Client(endpoints, timeout_s=10) as routes:
        config = RocketMQSinkConfig(
            topics=(topic,), producer_group="bench-producer", max_in_flight=max_in_flight
        )
        sink = RocketMQSink(config, routes)
        await sink.start()
        try:
            queues = sink.queue_count(topic)
            sent = 0
            t0 = time.perf_counter()
            next_report = t0 + 1.0
            while (now := time.perf_counter()) < t0 + duration and not (count and sent >= count):
                if rate and sent >= (now - t0) * rate:
                    await asyncio.sleep(min(0.01, t0 + sent / rate - now))
                    continue
                t_ns = time.perf_counter_ns()
                body = time.time_ns().to_bytes(_STAMP_BYTES, "big") + pad
                msg = OutMessage(topic, sent % queues, body, "BENCH", "", {}, sent)
                fut = await sink.submit(msg)
                pending.add(fut)
                fut.add_done_callback(functools.partial(done, t_ns))
                sent += 1
                if now >= next_report:
                    next_report += 1.0
                    progress(
                        f"producer t={now - t0:.0f}s sent {sent} confirmed {len(latencies_ns)}"
                        f" ({len(latencies_ns) / (now - t0):.0f}/s) in flight {len(pending)}"
                    )
            sending_s = time.perf_counter() - t0
            if pending:
                await asyncio.wait(list(pending), timeout=60)
        finally:
            await sink.close()
    confirmed = len(latencies_ns)
    span = (last_confirmed[0] - t0) if confirmed else None
    return {
        "sent": sent,
        "confirmed": confirmed,
        "failed": dict(failures),
        "sending_s": sending_s,
        "confirmed_span_s": span,
        "msgs_per_s": confirmed / span if span else None,
        "process_cpu_s": time.process_time() - cpu0,
        **latency_summary(latencies_ns, "ack_"),
    }


def producer_argv(
    args: argparse.Namespace, endpoints: list[str], topic: str, rate: int = 0
) -> list[str]:
    """The producer process's command line (``rate`` 0: as fast as the sink takes them)."""
    return [
        sys.executable, "-m", "bench.rocketmq_replicate", "--producer", ",".join(endpoints),
        "--topic", topic, "--duration", str(args.duration), "--size", str(args.size),
        "--max-in-flight", str(args.max_in_flight), "--rate", str(rate or args.rate),
    ]  # fmt: skip


def run_producer(argv: list[str], pids: dict[str, int]) -> tuple[dict[str, Any], dict[str, float]]:
    """Run the producer to its end; returns its report and the CPU seconds each process of
    ``pids`` (and the producer) used meanwhile (each one's last reading while it lived)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=ROOT)
    try:
        watched = {"producer": proc.pid, **pids}
        cpu0 = {name: cpu_seconds(pid) for name, pid in watched.items()}
        cpu1 = dict(cpu0)
        while proc.poll() is None:
            for name, pid in watched.items():
                cpu1[name] = cpu_seconds(pid) or cpu1[name]
            time.sleep(0.25)
        out = proc.stdout.read().decode() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    if proc.returncode != 0:
        raise RuntimeError(f"producer exited {proc.returncode}")
    used = {n: b - a for n, a in cpu0.items() if a is not None and (b := cpu1[n]) is not None}
    return dict(json.loads(out)), used


# ---- measuring -------------------------------------------------------------------------


def e2e_latencies(dest: Any, topic: str) -> dict[str, Any]:
    """Every message of ``topic`` read back from ``dest`` (an RmqCluster): its store
    timestamp (ms) minus the send time in its first 8 bytes; p50/p99/max in ms, and
    ``stored_per_s``: messages over first send -> last store (the destination's view of the
    rate, what a replicated run compares with the ceiling's)."""
    lags_ns: list[int] = []
    span = [2**63, 0]  # first send, last store (ns since the epoch)

    def one(m: Any) -> None:
        sent = int.from_bytes(m.body[:_STAMP_BYTES], "big")
        stored = m.store_timestamp * 1_000_000
        lags_ns.append(stored - sent)
        span[0], span[1] = min(span[0], sent), max(span[1], stored)

    dest.scan(topic, one)
    seconds = (span[1] - span[0]) / 1e9 if lags_ns else 0.0
    return {
        "stored": len(lags_ns),
        "stored_per_s": len(lags_ns) / seconds if seconds > 0 else None,
        **latency_summary(lags_ns, "e2e_"),
    }


def cluster_pids(clusters: list[Any]) -> dict[str, int]:
    """Each cluster's metaledger node and broker, by name (for CPU readings)."""
    out: dict[str, int] = {}
    for c in clusters:
        node = c.node.procs[0]
        if node is not None:
            out[f"node {c.name}"] = node.pid
        if c.broker_pid is not None:
            out[f"broker {c.name}"] = c.broker_pid
    return out


def run_ceiling(args: argparse.Namespace, source: Any, dest: Any) -> dict[str, Any]:
    """The producer straight into the destination cluster: the ceiling."""
    topic = dest.topic("BenchCeiling", queues=args.queues)
    progress(f"ceiling: producer -> {dest.name} ({dest.broker_addr}) for {args.duration} s")
    result, cpu = run_producer(producer_argv(args, dest.endpoints, topic), cluster_pids([dest]))
    cpu["producer"] = result.get("process_cpu_s", cpu.get("producer", 0.0))  # as in the runs
    progress(f"ceiling: reading {result['confirmed']} messages back from {dest.name}")
    e2e = e2e_latencies(dest, topic)
    return {
        "name": f"ceiling: producer -> {dest.name}",
        **result,
        **e2e,
        "cpu_s": cpu,
        "cpu_us_per_msg": {n: v / e2e["stored"] * 1e6 for n, v in cpu.items() if e2e["stored"]},
    }


# ---- report ----------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    a = report["args"]
    m = report["machine"]
    lines = [
        f"# RocketMQ replicator: replicated vs the ceiling ({report['date']})",
        "",
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}, Python {m['python']}. Two clusters"
        f" ({SOURCE}, {DEST}), each one metaledger node and one broker, all on this machine;"
        f" {a['size']}-byte messages, {a['queues']} queues, {a['duration']} s of sending,"
        f" codec sink with at most {a['max_in_flight']} in flight"
        + (f", paced at {a['rate']} msgs/s." if a["rate"] else ", unpaced."),
    ]
    if report.get("note"):
        lines.append(f"Note: {report['note']}")
    ceiling = report["runs"][0].get("stored_per_s") if report["runs"] else None
    lines += [
        "",
        "| run | stored/s | of the ceiling | producer msgs/s | confirmed | failed | ack p50 ms"
        " | ack p99 ms | e2e p50 ms | e2e p99 ms | e2e max ms | stored |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in report["runs"]:
        stored = run.get("stored_per_s")
        share = stored / ceiling if ceiling and stored else None
        lines.append(
            f"| {run['name']} | {fmt(run.get('stored_per_s'))} | {fmt(share, '.2f')}"
            f" | {fmt(run['msgs_per_s'])} | {run['confirmed']} | {sum(run['failed'].values())}"
            f" | {fmt(run['ack_p50_ms'], '.1f')} | {fmt(run['ack_p99_ms'], '.1f')}"
            f" | {fmt(run['e2e_p50_ms'], '.1f')} | {fmt(run['e2e_p99_ms'], '.1f')}"
            f" | {fmt(run['e2e_max_ms'], '.1f')} | {run['stored']} |"
        )
    lines += [
        "",
        "stored/s: messages read back from the destination over first send -> last store"
        " timestamp (the destination's view; the share of the ceiling is of this);"
        " producer msgs/s: confirmed messages over first send -> last confirmation (the"
        " producer's view, into B for the ceiling, into A for a replicated run). ack: the"
        " producer's `submit` -> the sink's confirmation (the wait for in-flight room"
        " included). e2e: the destination broker's store timestamp (ms) minus the send time"
        " carried in the body, for every message read back from the destination. Goal"
        " (issue 19): replicated stored/s >= 0.8x the ceiling's. Every process runs on this"
        " machine: a replicated run has two brokers, the producer and the worker where the"
        " ceiling has one broker and the producer, so where the CPUs are the limit the share"
        " reads against the CPU per message below (all processes' CPU over the messages"
        " stored, and the rate that CPU allows).",
    ]
    for run in report["runs"][1:]:
        if run.get("offered_rate") is not None:
            lines.append(
                f"\n{run['name']}: the producer paced at {run['offered_rate']} msgs/s"
                f" ({run.get('offered_share', 1):g}x the ceiling's stored/s) into the source;"
                " one worker, default clocks (heartbeats every 10 s, commits every 1 s). Stored"
                f" at B while the producer ran: {fmt(run.get('producing_per_s'))}/s; draining"
                f" the backlog after it: {fmt(run.get('draining_per_s'))}/s. Worker peak RSS"
                f" {fmt(run.get('worker_peak_rss_mib'), '.0f')} MiB."
            )
    for run in report["runs"]:
        if run.get("cpu_s"):
            per = run.get("cpu_us_per_msg") or {}
            lines.append(
                f"\nCPU s during {run['name']}: "
                + ", ".join(
                    f"{n} {v:.1f}" + (f" ({per[n]:.1f} µs/msg)" if n in per else "")
                    for n, v in sorted(run["cpu_s"].items())
                )
                + (
                    f"; all of them {sum(per.values()):.1f} µs/msg, so at most"
                    f" {m['nproc'] * 1e6 / sum(per.values()):.0f} msgs/s on {m['nproc']} CPUs."
                    if per and sum(per.values()) > 0
                    else "."
                )
            )
    return "\n".join(lines + render_runs(report))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of sending per run")
    ap.add_argument("--size", type=int, default=1024, help="message body bytes (>= 8)")
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--max-in-flight", type=int, default=4096, help="the sink's bound")
    ap.add_argument("--rate", type=int, default=0, help="msgs/s per producer; 0: unpaced")
    ap.add_argument("--parts", default=",".join(PARTS), help="runs: " + ",".join(PARTS))
    ap.add_argument(
        "--offered",
        type=lambda v: [float(x) for x in v.split(",") if x],
        default=[1.0, 0.5],
        metavar="S1,S2",
        help="replicated runs: the producer into A paced at these shares of the ceiling",
    )
    ap.add_argument("--limit-rate", type=int, default=2000, help="the rate run's --rate")
    ap.add_argument("--slow-in-flight", type=int, default=256, help="the slow run's bound")
    ap.add_argument(
        "--slow-duty", type=float, default=0.3, help="share of each second B's broker runs"
    )
    ap.add_argument(
        "--broker-args",
        default="--max-transfer-count 256 --max-transfer-bytes 1048576",
        help="extra `metaledger broker` flags for both clusters' brokers (default: pull"
        " answers of up to 256 messages / 1 MiB, RocketMQ's are 32 / 256 KiB)",
    )
    ap.add_argument("--note", default="")
    ap.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--producer", metavar="ENDPOINTS", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.size < _STAMP_BYTES:
        ap.error(f"--size: at least {_STAMP_BYTES} (the send time)")
    if args.duration <= 0 or args.queues < 1 or args.max_in_flight < 1 or args.rate < 0:
        ap.error("--duration, --queues and --max-in-flight must be positive, --rate >= 0")
    if not args.offered or any(not 0 < x <= 4 for x in args.offered):
        ap.error("--offered: shares of the ceiling in (0, 4]")
    if args.limit_rate < 1 or args.slow_in_flight < 1 or not 0 < args.slow_duty <= 1:
        ap.error("--limit-rate and --slow-in-flight: positive; --slow-duty: in (0, 1]")
    parts = [p for p in args.parts.split(",") if p]
    if not parts or set(parts) - set(PARTS) or "ceiling" not in parts:
        ap.error(f"--parts: some of {','.join(PARTS)}, ceiling among them")
    args.parts = ",".join(p for p in PARTS if p in parts)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.producer:
        result = asyncio.run(
            produce(
                args.producer.split(","), args.topic, args.duration, args.size,
                args.max_in_flight, args.rate, args.count,
            )
        )  # fmt: skip
        print(json.dumps(result))
        return 0
    from tests.integration.replicator.rocketmq.clusters import running_clusters

    report: dict[str, Any] = {
        "date": timestamp(),
        "machine": machine(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "note": args.note,
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="rocketmq_replicate-") as tmp:
        progress(f"starting clusters {SOURCE} and {DEST} in {tmp}")
        broker_args = tuple(args.broker_args.split())
        with running_clusters(Path(tmp), (SOURCE, DEST), broker_args) as (source, dest):
            progress(f"{source!r}; {dest!r}")
            parts = args.parts.split(",")
            ceiling = run_ceiling(args, source, dest)
            report["runs"].append(ceiling)
            offered = int(ceiling.get("stored_per_s") or ceiling["msgs_per_s"] or 1000)
            if "replicated" in parts:
                for share in args.offered:
                    run = run_replicated(args, source, dest, Path(tmp), ceiling, share)
                    report["runs"].append(run)
            if "drain" in parts:
                report["drain"] = run_drain(args, source, dest, Path(tmp), ceiling)
            if "slow" in parts:
                report["slow"] = run_slow(args, source, dest, Path(tmp), offered // 2)
            if "rate" in parts:
                report["rate"] = run_rate(args, source, dest, Path(tmp))
    report["load_average"] = os.getloadavg()
    md = render(report) + (
        f"\n\nLoad average at the end: {', '.join(f'{x:.2f}' for x in report['load_average'])}."
    )
    stem = result_stem("rocketmq_replicate", report["date"], args.out_dir)
    png = plot(report, stem.with_suffix(".png"))
    if png:
        md += f"\n\n![rates, RSS and backlog]({png.name})"
    print(md)
    json_path, md_path = write_report("rocketmq_replicate", report, md, args.out_dir)
    progress(f"wrote {json_path} and {md_path}" + (f" and {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
