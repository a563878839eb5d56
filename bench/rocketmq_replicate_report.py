"""The report parts of the RocketMQ replicator's benchmark that belong to the runs with a
real worker (``bench.rocketmq_replicate_runs``): the slow-destination and rate-limit sections
of the markdown, and the plot (rates over time; the slow run's RSS against its backlog) when
matplotlib is there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import fmt
from bench.rocketmq_replicate_runs import per_second

__all__ = ["plot", "render_runs"]


def render_runs(report: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    drain = report.get("drain")
    if drain:
        cpu = drain.get("cpu_us_per_msg") or {}
        lines += [
            "",
            f"## The replicator's own rate: {drain['name']}",
            "",
            "| backlog | stored/s at B (steady) | of the ceiling | steady window s"
            " | worker peak RSS MiB |",
            "|---:|---:|---:|---:|---:|",
            f"| {drain['backlog']} | {fmt(drain['steady_rate'], '.0f')}"
            f" | {fmt(drain.get('share'), '.2f')} | {fmt(drain['steady_window_s'], '.1f')}"
            f" | {fmt(drain.get('worker_peak_rss_mib'), '.0f')} |",
            "",
            "The backlog was produced into A before the worker started, so no producer shares"
            " the CPUs: this is what one worker moves, against what one producer writes"
            " straight into B (the ceiling). CPU per message: "
            + ", ".join(f"{n} {v:.1f} µs" for n, v in sorted(cpu.items()))
            + ".",
        ]
    slow = report.get("slow")
    if slow:
        lines += [
            "",
            f"## Slow destination: {slow['name']}",
            "",
            f"Producer into {report.get('source', 'A')} at {slow['offered_rate']}/s; the"
            f" destination broker SIGSTOPped for {1 - slow['duty']:.0%} of every second"
            " (SIGCONT for the rest); the worker's VmRSS sampled every second; after the"
            " producer's end the destination is thawed and the backlog drained (all"
            f" {slow.get('acked_after_drain')} acknowledged).",
            "",
            "| RSS first MiB | RSS peak MiB | growth MiB | peak backlog msgs | its bodies MiB"
            " | RSS at peak backlog MiB | VmHWM MiB | drain after thaw s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {fmt(slow['rss_first_mib'], '.1f')} | {fmt(slow['rss_peak_mib'], '.1f')}"
            f" | {fmt(slow.get('rss_growth_mib'), '.1f')} | {slow['backlog_peak']}"
            f" | {fmt(slow.get('backlog_peak_mib'), '.1f')}"
            f" | {fmt(slow.get('rss_at_backlog_peak_mib'), '.1f')}"
            f" | {fmt(slow.get('vm_hwm_mib'), '.1f')} | {fmt(slow.get('drain_s'), '.0f')} |",
            "",
            "Backlog: messages at the source's end minus those the worker had acknowledged"
            " (its `acked_messages`; a fresh topic and job). Bounded: the RSS growth stays far"
            " below the backlog's bytes (the worker holds at most --max-in-flight messages).",
        ]
    rate = report.get("rate")
    if rate:
        err = rate.get("error")
        lines += [
            "",
            f"## Rate limit: {rate['name']}",
            "",
            "| --rate | achieved msgs/s | error | steady window s | messages in it |",
            "|---:|---:|---:|---:|---:|",
            f"| {rate['limit']} | {fmt(rate['steady_rate'], '.1f')}"
            f" | {fmt(err * 100 if err is not None else None, '+.2f')}%"
            f" | {fmt(rate['steady_window_s'], '.1f')} | {rate['steady_messages']} |",
            "",
            "Achieved: messages stored at B per second of B's store timestamps, the first and"
            " last second of the span left out. Goal (issue 19): within 5% of --rate.",
        ]
    return lines


def plot(report: dict[str, Any], path: Path) -> Path | None:
    """Replicated rate and backlog over time, and the slow run's RSS against its backlog."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    runs = [r for r in report.get("runs", []) if r.get("timeline")]
    slow = report.get("slow")
    if not runs and not slow:
        return None
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 7))
    for r in runs:
        tl = r["timeline"]
        a.plot([s["t"] for s in tl[1:]], per_second(tl), label=f"{r['name']}: stored/s at B")
    rate = report.get("rate")
    if rate:
        tl = rate["timeline"]
        a.plot([s["t"] for s in tl[1:]], per_second(tl), label=f"{rate['name']}")
        a.axhline(rate["limit"], color="gray", linestyle="--", label="--rate")
    a.set_ylabel("messages/s")
    a.set_xlabel("seconds")
    a.legend(fontsize="small")
    if slow:
        # one axis: the backlog's bodies beside the RSS, so a flat RSS reads as flat
        tl = slow["timeline"]
        ts = [s["t"] for s in tl]
        size = report["args"]["size"]
        b.plot(ts, [s["rss_mib"] for s in tl], label="worker VmRSS")
        b.plot(ts, [(s["backlog"] or 0) * size / 2**20 for s in tl], label="backlog's bodies")
        b.set_ylim(bottom=0)
        b.set_ylabel("MiB")
        b.set_xlabel(f"seconds (slow destination, --max-in-flight {slow['max_in_flight']})")
        b.legend(fontsize="small")
    fig.suptitle(f"RocketMQ replicator ({report['date']})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
