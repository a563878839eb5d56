"""Restart-to-serving time of a 3-node cluster holding many keys (DESIGN.md §4).

    python -m bench.restart_bench [--keys 1000000] [--value-size 100] [--clients 8]
                                  [--snapshot-every-items 3000] [--stop kill|term]

Phases, each timed:

1. **start** three ``metaledger serve`` nodes on free loopback ports, temporary data dirs.
2. **load** ``--keys`` keys (``--value-size`` B values) as Txn requests of ``--txn-ops``
   puts each (etcd's limit is 128) from ``--clients`` concurrent grpc.aio clients spread over
   the three nodes; reports keys/s.
3. **stall** a sequential one-client put loop (the commit path's probe) runs until every
   node has written a snapshot covering the whole load. A probe put whose interval overlaps
   a node's snapshot write (``snapshot at offset … written in Xs`` in the node logs, the
   window ending at the line's timestamp) counts as "during a snapshot"; its max (and p99)
   latency is compared with the p50 of the puts that overlap none.
4. **restart** every node is stopped (SIGKILL by default, or SIGTERM), then all three are
   started at once; the time from the first process start until a linearizable Range of a
   known key answers on every node (and on each node) is the restart-to-serving time. The
   node logs give the restore details (``restored snapshot``, ``replayed N change-log
   records``).

Also reported: the snapshot file size and write time (node logs). The results go to
``bench/results/restart-<date>.json`` and ``.md``. The whole run is bounded
(``--max-total``, SIGALRM); every process it starts is stopped on any exit (SIGTERM, then
SIGKILL after 10 s), and the temporary data dirs are removed unless ``--keep-data``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import grpc
import grpc.aio

from bench.report import RESULTS_DIR, machine, timestamp, write_report
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import admin_pb2, admin_pb2_grpc
from raftlog.native.auth import create_password_file

ROOT = Path(__file__).resolve().parents[1]
STOP_GRACE_S = 10.0
T = TypeVar("T")

# "2026-11-22 06:29:43,395 INFO [raftlog.log] n1: snapshot at offset 2332 (raft index 891)
#  written in 0.04s: /path/00000000000000002332.snap"
_LOG_TIME = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "
SNAPSHOT_LINE = re.compile(
    _LOG_TIME + r".*snapshot at offset (\d+) \(raft index \d+\) written in ([\d.]+)s: (\S+)"
)
RESTORED_LINE = re.compile(_LOG_TIME + r".*restored snapshot (\S+) at offset (\d+)")
REPLAYED_LINE = re.compile(_LOG_TIME + r".*replayed (\d+) change-log records up to offset (\d+)")
SERVING_LINE = re.compile(_LOG_TIME + r".*node \S+ serving")
INSTALLED_LINE = re.compile(_LOG_TIME + r".*installed the leader's snapshot at offset (\d+)")


class Deadline(Exception):
    """The run ran out of its time budget."""


# --------------------------------------------------------------------------- processes
def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Node:
    id: str
    client: str
    peer: str
    remoting: str
    metrics: str
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Nodes:
    """Three ``metaledger serve`` processes, each in its own session."""

    root: Path
    serve_args: list[str]
    nodes: list[Node] = field(default_factory=list)

    @classmethod
    def make(cls, root: Path, serve_args: list[str], n: int = 3) -> Nodes:
        ports = free_ports(4 * n)
        nodes = [
            Node(
                id=f"n{i}",
                client=f"127.0.0.1:{ports[4 * i]}",
                peer=f"127.0.0.1:{ports[4 * i + 1]}",
                remoting=f"127.0.0.1:{ports[4 * i + 2]}",
                metrics=f"127.0.0.1:{ports[4 * i + 3]}",
                data_dir=root / f"n{i}",
                log_path=root / f"n{i}.log",
            )
            for i in range(n)
        ]
        return cls(root, serve_args, nodes)

    @property
    def endpoints(self) -> list[str]:
        return [n.client for n in self.nodes]

    def start(self, i: int) -> None:
        node = self.nodes[i]
        node.data_dir.mkdir(parents=True, exist_ok=True)
        cluster = ",".join(f"{n.id}={n.peer}" for n in self.nodes)
        password_file = self.root / "cluster-password"
        create_password_file(password_file)  # the Raft port always authenticates
        cmd = [
            sys.executable, "-m", "nameserver.cli", "serve",
            "--id", node.id,
            "--data-dir", str(node.data_dir),
            "--listen-client", node.client,
            "--listen-peer", node.peer,
            "--listen-remoting", node.remoting,
            "--listen-metrics", node.metrics,
            "--initial-cluster", cluster,
            "--cluster-password-file", str(password_file),
            *self.serve_args,
        ]  # fmt: skip
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
        env.pop("METALEDGER_PARENT_PID", None)
        with open(node.log_path, "ab") as out:
            out.write(f"=== restart_bench {time.strftime('%H:%M:%S')}: start\n".encode())
            out.flush()
            node.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                env=env,
                start_new_session=True,
            )

    def check_alive(self) -> None:
        for n in self.nodes:
            if n.proc is not None and n.proc.poll() is not None:
                raise RuntimeError(
                    f"{n.id} exited with {n.proc.returncode}:\n{log_tail(n.log_path)}"
                )

    def signal_all(self, sig: int) -> None:
        for n in self.nodes:
            if n.running():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(n.proc.pid, sig)  # type: ignore[union-attr]

    def wait_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for n in self.nodes:
            if n.proc is not None:
                n.proc.wait(max(0.1, deadline - time.monotonic()))

    def stop(self) -> None:
        """SIGTERM every running node, SIGKILL (its process group) after the grace time."""
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for n in self.nodes:
            if n.proc is None:
                continue
            try:
                n.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(n.proc.pid, signal.SIGKILL)
                n.proc.wait(STOP_GRACE_S)


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def wait_for(what: str, fn: Callable[[], T | None], timeout: float, nodes: Nodes) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        nodes.check_alive()
        try:
            value = fn()
        except Exception as exc:  # "not yet"
            last = exc
        else:
            if value:
                return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:g}s (last: {last!r})")
        time.sleep(0.05)


def statuses(nodes: Nodes, timeout: float = 2.0) -> list[admin_pb2.StatusResponse]:
    out = []
    for ep in nodes.endpoints:
        with grpc.insecure_channel(ep) as ch:
            out.append(
                admin_pb2_grpc.AdminStub(ch).Status(admin_pb2.StatusRequest(), timeout=timeout)
            )
    return out


def leader_agreed(nodes: Nodes) -> str | None:
    st = statuses(nodes)
    leaders = {s.leader for s in st}
    if len(leaders) == 1 and "" not in leaders and any(s.role == "leader" for s in st):
        return leaders.pop()
    return None


# --------------------------------------------------------------------------- load
def key_of(i: int) -> bytes:
    return b"bench/%09d" % i


async def load_keys(
    endpoints: Sequence[str], keys: int, value: bytes, txn_ops: int, clients: int
) -> tuple[int, int]:
    """Put keys 0..keys-1 in Txn batches; returns (txns, last revision seen)."""
    channels = [grpc.aio.insecure_channel(ep) for ep in endpoints]
    stubs = [rpc_pb2_grpc.KVStub(ch) for ch in channels]
    batches = iter(range(0, keys, txn_ops))
    done = 0
    last_rev = 0

    async def worker(stub: rpc_pb2_grpc.KVStub) -> None:
        nonlocal done, last_rev
        for lo in batches:
            ops = [
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=key_of(i), value=value))
                for i in range(lo, min(lo + txn_ops, keys))
            ]
            req = rpc_pb2.TxnRequest(success=ops)
            for attempt in range(20):
                try:
                    resp = await stub.Txn(req, timeout=30.0)
                    break
                except grpc.aio.AioRpcError as exc:
                    retriable = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
                    if exc.code() not in retriable or attempt == 19:
                        raise
                    await asyncio.sleep(0.2)
            done += 1
            last_rev = max(last_rev, resp.header.revision)

    try:
        await asyncio.gather(*(worker(stubs[i % len(stubs)]) for i in range(clients)))
    finally:
        await asyncio.gather(*(ch.close() for ch in channels), return_exceptions=True)
    return done, last_rev


@dataclass
class Probe:
    """A sequential one-client put loop: (wall start, wall end) of every acknowledged put."""

    samples: list[tuple[float, float]] = field(default_factory=list)
    errors: int = 0


async def probe_until(
    endpoint: str, value: bytes, stop: Callable[[], bool], max_s: float, probe: Probe
) -> None:
    async with grpc.aio.insecure_channel(endpoint) as ch:
        stub = rpc_pb2_grpc.KVStub(ch)
        deadline = time.monotonic() + max_s
        checked = 0.0
        i = 0
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now - checked > 0.5:  # the stop condition reads log files: not every put
                checked = now
                if stop():
                    return
            t0 = time.time()
            try:
                await stub.Put(rpc_pb2.PutRequest(key=b"probe/%d" % (i % 1000), value=value),
                               timeout=30.0)  # fmt: skip
            except grpc.aio.AioRpcError:
                probe.errors += 1
                await asyncio.sleep(0.05)
                continue
            probe.samples.append((t0, time.time()))
            i += 1
        raise RuntimeError(f"no snapshot covering the load within {max_s:g}s of probing")


# --------------------------------------------------------------------------- logs
def log_time(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def log_lines_since(path: Path, mark: int) -> list[str]:
    with open(path, "rb") as f:
        f.seek(mark)
        return f.read().decode(errors="replace").splitlines()


def snapshots_written(nodes: Nodes, marks: list[int]) -> list[dict[str, Any]]:
    out = []
    for node, mark in zip(nodes.nodes, marks, strict=True):
        for line in log_lines_since(node.log_path, mark):
            m = SNAPSHOT_LINE.match(line)
            if m:
                end = log_time(m.group(1))
                took = float(m.group(3))
                path = Path(m.group(4))
                out.append(
                    {
                        "node": node.id,
                        "offset": int(m.group(2)),
                        "write_s": took,
                        "start": end - took,
                        "end": end,
                        "bytes": path.stat().st_size if path.exists() else None,
                    }
                )
    return out


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def stall_stats(probe: Probe, windows: list[dict[str, Any]]) -> dict[str, Any]:
    def overlaps(s: tuple[float, float]) -> bool:
        return any(s[0] < w["end"] and s[1] > w["start"] for w in windows)

    during = sorted((e - s) * 1000 for s, e in probe.samples if overlaps((s, e)))
    outside = sorted((e - s) * 1000 for s, e in probe.samples if not overlaps((s, e)))
    slowest = sorted(probe.samples, key=lambda se: se[0] - se[1])[:5]
    return {
        "puts_over_50ms_during_snapshot": sum(1 for ms in during if ms > 50),
        "puts_over_50ms_no_snapshot": sum(1 for ms in outside if ms > 50),
        # when they started (wall clock, to match with the node logs) and how long they took
        "slowest_puts": [
            {
                "start": dt.datetime.fromtimestamp(s).strftime("%H:%M:%S.%f")[:-3],
                "ms": round((e - s) * 1000, 1),
                "during_snapshot": overlaps((s, e)),
            }
            for s, e in slowest
        ],
        "probe_puts": len(probe.samples),
        "probe_errors": probe.errors,
        "puts_during_snapshot": len(during),
        "p50_ms_no_snapshot": round(percentile(outside, 0.5), 2),
        "p99_ms_no_snapshot": round(percentile(outside, 0.99), 2),
        "max_ms_no_snapshot": round(outside[-1], 2) if outside else None,
        "p50_ms_during_snapshot": round(percentile(during, 0.5), 2) if during else None,
        "p99_ms_during_snapshot": round(percentile(during, 0.99), 2) if during else None,
        "max_ms_during_snapshot": round(during[-1], 2) if during else None,
    }


# --------------------------------------------------------------------------- restart
def range_ok(endpoint: str, key: bytes, value: bytes) -> bool:
    with grpc.insecure_channel(endpoint) as ch:
        resp = rpc_pb2_grpc.KVStub(ch).Range(rpc_pb2.RangeRequest(key=key), timeout=2.0)
    return len(resp.kvs) == 1 and resp.kvs[0].value == value


def measure_restart(
    nodes: Nodes, key: bytes, value: bytes, stop_sig: int, timeout: float
) -> dict[str, Any]:
    nodes.signal_all(stop_sig)
    t_stop = time.monotonic()
    nodes.wait_all(60.0)
    stop_s = time.monotonic() - t_stop
    marks = [n.log_path.stat().st_size for n in nodes.nodes]
    t0 = time.monotonic()
    wall0 = time.time()
    for i in range(len(nodes.nodes)):
        nodes.start(i)
    serving: dict[str, float] = {}
    deadline = t0 + timeout
    while len(serving) < len(nodes.nodes):
        nodes.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"not serving within {timeout:g}s: only {sorted(serving)}")
        for n in nodes.nodes:
            if n.id in serving:
                continue
            with contextlib.suppress(grpc.RpcError):
                if range_ok(n.client, key, value):
                    serving[n.id] = round(time.monotonic() - t0, 3)
        time.sleep(0.02)
    total = max(serving.values())
    restore: dict[str, Any] = {}
    for n, mark in zip(nodes.nodes, marks, strict=True):
        info: dict[str, Any] = {"linearizable_range_s": serving[n.id]}
        for line in log_lines_since(n.log_path, mark):
            if m := RESTORED_LINE.match(line):
                info["restored_offset"] = int(m.group(3))
                info["restored_at_s"] = round(log_time(m.group(1)) - wall0, 3)
            elif m := REPLAYED_LINE.match(line):
                info["replayed_records"] = int(m.group(2))
                info["replayed_upto"] = int(m.group(3))
                info["replayed_at_s"] = round(log_time(m.group(1)) - wall0, 3)
            elif (m := SERVING_LINE.match(line)) and "grpc_serving_s" not in info:
                info["grpc_serving_s"] = round(log_time(m.group(1)) - wall0, 3)
            elif m := INSTALLED_LINE.match(line):
                info["installed_leader_snapshot_at"] = int(m.group(2))
        restore[n.id] = info
    return {
        "stop_signal": signal.Signals(stop_sig).name,
        "stop_s": round(stop_s, 3),
        "restart_to_serving_s": total,
        "per_node": restore,
    }


# --------------------------------------------------------------------------- report
def table(report: dict[str, Any]) -> str:
    r = report
    load, stall, snap, restart = r["load"], r["stall"], r["snapshot"], r["restart"]
    rows = [
        ("keys x value size", f"{r['keys']:,} x {r['value_size']} B"),
        ("load", f"{load['seconds']:.1f} s, {load['keys_per_s']:,.0f} keys/s "
                 f"({load['txns']} txns of ≤{r['txn_ops']} puts, {r['clients']} clients)"),
        ("snapshot covering the load", f"offset {snap['offset']:,}, "
                                       f"{snap['bytes'] / 1e6:.1f} MB" if snap["bytes"] else "-"),
        ("snapshot write time (per node)", ", ".join(f"{w:.2f} s" for w in snap["write_s"])),
        ("probe put p50 / p99 / max, no snapshot",
         f"{stall['p50_ms_no_snapshot']} / {stall['p99_ms_no_snapshot']} / "
         f"{stall['max_ms_no_snapshot']} ms"),
        ("probe put p50 / p99 / max, during a snapshot",
         f"{stall['p50_ms_during_snapshot']} / {stall['p99_ms_during_snapshot']} / "
         f"{stall['max_ms_during_snapshot']} ms ({stall['puts_during_snapshot']} puts)"),
        ("probe puts over 50 ms: during / no snapshot",
         f"{stall['puts_over_50ms_during_snapshot']} / {stall['puts_over_50ms_no_snapshot']}"),
        ("slowest probe puts (start, ms)",
         ", ".join(f"{p['start']} {p['ms']}" for p in stall["slowest_puts"])),
        (f"stop ({restart['stop_signal']})", f"{restart['stop_s']:.2f} s"),
        ("restart → linearizable Range on every node", f"{restart['restart_to_serving_s']:.2f} s"),
    ]  # fmt: skip
    for nid, info in restart["per_node"].items():
        rows.append(
            (
                f"  {nid}: restored / replayed / gRPC up / Range ok",
                f"{info.get('restored_at_s', '-')} s (offset {info.get('restored_offset', '-')}) / "
                f"{info.get('replayed_at_s', '-')} s ({info.get('replayed_records', 0)} records) / "
                f"{info.get('grpc_serving_s', '-')} s / {info['linearizable_range_s']} s",
            )
        )
    rows += [(f"phase: {k}", f"{v:.1f} s") for k, v in r["phases_s"].items()]
    width = max(len(a) for a, _ in rows)
    lines = ["| what | result |", "|---|---|"]
    lines += [f"| {a.ljust(width)} | {b} |" for a, b in rows]
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    md = [
        f"# Restart from snapshot — {report['date']}",
        "",
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}, kernel {m['kernel']}, "
        f"Python {m['python']}. 3 nodes on 127.0.0.1, `--snapshot-every-items "
        f"{report['snapshot_every_items']}`. Times: restart is from the first process start; "
        "per-node restore times come from the node logs (wall clock, same machine).",
        "Stall: a sequential 1-client put loop runs until every node has written a snapshot "
        "covering the load; a put overlapping any node's snapshot write counts as during.",
        "",
        table(report),
        "",
    ]
    return "\n".join(md)


# --------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.restart_bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--txn-ops", type=int, default=128, help="puts per Txn (etcd's limit: 128)")
    p.add_argument("--clients", type=int, default=8, help="concurrent loading clients")
    p.add_argument("--snapshot-every-items", type=int, default=3000)
    p.add_argument("--stop", choices=("kill", "term"), default="kill")
    p.add_argument("--probe-max", type=float, default=300.0, help="seconds of probing at most")
    p.add_argument("--restart-timeout", type=float, default=300.0)
    p.add_argument("--max-total", type=float, default=1800.0, help="the whole run's budget (s)")
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--keep-data", action="store_true", help="keep the temporary data dirs")
    return p


def run(args: argparse.Namespace, workdir: Path, phases: dict[str, float]) -> dict[str, Any]:
    value = os.urandom(args.value_size // 2 + 1).hex().encode()[: args.value_size]
    nodes = Nodes.make(
        workdir, ["--snapshot-every-items", str(args.snapshot_every_items), "--log-level", "INFO"]
    )
    try:
        t = time.monotonic()
        for i in range(3):
            nodes.start(i)
        wait_for("a leader", lambda: leader_agreed(nodes), 60, nodes)
        phases["start"] = time.monotonic() - t

        t = time.monotonic()
        txns, last_rev = asyncio.run(
            load_keys(nodes.endpoints, args.keys, value, args.txn_ops, args.clients)
        )
        load_s = time.monotonic() - t
        phases["load"] = load_s
        print(f"loaded {args.keys:,} keys in {load_s:.1f}s ({args.keys / load_s:,.0f}/s)",
              flush=True)  # fmt: skip

        # probe until every node wrote a snapshot at or after the end of the load
        t = time.monotonic()
        marks = [n.log_path.stat().st_size for n in nodes.nodes]
        probe = Probe()

        def covered() -> bool:
            done = {s["node"] for s in snapshots_written(nodes, marks) if s["offset"] >= last_rev}
            return len(done) == len(nodes.nodes)

        asyncio.run(probe_until(nodes.endpoints[0], value, covered, args.probe_max, probe))
        phases["stall_probe"] = time.monotonic() - t
        written = snapshots_written(nodes, marks)
        stall = stall_stats(probe, written)
        covering = [s for s in written if s["offset"] >= last_rev]
        first = min(covering, key=lambda s: s["offset"])
        snapshot = {
            "offset": first["offset"],
            "bytes": first["bytes"],
            "write_s": [s["write_s"] for s in covering],
            "all_written_during_probe": written,
        }
        print(f"snapshot at {first['offset']}: {first['bytes']} bytes; stall {stall}", flush=True)

        t = time.monotonic()
        wait_for(
            "all nodes applied everything",
            lambda: len({s.apply_offset for s in statuses(nodes)}) == 1,
            60,
            nodes,
        )
        phases["converge"] = time.monotonic() - t

        t = time.monotonic()
        sig = signal.SIGKILL if args.stop == "kill" else signal.SIGTERM
        restart = measure_restart(nodes, key_of(args.keys - 1), value, sig, args.restart_timeout)
        phases["restart"] = time.monotonic() - t
        print(f"restart to serving: {restart['restart_to_serving_s']}s", flush=True)
    finally:
        nodes.stop()
    return {
        "load": {
            "seconds": round(load_s, 2),
            "keys_per_s": round(args.keys / load_s, 1),
            "txns": txns,
            "last_revision": last_rev,
        },
        "stall": stall,
        "snapshot": snapshot,
        "restart": restart,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.keys < 1 or not 1 <= args.txn_ops <= 128:
        raise SystemExit("--keys must be >= 1 and --txn-ops in 1..128")

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise Deadline(f"over the time budget of {args.max_total:g}s")

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(max(1, int(args.max_total)))
    workdir = Path(tempfile.mkdtemp(prefix="restart-bench-"))
    phases: dict[str, float] = {}
    started = time.monotonic()
    try:
        result = run(args, workdir, phases)
    except (Deadline, RuntimeError) as exc:
        print(f"restart_bench: {exc}", file=sys.stderr)
        args.keep_data = True
        return 1
    finally:
        signal.alarm(0)
        if args.keep_data:
            print(f"data dirs and node logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    phases["total"] = time.monotonic() - started
    report = {
        "date": timestamp(),
        "machine": machine(),
        "keys": args.keys,
        "value_size": args.value_size,
        "txn_ops": args.txn_ops,
        "clients": args.clients,
        "snapshot_every_items": args.snapshot_every_items,
        "phases_s": {k: round(v, 2) for k, v in phases.items()},
        **result,
    }
    print(table(report))
    json_path, md_path = write_report("restart", report, markdown(report), args.out_dir)
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
