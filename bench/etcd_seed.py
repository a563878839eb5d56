"""Seeding from an etcd 3.4 snapshot: ``metaledger snapshot restore --from-etcd`` against
``etcdctl snapshot restore`` of the same file, side by side.

    python -m bench.etcd_seed [--keys 1000000] [--value-bytes 64] [--file FILE] [--out-dir DIR]
                              [--repeat N] [--baseline-tree DIR]

Without ``--file`` the snapshot is made here with :mod:`snapshots.etcdfmt` (``--keys`` keys
``key/%08d``, one revision each, ``--value-bytes`` bytes of value, one lease on every
hundredth key); ``etcdctl snapshot status`` reads it first (a real etcd 3.4 file: the
integration tests restore and serve such files). Each restore runs as its own subprocess
into a fresh data dir; wall time, the child's CPU (user + system, ``os.wait4``) and peak RSS
are its own (a child it forks and waits for included), and the CPU per key is the number to
compare on a busy machine. ``--repeat N`` runs each side N times, interleaved, and reports
each side's best and median; ``--baseline-tree DIR`` adds a third side, the metaledger of
another checkout (e.g. /work/main) restoring the same file. Writes
``bench/results/etcd_seed-<date>.json`` and ``.md`` through bench.report.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import RESULTS_DIR, fmt, machine, timestamp, write_report  # noqa: E402
from snapshots.etcdfmt import EtcdImage, KeyRevision, Lease, write_etcd_snapshot  # noqa: E402

LEASE = 0x1234


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def make_snapshot(path: Path | str, keys: int | str, value_bytes: int | str) -> None:
    """An etcd 3.4 snapshot of ``keys`` keys at revisions 2, 3, ... (every 100th leased)."""
    path, keys, value_bytes = Path(path), int(keys), int(value_bytes)
    pad = b"v" * max(0, value_bytes - 8)
    records = tuple(
        KeyRevision(
            i + 2,
            0,
            b"key/%08d" % i,
            pad + b"%08d" % i,
            i + 2,
            i + 2,
            1,
            LEASE if i % 100 == 0 else 0,
        )
        for i in range(keys)
    )
    image = EtcdImage(
        keys=records,
        consistent_index=keys + 1,
        leases=(Lease(LEASE, 3600),),
        cluster_version="3.4.0",
    )
    path.write_bytes(write_etcd_snapshot(image))


def run(argv: list[str], tree: str | None = None) -> dict[str, Any]:
    """Run ``argv`` to its end (in ``tree``, first on the module path, if given): wall
    seconds, the child's CPU seconds and peak RSS (MB)."""
    env = None
    if tree is not None:
        path = os.environ.get("PYTHONPATH")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (tree, path) if p))
    load = os.getloadavg()[0]  # the last minute's, before this run (its own not in it)
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tree, env=env
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[0]} failed: {err[-2000:]}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "load_1m": load,
    }


