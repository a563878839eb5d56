"""Recovery times after faults (issue 14): a wiped follower's catch-up, and leaving NOSPACE.

    python -m bench.recovery_bench [--keys 1000000] [--value-size 100] [--phases wipe,nospace]

Phases, each timed:

1. **wipe**: three ``metaledger serve`` nodes on free loopback ports; ``--keys`` keys are
   loaded (Txn batches of ``--txn-ops`` from ``--clients`` clients); once every node
   applied them, one follower is SIGKILLed, its data dir removed, and it is started again
   with the same command. Reported: the time from that start until its apply offset
   reaches the leader's and a serializable read on it finds the last key, with progress
   printed every second (the leader streams its snapshot, then the log's tail).
2. **nospace** (root only: it mounts a tmpfs): one node with its data dir on a
   ``--tmpfs-mb`` tmpfs, a filler file leaving ``--room-mb`` free; 8 KiB puts until the
   node refuses one with RESOURCE_EXHAUSTED (etcd's "database space exceeded"); then the
   filler is deleted. Reported: the time from the delete until a put is acknowledged
   again (the node leaves NOSPACE by itself: no restart).

Results go to ``bench/results/recovery-<date>.json`` and ``.md``. Every process it starts
is stopped on any exit; the run is bounded by ``--max-total`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import grpc

from bench.report import RESULTS_DIR, machine, timestamp, write_report
from bench.restart_bench import (
    Deadline,
    Nodes,
    key_of,
    leader_agreed,
    load_keys,
    statuses,
    wait_for,
)
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import admin_pb2, admin_pb2_grpc


def _status(endpoint: str) -> admin_pb2.StatusResponse:
    with grpc.insecure_channel(endpoint) as ch:
        return admin_pb2_grpc.AdminStub(ch).Status(admin_pb2.StatusRequest(), timeout=2.0)


def _read(endpoint: str, key: bytes) -> bytes | None:
    with grpc.insecure_channel(endpoint) as ch:
        resp = rpc_pb2_grpc.KVStub(ch).Range(
            rpc_pb2.RangeRequest(key=key, serializable=True), timeout=5.0
        )
    return resp.kvs[0].value if resp.kvs else None


def wipe_phase(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    value = os.urandom(args.value_size // 2 + 1).hex().encode()[: args.value_size]
    nodes = Nodes.make(
        workdir / "wipe",
        ["--snapshot-every-items", str(args.snapshot_every_items), "--log-level", "INFO"],
    )
    try:
        for i in range(3):
            nodes.start(i)
        leader_id = wait_for("a leader", lambda: leader_agreed(nodes), 60, nodes)
        t = time.monotonic()
        txns, last_rev = asyncio.run(
            load_keys(nodes.endpoints, args.keys, value, args.txn_ops, args.clients)
        )
        load_s = time.monotonic() - t
        print(f"loaded {args.keys:,} keys in {load_s:.1f}s", flush=True)
        wait_for(
            "every node applied the load",
            lambda: all(s.apply_offset >= last_rev for s in statuses(nodes)),
            300,
            nodes,
        )
        victim = next(i for i, n in enumerate(nodes.nodes) if n.id != leader_id)
        node = nodes.nodes[victim]
        assert node.proc is not None
        target = max(s.apply_offset for s in statuses(nodes, timeout=2.0))
        os.killpg(node.proc.pid, signal.SIGKILL)
        node.proc.wait(30)
        shutil.rmtree(node.data_dir)
        t = time.monotonic()
        nodes.start(victim)
        last_print = 0.0
        while True:
            nodes.check_alive()
            now = time.monotonic()
            if now - t > args.catch_up_timeout:
                raise RuntimeError(f"the wiped follower did not catch up in {now - t:.0f}s")
            try:
                st = _status(node.client)
            except grpc.RpcError:
                st = None
            if st is not None and st.apply_offset >= target:
                if _read(node.client, key_of(args.keys - 1)) == value:
                    break
            if now - last_print >= 1.0:
                last_print = now
                applied = st.apply_offset if st is not None else 0
                print(
                    f"  catch-up {now - t:6.1f}s: apply {applied:,} / {target:,} "
                    f"({100 * applied / max(1, target):.0f}%)",
                    flush=True,
                )
            time.sleep(0.1)
        catch_up_s = time.monotonic() - t
        print(f"wiped follower caught up in {catch_up_s:.1f}s", flush=True)
    finally:
        nodes.stop()
    return {
        "keys": args.keys,
        "load_s": round(load_s, 2),
        "txns": txns,
        "target_offset": target,
        "catch_up_s": round(catch_up_s, 2),
    }


def nospace_phase(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    if os.geteuid() != 0:
        return {"skipped": "mounting a tmpfs needs root"}
    disk = workdir / "disk"
    disk.mkdir(parents=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={args.tmpfs_mb}m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        return {"skipped": f"cannot mount a tmpfs: {r.stderr.strip()}"}
    nodes = Nodes.make(workdir / "nospace", ["--log-level", "INFO"], n=1)
    try:
        (disk / "n0").mkdir()
        nodes.root.mkdir(parents=True, exist_ok=True)
        os.symlink(disk / "n0", nodes.nodes[0].data_dir)
        nodes.start(0)
        wait_for("a leader", lambda: leader_agreed(nodes), 60, nodes)
        filler = disk / "filler"
        st = os.statvfs(disk)
        room = st.f_bavail * st.f_frsize - args.room_mb * 1024 * 1024
        with open(filler, "wb") as f:
            f.truncate(0)
            block = b"\0" * (1024 * 1024)
            while room > 0:
                f.write(block[: min(room, len(block))])
                room -= len(block)
        endpoint = nodes.nodes[0].client
        value = b"x" * 8192
        acked = refused = 0
        with grpc.insecure_channel(endpoint) as ch:
            stub = rpc_pb2_grpc.KVStub(ch)
            deadline = time.monotonic() + 120
            detail = ""
            while time.monotonic() < deadline:
                try:
                    stub.Put(rpc_pb2.PutRequest(key=b"fill/%d" % acked, value=value), timeout=3)
                    acked += 1
                except grpc.RpcError as exc:
                    if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        refused += 1
                        detail = exc.details() or ""
                        break
            if not refused:
                raise RuntimeError("the node never refused a put for space")
            print(f"full after {acked} puts: {detail!r}", flush=True)
            filler.unlink()
            t = time.monotonic()
            while True:
                nodes.check_alive()
                if time.monotonic() - t > 60:
                    raise RuntimeError("the node did not accept a put within 60s of space")
                try:
                    stub.Put(rpc_pb2.PutRequest(key=b"after", value=b"ok"), timeout=1)
                    break
                except grpc.RpcError:
                    time.sleep(0.01)
            leave_s = time.monotonic() - t
        print(f"left NOSPACE {leave_s:.3f}s after space returned", flush=True)
    finally:
        nodes.stop()
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, check=False)
    return {"puts_before_full": acked, "refusal": detail, "leave_nospace_s": round(leave_s, 3)}


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"# Recovery after faults — {report['date']}",
        "",
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}, Python {m['python']}. "
        f"Command: `python -m bench.recovery_bench {' '.join(report['argv'])}`",
        "",
        "| phase | result |",
        "|---|---|",
    ]
    wipe = report.get("wipe")
    if wipe:
        lines.append(
            f"| wiped follower catch-up | {wipe['keys']:,} keys (offset "
            f"{wipe['target_offset']:,}): **{wipe['catch_up_s']} s** |"
        )
    nospace = report.get("nospace")
    if nospace:
        if "skipped" in nospace:
            lines.append(f"| leave NOSPACE | skipped: {nospace['skipped']} |")
        else:
            lines.append(
                f"| leave NOSPACE | full after {nospace['puts_before_full']} 8 KiB puts; a put "
                f"acknowledged **{nospace['leave_nospace_s']} s** after space returned |"
            )
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.recovery_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--phases", default="wipe,nospace", help="comma-separated: wipe, nospace")
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--txn-ops", type=int, default=128)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--snapshot-every-items", type=int, default=3000)
    p.add_argument("--catch-up-timeout", type=float, default=900.0)
    p.add_argument("--tmpfs-mb", type=int, default=64)
    p.add_argument("--room-mb", type=int, default=4)
    p.add_argument("--max-total", type=float, default=2400.0, help="the whole run's budget (s)")
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    phases = [p for p in args.phases.split(",") if p]
    unknown = set(phases) - {"wipe", "nospace"}
    if unknown:
        raise SystemExit(f"--phases: unknown {sorted(unknown)} (wipe, nospace)")

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise Deadline(f"over the time budget of {args.max_total:g}s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, int(args.max_total)))
    workdir = Path(tempfile.mkdtemp(prefix="recovery-bench-"))
    report: dict[str, Any] = {
        "date": timestamp(),
        "machine": machine(),
        "argv": argv,
    }
    try:
        if "wipe" in phases:
            report["wipe"] = wipe_phase(args, workdir)
        if "nospace" in phases:
            report["nospace"] = nospace_phase(args, workdir)
    except (Deadline, RuntimeError) as exc:
        print(f"recovery_bench: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
        shutil.rmtree(workdir, ignore_errors=True)
    json_path, md_path = write_report("recovery", report, markdown(report), args.out_dir)
    print(md_path.read_text())
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
