"""Seeding from an etcd 3.4 snapshot: ``metaledger snapshot restore --from-etcd`` against
``etcdctl snapshot restore`` of the same file, side by side.

    python -m bench.etcd_seed [--keys 1000000] [--value-bytes 64] [--file FILE] [--out-dir DIR]

Without ``--file`` the snapshot is made here with :mod:`snapshots.etcdfmt` (``--keys`` keys
``key/%08d``, one revision each, ``--value-bytes`` bytes of value, one lease on every
hundredth key); ``etcdctl snapshot status`` reads it first (a real etcd 3.4 file: the
integration tests restore and serve such files). Each restore runs as its own subprocess
into a fresh data dir; wall time, the child's CPU (user + system, ``os.wait4``) and peak RSS
are its own, and the CPU per key is the number to compare on a busy machine. Writes
``bench/results/etcd_seed-<date>.json`` and ``.md`` through bench.report.
"""

from __future__ import annotations

import argparse
import os
import shutil
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


def make_snapshot(path: Path, keys: int, value_bytes: int) -> None:
    """An etcd 3.4 snapshot of ``keys`` keys at revisions 2, 3, ... (every 100th leased)."""
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


def run(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` to its end: wall seconds, the child's CPU seconds and peak RSS (MB)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
    }


def bench(args: argparse.Namespace) -> dict[str, Any]:
    etcdctl = shutil.which("etcdctl")
    if etcdctl is None:
        raise SystemExit("etcdctl is not installed")
    with tempfile.TemporaryDirectory(prefix="etcd-seed-") as tmp:
        snap = Path(args.file) if args.file else Path(tmp) / "etcd.db"
        if not args.file:
            progress(f"making a {args.keys}-key etcd 3.4 snapshot")
            make_snapshot(snap, args.keys, args.value_bytes)
        env_etcd = dict(os.environ, ETCDCTL_API="3")
        status = subprocess.run(
            [etcdctl, "snapshot", "status", str(snap), "-w", "json"],
            capture_output=True,
            text=True,
            env=env_etcd,
            check=True,
        )
        progress(f"etcdctl snapshot status: {status.stdout.strip()}")
        progress("etcdctl snapshot restore")
        theirs = run(
            [
                etcdctl,
                "snapshot",
                "restore",
                str(snap),
                f"--data-dir={Path(tmp) / 'etcd-data'}",
                "--name=e0",
                "--initial-cluster=e0=http://127.0.0.1:2380",
                "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            ]
        )
        progress("metaledger snapshot restore --from-etcd")
        ours = run(
            [
                sys.executable,
                "-m",
                "nameserver.cli",
                "snapshot",
                "restore",
                "--from-etcd",
                str(snap),
                "--data-dir",
                str(Path(tmp) / "ml-data"),
            ]
        )
        size = snap.stat().st_size
    keys = args.keys if not args.file else None
    for r in (ours, theirs):
        r["cpu_us_per_key"] = r["cpu_s"] / keys * 1e6 if keys else None
    report = {
        "date": timestamp(),
        "machine": machine(),
        "file": args.file or f"made here: {args.keys} keys, {args.value_bytes}-byte values",
        "file_bytes": size,
        "keys": keys,
        "metaledger": ours,
        "etcdctl": theirs,
        "wall_ratio": ours["wall_s"] / theirs["wall_s"],
        "cpu_ratio": ours["cpu_s"] / theirs["cpu_s"],
    }
    json_path, md_path = write_report("etcd_seed", report, render(report), Path(args.out_dir))
    progress(f"wrote {json_path} and {md_path}")
    return report


def render(report: dict[str, Any]) -> str:
    o, t = report["metaledger"], report["etcdctl"]
    rows = [
        (name, r["wall_s"], r["cpu_s"], r["cpu_us_per_key"], r["peak_rss_mb"])
        for name, r in (
            ("metaledger snapshot restore --from-etcd", o),
            ("etcdctl snapshot restore", t),
        )
    ]
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
        f"metaledger / etcdctl: wall {report['wall_ratio']:.2f}x, CPU {report['cpu_ratio']:.2f}x.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--value-bytes", type=int, default=64)
    p.add_argument("--file", help="an etcd 3.4 snapshot to restore (default: made here)")
    p.add_argument("--out-dir", default=str(RESULTS_DIR))
    args = p.parse_args(argv)
    report = bench(args)
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
