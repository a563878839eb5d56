"""bench.broker_send's results: the median of rounds, the ratios issue 17 asks for, the
Markdown tables and the plot (matplotlib, from the ``bench`` extra; none without it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import fmt, pyplot

#: (numerator, denominator, what the ratio says)
RATIOS = (
    ("quorum2of3", "jetstream-r3", "quorum write against JetStream R3 (issue 17)"),
    ("quorum2of3", "async", "quorum write against async replication (goal >= 0.9)"),
    ("quorum2of3", "async3", "quorum write against async replication, both 3 replicas"),
    ("sync2", "async", "sync against async replication (seed 001: about 0.9)"),
    ("single", "jetstream-r1", "one replica against JetStream R1"),
    ("jetstream-r3", "jetstream-r1", "JetStream R3 against R1"),
)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median sends/s (the lower middle of an even count), with every run's rate;
    a system that failed in any round is reported as failed."""
    failed = next((r for r in runs if "failed" in r), None)
    done = sorted((r for r in runs if "sends_per_s" in r), key=lambda r: r["sends_per_s"])
    if failed is not None or not done:
        return failed or runs[0]
    result = dict(done[(len(done) - 1) // 2])
    if len(runs) > 1:
        result["rounds_sends_per_s"] = [r["sends_per_s"] for r in runs]
    return result


def ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rate = {r["system"]: r.get("sends_per_s") for r in results}
    out = []
    for num, den, what in RATIOS:
        a, b = rate.get(num), rate.get(den)
        if a and b:
            out.append({"of": num, "to": den, "ratio": round(a / b, 3), "what": what})
    return out


def markdown(report: dict[str, Any]) -> str:
    p = report["params"]
    until = f" (or until {p['count']} sends)" if p["count"] else ""
    lines = [
        f"# Broker sends against NATS JetStream, {report['date']}",
        "",
        f"{p['size']}-byte messages, {p['concurrency']} concurrent producers (each awaits its "
        f"acknowledgement), {p['connections']} connections per system, {p['warmup']} s warm-up "
        f"then {p['duration']} s measured{until}; "
        f"load generator: one Python process ({p['loop']}). "
        f"Machine: {report['machine']['nproc']} CPUs, {report['machine']['cpu_model']}.",
        "",
        "| system | setup | sends/s | p50 ms | p99 ms | max ms | errors | load CPU % "
        "| servers CPU % | foreign CPU % |" + (" e2e p50 ms | e2e p99 ms |" if p["e2e"] else ""),
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|" + ("---:|---:|" if p["e2e"] else ""),
    ]
    for r in report["results"]:
        if "sends_per_s" not in r:
            why = r.get("skipped") or r.get("failed")
            lines.append(f"| {r['system']} | {'skipped' if 'skipped' in r else 'FAILED'}: {why} |")
            continue
        errors = ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "0"
        row = (
            f"| {r['system']} | {r['setup']} | {r['sends_per_s']} | {fmt(r['p50_ms'], '.2f')} "
            f"| {fmt(r['p99_ms'], '.2f')} | {fmt(r['max_ms'], '.1f')} | {errors} "
            f"| {r['client_cpu_pct']} | {r['server_cpu_pct']} | {fmt(r.get('foreign_cpu_pct'))} |"
        )
        if p["e2e"]:
            row += f" {fmt(r.get('e2e_p50_ms'), '.2f')} | {fmt(r.get('e2e_p99_ms'), '.2f')} |"
        lines.append(row)
    per_send = [
        f"{r['system']} {r['server_cpu_us_per_send']}"
        + (
            f" ({' + '.join(str(v) for v in r['process_cpu_us_per_send'])})"
            if "process_cpu_us_per_send" in r
            else ""
        )
        for r in report["results"]
        if "server_cpu_us_per_send" in r
    ]
    if per_send:
        lines += [
            "",
            "Servers' CPU per acknowledged send, warm-up included, µs (per process: the "
            "broker's master first): " + "; ".join(per_send) + ".",
        ]
    if p.get("rounds", 1) > 1:
        lines += [
            "",
            f"Each system ran {p['rounds']} times, the systems in turn; each row is the run of "
            "median sends/s. Every run's sends/s: "
            + "; ".join(
                f"{r['system']} {', '.join(map(str, r['rounds_sends_per_s']))}"
                for r in report["results"]
                if "rounds_sends_per_s" in r
            )
            + ".",
        ]
    if report["ratios"]:
        lines += ["", "| ratio of sends/s | value | |", "|---|---:|---|"]
        lines += [
            f"| {r['of']} / {r['to']} | {r['ratio']} | {r['what']} |" for r in report["ratios"]
        ]
    lines += [
        "",
        "CPU % is per core over the system's whole load (warm-up included): 100 = one core "
        "busy. Load CPU near 100 means the Python load generator, not the server, set the pace; "
        "foreign CPU is what other processes on the machine used meanwhile. Load average at "
        f"the start: {', '.join(map(str, report.get('load_average_at_start', [])))}.",
        "",
        "JetStream acknowledges once the stream's replicas (R3: a quorum) hold the message in "
        "their file store, without an fsync per message (nats-server 2.9 syncs in the "
        "background): compare it with the broker's ASYNC_FLUSH.",
    ]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> Path | None:
    """Sends/s and p50/p99 per system, side by side; None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    done = [r for r in report["results"] if "sends_per_s" in r]
    if not done:
        return None
    names = [r["system"] for r in done]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = ["#4c72b0" if n.startswith("jetstream") else "#dd8452" for n in names]
    left.bar(names, [r["sends_per_s"] for r in done], color=colors)
    left.set_ylabel("acked sends / s")
    left.set_title("throughput")
    xs = range(len(done))
    right.bar([x - 0.2 for x in xs], [r["p50_ms"] or 0 for r in done], 0.4, label="p50")
    right.bar([x + 0.2 for x in xs], [r["p99_ms"] or 0 for r in done], 0.4, label="p99")
    right.set_xticks(list(xs), names)
    right.set_ylabel("send latency (ms)")
    right.set_title("latency")
    right.legend()
    for ax in (left, right):
        ax.tick_params(axis="x", rotation=20)
    p = report["params"]
    fig.suptitle(
        f"{p['size']} B messages, {p['concurrency']} concurrent producers ({report['date']})"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