def bench(args: argparse.Namespace) -> dict[str, Any]:
    etcdctl = shutil.which("etcdctl")
    if etcdctl is None:
        raise SystemExit("etcdctl is not installed")
    with tempfile.TemporaryDirectory(prefix="etcd-seed-") as tmp:
        snap = Path(args.file) if args.file else Path(tmp) / "etcd.db"
        if not args.file:
            progress(f"making a {args.keys}-key etcd 3.4 snapshot")
            # in a process of its own: a child forked from this one would start with the
            # image's memory, and its peak RSS would count it
            code = "import sys; from bench.etcd_seed import make_snapshot as m; m(*sys.argv[1:])"
            subprocess.run(
                [sys.executable, "-c", code, str(snap), str(args.keys), str(args.value_bytes)],
                cwd=ROOT,
                check=True,
            )
        env_etcd = dict(os.environ, ETCDCTL_API="3")
        status = subprocess.run(
            [etcdctl, "snapshot", "status", str(snap), "-w", "json"],
            capture_output=True,
            text=True,
            env=env_etcd,
            check=True,
        )
        progress(f"etcdctl snapshot status: {status.stdout.strip()}")
        sides: dict[str, list[str]] = {
            "metaledger": [sys.executable, "-m", "nameserver.cli"],
            "etcdctl": [etcdctl],
        }
        if args.baseline_tree:
            sides["baseline"] = [sys.executable, "-m", "nameserver.cli"]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
        for i in range(args.repeat):
            for name, argv in sides.items():
                data_dir = Path(tmp) / f"{name}-{i}"
                progress(f"run {i + 1}/{args.repeat}: {name}")
                if name == "etcdctl":
                    cmd = [
                        *argv,
                        "snapshot",
                        "restore",
                        str(snap),
                        f"--data-dir={data_dir}",
                        "--name=e0",
                        "--initial-cluster=e0=http://127.0.0.1:2380",
                        "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                    ]
                else:
                    cmd = [
                        *argv,
                        "snapshot",
                        "restore",
                        "--from-etcd",
                        str(snap),
                        "--data-dir",
                        str(data_dir),
                    ]
                tree = args.baseline_tree if name == "baseline" else None
                runs[name].append(run(cmd, tree))
                shutil.rmtree(data_dir, ignore_errors=True)
        size = snap.stat().st_size
    keys = args.keys if not args.file else None
    summary = {name: _summary(results, keys) for name, results in runs.items()}
    ours, theirs = summary["metaledger"]["best"], summary["etcdctl"]["best"]
    report = {
        "date": timestamp(),
        "machine": machine(),
        "file": args.file or f"made here: {args.keys} keys, {args.value_bytes}-byte values",
        "file_bytes": size,
        "keys": keys,
        "repeat": args.repeat,
        "baseline_tree": args.baseline_tree,
        "runs": summary,
        "metaledger": ours,
        "etcdctl": theirs,
        "wall_ratio": ours["wall_s"] / theirs["wall_s"],
        "cpu_ratio": ours["cpu_s"] / theirs["cpu_s"],
        "median_wall_ratio": summary["metaledger"]["median"]["wall_s"]
        / summary["etcdctl"]["median"]["wall_s"],
        "median_cpu_ratio": summary["metaledger"]["median"]["cpu_s"]
        / summary["etcdctl"]["median"]["cpu_s"],
    }
    json_path, md_path = write_report("etcd_seed", report, render(report), Path(args.out_dir))
    progress(f"wrote {json_path} and {md_path}")
    return report


def _summary(results: list[dict[str, Any]], keys: int | None) -> dict[str, Any]:
    """A side's runs: the best (least CPU) and the median (of CPU and of wall, each alone)."""
    by_cpu = sorted(results, key=lambda r: r["cpu_s"])
    best = dict(by_cpu[0])
    median = {
        field: statistics.median(r[field] for r in results)
        for field in ("wall_s", "cpu_s", "peak_rss_mb")
    }
    best["best_wall_s"] = min(r["wall_s"] for r in results)
    for r in (best, median):
        r["cpu_us_per_key"] = r["cpu_s"] / keys * 1e6 if keys else None
    return {"best": best, "median": median, "all": results}


NAMES = {
    "metaledger": "metaledger snapshot restore --from-etcd",
    "etcdctl": "etcdctl snapshot restore",
    "baseline": "baseline tree's metaledger snapshot restore --from-etcd",
}


def render(report: dict[str, Any]) -> str:
    runs = report.get("runs") or {
        "metaledger": {"best": report["metaledger"]},
        "etcdctl": {"best": report["etcdctl"]},
    }
    load = _load_range(runs)
    rows = []
    for name, side in runs.items():
        for label, r in (("best", side["best"]), ("median", side.get("median"))):
            if r is not None:
                rows.append(
                    (
                        f"{NAMES[name]} ({label})",
                        r["wall_s"],
                        r["cpu_s"],
                        r["cpu_us_per_key"],
                        r["peak_rss_mb"],
                    )
                )
    lines = [
        f"# Seeding from an etcd 3.4 snapshot ({report['date']})",
        "",
        f"File: {report['file']}, {report['file_bytes'] / 1e6:.1f} MB. "
        f"Machine: {report['machine']['nproc']} CPUs, {report['machine']['cpu_model']}.",
        "",
        "| restore | wall s | CPU s | CPU us/key | peak RSS MB |",
        "| --- | ---: | ---: | ---: | ---: |",
        *(
            f"| {n} | {fmt(w, '.2f')} | {fmt(c, '.2f')} | {fmt(k, '.1f')} | {fmt(m, '.0f')} |"
            for n, w, c, k, m in rows
        ),
        "",
        f"metaledger / etcdctl, best: wall {report['wall_ratio']:.2f}x, CPU "
        f"{report['cpu_ratio']:.2f}x"
        + (
            f"; median: wall {report['median_wall_ratio']:.2f}x, CPU "
            f"{report['median_cpu_ratio']:.2f}x"
            if "median_wall_ratio" in report
            else ""
        )
        + f" ({report.get('repeat', 1)} runs a side, interleaved"
        + (f"; load average (1 min) before the runs {load[0]:.2f}-{load[1]:.2f}" if load else "")
        + (f"; baseline tree {report['baseline_tree']}" if report.get("baseline_tree") else "")
        + ").",
    ]
    return "\n".join(lines)


def _load_range(runs: dict[str, Any]) -> tuple[float, float] | None:
    """The lowest and highest 1-minute load average seen before a run, over all sides."""
    loads = [r["load_1m"] for side in runs.values() for r in side.get("all", []) if "load_1m" in r]
    return (min(loads), max(loads)) if loads else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--value-bytes", type=int, default=64)
    p.add_argument("--file", help="an etcd 3.4 snapshot to restore (default: made here)")
    p.add_argument("--out-dir", default=str(RESULTS_DIR))
    p.add_argument("--repeat", type=int, default=1, help="runs a side, interleaved")
    p.add_argument("--baseline-tree", help="also restore with the metaledger of this checkout")
    args = p.parse_args(argv)
    report = bench(args)
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
