"""A change's cost, side by side: the same benchmarks on this tree and on a baseline checkout,
run in turn (A B A B ...) in one session, so both see the same machine and the same noise.

    python -m bench.compare_trees --baseline-tree ../old [--rounds 2] [--only broker_send,...]

The baseline is any checkout of metaledger (``git worktree add --detach ../old <commit>``).
Each benchmark runs as its own process in its tree (``python -m bench.<name>`` with that tree
first on ``PYTHONPATH``), writing its report into a scratch directory; the headline numbers
are read back from the JSON and set side by side, with this tree's over the baseline's (the
median over rounds). ``bench/compare_etcd.sh`` has this built in (``metaledger-baseline``);
this script covers the broker and the RocketMQ fronts:

    broker_send         acked sends/s through a 3-replica group, quorum 2 of 3
    remoting_bench      nameserver route reads/s (one node, three nodes), a registration storm
    rocketmq_replicate  the replicator draining a backlog, and a producer straight in (ceiling)

Results: ``bench/results/compare_trees-<date>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, machine, timestamp, write_report

ROOT = Path(__file__).resolve().parents[1]

Extract = Callable[[dict[str, Any]], dict[str, float]]


def _broker_send(report: dict[str, Any]) -> dict[str, float]:
    (row,) = [r for r in report["results"] if r["system"] == "quorum2of3"]
    out = {"quorum 2 of 3 sends/s": row["sends_per_s"], "quorum 2 of 3 p99 ms": row["p99_ms"]}
    if "server_cpu_us_per_send" in row:  # a tree whose bench reports it
        out["quorum 2 of 3 server CPU us/send"] = row["server_cpu_us_per_send"]
        names = ("master", "slave 1", "slave 2")
        for name, us in zip(names, row["process_cpu_us_per_send"], strict=True):
            out[f"quorum 2 of 3 {name} CPU us/send"] = us
    return out


def _remoting(report: dict[str, Any]) -> dict[str, float]:
    return {
        "route reads/s, one node": report["one_node"]["replies_per_s"],
        "route reads/s, three nodes": report["three_nodes"]["replies_per_s"],
        "registration storm broker-topics/s": report["storm"]["broker_topics_per_s"],
    }


def _replicate(report: dict[str, Any]) -> dict[str, float]:
    (ceiling,) = [r for r in report["runs"] if r["name"].startswith("ceiling")]
    return {
        "producer straight in msgs/s": ceiling["msgs_per_s"],
        "replicator drain msgs/s": report["drain"]["steady_rate"],
        "replicator CPU us/msg": report["drain"]["cpu_us_per_msg"]["replicator"],
    }


#: name -> (module arguments, report file prefix, extractor, takes --out-dir)
BENCHES: dict[str, tuple[list[str], str, Extract, bool]] = {
    "broker_send": (
        ["--systems", "quorum2of3", "--duration", "3", "--rounds", "1", "--no-plot"],
        "broker_send",
        _broker_send,
        True,
    ),
    "remoting_bench": (["--duration", "6"], "remoting", _remoting, False),
    "rocketmq_replicate": (
        ["--duration", "8", "--parts", "ceiling,drain"],
        "rocketmq_replicate",
        _replicate,
        True,
    ),
}


def run_one(tree: Path, name: str, scratch: Path, timeout_s: float) -> dict[str, float]:
    """One benchmark in ``tree``; its headline numbers."""
    args, prefix, extract, takes_out_dir = BENCHES[name]
    out = scratch / f"{tree.name}-{name}-{time.monotonic_ns()}"
    out.mkdir()
    argv = [sys.executable, "-m", f"bench.{name}", *args]
    if takes_out_dir:
        argv += ["--out-dir", str(out)]
    results = tree / "bench" / "results"
    before = set(results.glob(f"{prefix}-*.json"))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    print(f"compare_trees: {name} in {tree} ...", flush=True)
    subprocess.run(argv, cwd=tree, env=env, check=True, timeout=timeout_s)
    if not takes_out_dir:  # it wrote into its tree's results: take the new files away
        for path in set(results.glob(f"{prefix}-*.json")) - before:
            for twin in (path, path.with_suffix(".md")):
                if twin.exists():
                    shutil.move(str(twin), out / twin.name)
    (report,) = [json.loads(p.read_text()) for p in out.glob(f"{prefix}-*.json")]
    return extract(report)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.compare_trees", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--baseline-tree", type=Path, required=True, help="a metaledger checkout")
    ap.add_argument("--rounds", type=int, default=2, help="A/B pairs per benchmark")
    ap.add_argument("--only", default=",".join(BENCHES), help="comma-separated, from the list")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per benchmark run")
    ap.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = ap.parse_args(argv)
    base = args.baseline_tree.resolve()
    if not (base / "bench").is_dir():
        ap.error(f"--baseline-tree {base} is not a metaledger checkout (no bench/)")
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    if not names or set(names) - set(BENCHES):
        ap.error(f"--only must name some of {', '.join(BENCHES)}")
    trees = {"this": ROOT, "baseline": base}
    date = timestamp()
    load = os.getloadavg()
    numbers: dict[str, dict[str, dict[str, list[float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="compare-trees-") as tmp:
        for name in names:
            for r in range(args.rounds):
                order = ("baseline", "this") if r % 2 == 0 else ("this", "baseline")
                for which in order:
                    got = run_one(trees[which], name, Path(tmp), args.timeout)
                    for metric, value in got.items():
                        numbers.setdefault(name, {}).setdefault(metric, {}).setdefault(
                            which, []
                        ).append(value)
    rows = []
    for name, metrics in numbers.items():
        for metric, by_tree in metrics.items():
            if set(by_tree) != {"this", "baseline"}:  # one tree's bench does not report it
                continue
            this, baseline = (
                statistics.median(by_tree["this"]),
                statistics.median(by_tree["baseline"]),
            )
            rows.append(
                {
                    "bench": name,
                    "metric": metric,
                    "this": this,
                    "baseline": baseline,
                    "ratio": round(this / baseline, 3) if baseline else None,
                    "runs": by_tree,
                }
            )
    report = {
        "date": date,
        "machine": machine(),
        "load_average_at_start": load,
        "baseline_tree": str(base),
        "baseline_head": _head(base),
        "this_head": _head(ROOT),
        "rounds": args.rounds,
        "rows": rows,
    }
    md = [
        f"# This tree ({report['this_head']}) against {base} ({report['baseline_head']})",
        "",
        f"{date}; load average at start {load[0]:.2f}; {args.rounds} A/B rounds per benchmark "
        "(alternating which goes first), medians. Lower is better for ms and us/msg.",
        "",
        "| bench | metric | this | baseline | this / baseline |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        md.append(
            f"| {row['bench']} | {row['metric']} | {row['this']:,.1f} | {row['baseline']:,.1f} "
            f"| {row['ratio']}x |"
        )
    json_path, md_path = write_report("compare_trees", report, "\n".join(md), args.out_dir)
    print("\n".join(md))
    print(f"compare_trees: wrote {json_path} and {md_path}")
    return 0


def _head(tree: Path) -> str:
    r = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return r.stdout.strip() or "?"


if __name__ == "__main__":
    raise SystemExit(main())
