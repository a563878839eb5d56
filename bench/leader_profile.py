"""Where a 3-node metaledger's CPU goes under load: per thread, and on the leader per activity.

    python -m bench.leader_profile [--op put] [--clients 64] [--cpu-seconds 5] [--spy-seconds 5]

Issue 2 asks, beside the etcd ratios, for "a profile of the leader under load". This starts a
3-node cluster the way ``bench.compare_etcd`` does (``metaledger cluster up`` on free ports, a
temporary data dir, every process stopped by PID), finds the leader, runs ``nameserver.loadgen``
against it and, while the load runs:

1. names every thread of the 3 server processes (``py-spy dump``: Python threads by their
   Python name; gRPC's C-core threads keep their OS name from ``/proc/<pid>/task/<tid>/comm``)
   and samples each thread's CPU from ``/proc/<pid>/task/*/stat`` over ``--cpu-seconds``;
2. then records the leader with ``py-spy record --gil --threads -f raw`` for ``--spy-seconds``
   and rolls the samples up by thread and by activity (CATEGORIES below).

The two windows do not overlap, so py-spy's pauses do not distort the CPU table; each window
counts its own puts from the leader's revision (one per put request), so "µs per put" is
CPU seconds (or GIL-holding samples ÷ rate) over the puts of the same window.

What ``--gil`` sees: only samples in which some thread holds the GIL, attributed to the Python
frame on top. C code run by cygrpc and uvloop with the GIL held has no Python frame of its own,
so it lands on the nearest Python frame below it (``asyncio/runners.py`` for the event loop):
that is the "gRPC + event loop" bucket. Native work without the GIL (gRPC's C-core
``event_engine`` threads, fdatasync) is visible only in the per-thread table.

Writes ``bench/results/leader-profile-<date>.md`` and ``.json``. Without py-spy on PATH the
threads keep their OS names and step 2 is skipped (the report says so).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from bench.compare_etcd import (
    ROOT,
    STOP_GRACE_S,
    Cluster,
    env_with_root,
    flag_argv,
    start_metaledger,
)
from bench.report import RESULTS_DIR, fmt, machine, timestamp, write_report

# --------------------------------------------------------------------------- activities

GRPC_LOOP = "gRPC + event loop (cygrpc/uvloop C code, tasks)"
HANDLERS = "our gRPC handlers (services)"
PROPOSE = "ReplicatedLog propose / wait"
ENGINE = "consensus engine"
APPLY = "apply (and the commit hand-off to it)"
SEGMENTS = "segments (change log)"
WATCH = "watch"
SNAPSHOTS = "snapshots"
OURS_OTHER = "other metaledger code"
OTHER = "other (threading, stdlib)"
CATEGORIES = (
    GRPC_LOOP,
    HANDLERS,
    PROPOSE,
    ENGINE,
    APPLY,
    SEGMENTS,
    WATCH,
    SNAPSHOTS,
    OURS_OTHER,
    OTHER,
)

#: ReplicatedLog methods that belong to apply or to snapshots; its other methods are propose.
_LOG_APPLY = {"_run_apply", "_apply_group", "_first_application", "_release_offset_waiters"}
_LOG_APPLY |= {"_on_commit"}  # the commit sink: runs on the engine thread, only enqueues
_LOG_SNAPSHOTS = {"_on_marker", "_write_snapshot", "_delete_covered_segments", "enable_snapshots"}
_LOG_SNAPSHOTS |= {"take", "state", "load", "engine_meta"}

#: Library-like modules both handlers and apply call: a sample there belongs to its caller.
_DEFER = re.compile(
    r"^(nameserver/(kv/semantics|\w+/records|state/(image|mapdelta|sortedmap)|errors|metrics|server)\.py"
    r"|nameserver/cli/|raftlog/(entry|errors|__init__)\.py|protos/|<frozen )"
)
_SERVICES = re.compile(
    r"^nameserver/(node|grpc/(status|admin|context)|\w+/service|leases/election)\.py$"
)
_GRPC_LOOP_PATHS = re.compile(r"^(grpc/|asyncio/|uvloop/|concurrent/|selectors\.py)")
_FRAME = re.compile(r"^(?P<func>.*) \((?P<path>[^()]*?)(?::(?P<line>\d+))?\)$")
_THREAD = re.compile(r"^thread \((?P<tid>0x[0-9a-fA-F]+|\d+)\)(?:: (?P<name>.*))?$")


@dataclass(frozen=True)
class Frame:
    func: str  # qualified name as py-spy prints it, e.g. Apply._apply_group
    path: str  # as py-spy shortens it: nameserver/grpc/status.py, asyncio/runners.py


def parse_frame(text: str) -> Frame:
    m = _FRAME.match(text.strip())
    if m is None:
        return Frame(text.strip(), "")
    return Frame(m["func"], m["path"])


def _methods(func: str) -> set[str]:
    """The name parts of a qualified name: ``A._send_item.<locals>.f`` -> {A, _send_item, f}."""
    return {part for part in func.split(".") if part != "<locals>"}


def _frame_category(frame: Frame) -> str | None:
    """The activity one frame decides, or None if the frame defers to its caller."""
    path = frame.path
    if not path or _DEFER.match(path):
        return None
    if path in ("raftlog/segments.py", "raftlog/segment_files.py"):
        return SEGMENTS
    if path == "raftlog/log/apply.py":
        return APPLY
    if path == "raftlog/log/snapshot_duties.py":
        return SNAPSHOTS
    if path == "raftlog/log/group_commit.py":
        return PROPOSE
    if path.startswith("raftlog/log/"):
        names = _methods(frame.func)
        if names & _LOG_SNAPSHOTS or any(n.startswith("snapshot_") for n in names):
            return SNAPSHOTS
        return APPLY if names & _LOG_APPLY else PROPOSE
    if path == "raftlog/wait.py":
        return PROPOSE
    if path.startswith(("raftlog/", "pysyncobj/")):
        return ENGINE
    if path.startswith("nameserver/watch/"):
        return WATCH
    if path in (
        "nameserver/state/snapshotting.py",
        "nameserver/state/forked.py",
    ) or path.startswith("snapshots/"):
        return SNAPSHOTS
    if path == "nameserver/state/machine.py" or (
        path.startswith("nameserver/") and path.endswith("/apply.py")
    ):
        return APPLY
    if _SERVICES.match(path):
        return HANDLERS
    if path.startswith(("nameserver/", "broker/", "replicator/")):
        return OURS_OTHER
    return None


def classify(frames: Sequence[Frame]) -> str:
    """The activity of one stack (root first, leaf last).

    The frame nearest the leaf that belongs to one of our subsystems decides: a put's
    ``segments.append`` called from ``_apply_group`` is segments, a ``KvImage.get`` called
    from a Range handler is the handler (image and kv code defer to their caller). A stack
    with none of our frames is gRPC/event-loop work if it runs under grpc or asyncio.
    """
    for frame in reversed(frames):
        category = _frame_category(frame)
        if category is not None:
            return category
    if any(_GRPC_LOOP_PATHS.match(f.path) for f in frames):
        return GRPC_LOOP
    return OTHER


@dataclass(frozen=True)
class Sample:
    tid: str
    thread: str
    frames: tuple[Frame, ...]
    count: int


def parse_raw(text: str) -> list[Sample]:
    """py-spy's ``-f raw`` output (with ``--threads``): ``thread (tid): name;frame;... count``."""
    samples = []
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        parts = stack.split(";")
        tid, thread = "?", "?"
        m = _THREAD.match(parts[0])
        if m is not None:
            tid, thread = m["tid"], m["name"] or m["tid"]
            parts = parts[1:]
        frames = tuple(parse_frame(p) for p in parts)
        samples.append(Sample(tid, thread, frames, int(count)))
    return samples


def rollup(samples: Iterable[Sample]) -> dict[str, Any]:
    """Sample counts by activity, by thread, and the top leaf frames of each activity."""
    by_category: collections.Counter[str] = collections.Counter()
    by_thread: collections.Counter[str] = collections.Counter()
    leaves: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for s in samples:
        category = classify(s.frames)
        by_category[category] += s.count
        by_thread[s.thread] += s.count
        leaf = s.frames[-1] if s.frames else Frame("?", "")
        leaves[category][f"{leaf.func} ({leaf.path})"] += s.count
    return {
        "total": sum(by_category.values()),
        "by_category": {c: by_category[c] for c in CATEGORIES if by_category[c]},
        "by_thread": dict(by_thread.most_common()),
        "top_leaves": {c: leaves[c].most_common(3) for c in CATEGORIES if c in leaves},
    }


# --------------------------------------------------------------------------- threads


_DUMP_THREAD = re.compile(r'^Thread (?P<tid>\d+|0x[0-9a-fA-F]+) \([^)]*\): "(?P<name>[^"]*)"')


def parse_pyspy_dump(text: str) -> dict[str, str]:
    """Thread id -> Python thread name, from ``py-spy dump`` (``Thread 123 (idle): "name"``)."""
    names = {}
    for line in text.splitlines():
        m = _DUMP_THREAD.match(line.strip())
        if m is not None:
            names[m["tid"]] = m["name"]
    return names


def parse_task_stat(text: str) -> tuple[str, int]:
    """(comm, utime + stime in clock ticks) from one ``/proc/<pid>/task/<tid>/stat`` line."""
    head, _, rest = text.rpartition(")")
    comm = head.split("(", 1)[1]
    fields = rest.split()  # fields[0] is the state, field 3 of the line
    return comm, int(fields[11]) + int(fields[12])


def thread_ticks(pid: int) -> dict[str, tuple[str, int]]:
    """tid -> (comm, CPU ticks) for every thread of ``pid`` now (threads that vanish are left out)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                out[tid] = parse_task_stat(f.read())
        except (OSError, ValueError, IndexError):
            pass
    return out


def thread_cpu(
    before: dict[str, tuple[str, int]],
    after: dict[str, tuple[str, int]],
    names: dict[str, str],
    seconds: float,
    clk_tck: int,
) -> list[dict[str, Any]]:
    """Per thread name (threads of one name summed), busiest first: CPU seconds and % of a core.

    A thread that started inside the window counts from its start (its whole CPU time).
    """
    ticks: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for tid, (comm, t1) in after.items():
        name = names.get(tid, comm)
        count[name] += 1
        ticks[name] += t1 - before.get(tid, (comm, 0))[1]
    return [
        {
            "thread": name,
            "threads": count[name],
            "cpu_s": ticks[name] / clk_tck,
            "cpu_pct": round(ticks[name] / clk_tck / seconds * 100, 1) if seconds > 0 else 0.0,
        }
        for name in sorted(count, key=lambda n: (-ticks[n], n))
    ]


def per_put(cpu_s: float, puts: int) -> float | None:
    return round(cpu_s / puts * 1e6, 1) if puts > 0 else None


# --------------------------------------------------------------------------- report


def threads_markdown(process: dict[str, Any]) -> str:
    lines = ["| thread | n | CPU % of a core | µs per put |", "|---|---|---|---|"]
    idle = 0
    for r in process["threads"]:
        if r["cpu_pct"] == 0:
            idle += r["threads"]  # listed in the JSON; in the table they are only noise
            continue
        lines.append(
            f"| {r['thread']} | {r['threads']} | {r['cpu_pct']:.1f} | {fmt(r['us_per_put'])} |"
        )
    if idle:
        lines.append(f"| (idle threads) | {idle} | 0 | 0 |")
    lines.append(
        f"| **total** | | **{process['cpu_pct']:.1f}** | **{fmt(process['us_per_put'])}** |"
    )
    return "\n".join(lines)


def spy_markdown(spy: dict[str, Any]) -> str:
    roll = spy["rollup"]
    total = roll["total"] or 1
    per_sample_us = spy["us_per_sample_per_put"]

    def us(n: int) -> str:
        return fmt(n * per_sample_us if per_sample_us is not None else None)

    lines = [
        "| activity (samples holding the GIL) | share | µs per put | top leaf frames |",
        "|---|---|---|---|",
    ]
    for category, n in roll["by_category"].items():
        leaves = "; ".join(
            f"`{leaf}` {c / total * 100:.0f}%" for leaf, c in roll["top_leaves"].get(category, [])
        )
        lines.append(f"| {category} | {n / total * 100:.1f}% | {us(n)} | {leaves} |")
    lines += ["", "| thread (samples holding the GIL) | share | µs per put |", "|---|---|---|"]
    for thread, n in roll["by_thread"].items():
        lines.append(f"| {thread} | {n / total * 100:.1f}% | {us(n)} |")
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    m, load = report["machine"], report["load"]
    la = report["load_avg_start"]
    out = [
        f"# Leader profile — {report['date']}",
        "",
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}, kernel {m['kernel']}, Python "
        f"{m['python']}; load average at the start {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f}.",
        f"metaledger 3 nodes (`metaledger cluster up`, this tree, "
        f"{report.get('grpc_front', 'python')} gRPC front); load: `nameserver.loadgen --op "
        f"{report['op']} --clients {report['clients']}` against the leader "
        f"({report['leader']}).",
        "",
        f"Load over its whole run ({load.get('duration_s', '-')} s, both windows and the "
        f"gaps): {fmt(load.get('ops_per_s'))} ops/s, p50 {fmt(load.get('p50_ms'), '.2f')} ms, "
        f"p99 {fmt(load.get('p99_ms'), '.2f')} ms, errors {fmt(load.get('errors'), 'd')}, "
        f"client CPU {fmt(load.get('client_cpu_us_per_op'))} µs/op, "
        "TCP segments/op client→server "
        f"{fmt(load.get('tcp_client_to_server_segs_per_op'), '.2f')}, server→client "
        f"{fmt(load.get('tcp_server_to_client_segs_per_op'), '.2f')}, machine-wide "
        f"{fmt(load.get('tcp_in_segs_per_op'), '.2f')} (peer traffic included), foreign CPU {fmt(load.get('foreign_cpu_pct'))}% of a core (the "
        "machine's busy time not spent by the client or the servers).",
        "",
        f"## CPU per thread ({report['cpu_window']['seconds']:.1f} s window, "
        f"{report['cpu_window']['puts_per_s']:.0f} puts/s)",
        "",
        "From `/proc/<pid>/task/*/stat` (user + system). Names: Python threads from "
        f"`py-spy dump`, native threads by their OS name{report['names_note']}.",
        "",
    ]
    for process in report["processes"]:
        out += [f"### {process['role']} (pid {process['pid']})", "", threads_markdown(process), ""]
    spy = report.get("pyspy")
    node = (spy or {}).get("node", "leader")
    out += [f"## The {node} by activity (py-spy --gil)", ""]
    if spy is None or "rollup" not in spy:
        out += [f"Not recorded: {report.get('pyspy_skipped', 'py-spy failed')}.", ""]
    else:
        out += [
            f"`py-spy record --gil --threads -f raw -r {spy['rate_hz']}"
            f"{'' if spy.get('blocking') else ' --nonblocking'}` of the {node} for "
            f"{spy['seconds']:g} s at {spy['puts_per_s']:.0f} puts/s (compare with the CPU "
            f"window's rate for py-spy's own cost). {spy['rollup']['total']} samples held the GIL: the "
            f"GIL was busy {spy['gil_busy_pct']:.0f}% of the time. µs per put = samples ÷ rate "
            "÷ puts. Native work without the GIL (C-core threads, fdatasync) is only in the "
            "thread tables above.",
            "",
            spy_markdown(spy),
            "",
        ]
    return "\n".join(out)


# --------------------------------------------------------------------------- running


def leader_revision(endpoint: str) -> int:
    """The leader's applied revision (Maintenance.Status): one per put request."""
    import grpc

    from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        status = rpc_pb2_grpc.MaintenanceStub(channel).Status(rpc_pb2.StatusRequest(), timeout=5)
    return int(status.header.revision)


class _Rate:
    """Puts between two points in time, from the leader's revision (or the loadgen's average)."""

    def __init__(self, endpoint: str, op: str) -> None:
        self.endpoint, self.op = endpoint, op
        self.revision, self.t = 0, 0.0

    def mark(self) -> None:
        if self.op == "put":
            self.revision = leader_revision(self.endpoint)
        self.t = time.monotonic()

    def since_mark(self) -> tuple[int, float]:
        """(puts, seconds) since mark(); puts is -1 for non-put loads (filled in later)."""
        seconds = time.monotonic() - self.t
        if self.op != "put":
            return -1, seconds
        return leader_revision(self.endpoint) - self.revision, seconds


def pyspy_names(pid: int, pyspy: str | None) -> dict[str, str]:
    if pyspy is None:
        return {}
    try:
        out = subprocess.run(
            [pyspy, "dump", "-p", str(pid)], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        return {}
    return parse_pyspy_dump(out.stdout)


def wait_for_load(rate: _Rate, load: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Until the load's writes reach the leader: 100 puts, or a read load's whole key space.

    A read load first writes its keys (Txns of 64 puts, one revision each); its reads start
    after the last of them.
    """
    from nameserver.loadgen import POPULATE_BATCH, LoadSpec

    key_space = LoadSpec().key_space
    needed = 100 if rate.op in ("put", "txn") else -(-key_space // POPULATE_BATCH)
    deadline = time.monotonic() + timeout_s
    start = leader_revision(rate.endpoint)
    while time.monotonic() < deadline:
        if load.poll() is not None:
            raise RuntimeError(f"loadgen exited early with code {load.returncode}")
        if leader_revision(rate.endpoint) >= start + needed:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the load's writes did not reach the leader within {timeout_s:g}s")


def profile(args: argparse.Namespace, cluster: Cluster, workdir: Path) -> dict[str, Any]:
    pyspy = shutil.which("py-spy")
    n = len(cluster.endpoints)
    leader_index = cluster.endpoints.index(cluster.leader)
    order = [leader_index, *(i for i in range(n) if i != leader_index)]
    pids = [cluster.server_pids[i] for i in order]
    roles = ["leader", *(["follower"] * (n - 1))]
    if len(cluster.server_pids) == 2 * n:  # --grpc-front go: each node's front after the nodes
        pids += [cluster.server_pids[n + i] for i in order]
        roles += [f"{role}'s Go front" for role in roles]
    spied = pids[0] if args.spy == "leader" else pids[1]
    margin_s = 4.0  # loadgen start, py-spy dump pauses, py-spy attach
    duration = args.settle + args.cpu_seconds + args.spy_seconds + margin_s
    flags = {
        "--op": args.op,
        "--clients": str(args.clients),
        "--duration": f"{duration:g}",
        "--warmup": "1",
        "--value-size": str(args.value_size),
        "--endpoints": cluster.leader,
        "--server-pids": ",".join(map(str, pids)),
    }
    load = subprocess.Popen(
        [sys.executable, "-m", "nameserver.loadgen", "--json", *flag_argv(flags)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env_with_root(),
    )
    report: dict[str, Any] = {}
    try:
        rate = _Rate(cluster.leader, args.op)
        wait_for_load(rate, load, 30.0)
        time.sleep(1.0 + args.settle)  # past the loadgen's 1 s warm-up
        names = {pid: pyspy_names(pid, pyspy) for pid in pids}
        for pid in pids:  # segment-flusher:/tmp/leader_profile-x/metaledger/n0/log -> …n0/log
            names[pid] = {t: n.replace(f"{workdir}/", "") for t, n in names[pid].items()}
        report["names_note"] = "" if pyspy else " (py-spy not found: all threads by OS name)"

        clk_tck = os.sysconf("SC_CLK_TCK")
        rate.mark()
        before = {pid: thread_ticks(pid) for pid in pids}
        time.sleep(args.cpu_seconds)
        after = {pid: thread_ticks(pid) for pid in pids}
        puts, seconds = rate.since_mark()
        report["cpu_window"] = {"seconds": seconds, "puts": puts}
        report["processes"] = []
        for pid, role in zip(pids, roles, strict=True):
            rows = thread_cpu(before[pid], after[pid], names[pid], seconds, clk_tck)
            cpu_pct = round(sum(r["cpu_pct"] for r in rows), 1)
            report["processes"].append(
                {"role": role, "pid": pid, "threads": rows, "cpu_pct": cpu_pct}
            )

        if pyspy is None:
            report["pyspy_skipped"] = "py-spy is not on PATH"
        else:
            raw = workdir / "leader.raw"
            spy_cmd = [pyspy, "record", "-p", str(spied), "-d", f"{args.spy_seconds:g}"]
            spy_cmd += ["-r", str(args.rate), "--gil", "--threads", "-f", "raw", "-o", str(raw)]
            if not args.blocking:
                spy_cmd.append("--nonblocking")
            rate.mark()
            spy = subprocess.run(spy_cmd, capture_output=True, text=True, timeout=60)
            spy_puts, spy_wall = rate.since_mark()
            if spy.returncode != 0 or not raw.exists():
                why = (spy.stderr.strip().splitlines() or [f"exit code {spy.returncode}"])[-1]
                report["pyspy_skipped"] = f"py-spy record failed: {why}"
            else:
                report["pyspy"] = {
                    "node": args.spy,
                    "rate_hz": args.rate,
                    "blocking": args.blocking,
                    "seconds": args.spy_seconds,
                    "wall_s": spy_wall,
                    "puts": spy_puts,
                    "rollup": rollup(
                        replace(s, thread=s.thread.replace(f"{workdir}/", ""))
                        for s in parse_raw(raw.read_text())
                    ),
                }
        if load.poll() is not None:
            raise RuntimeError("the load ended before the profile did (raise --duration margin)")
        out, err = load.communicate(timeout=duration + 60)
    finally:
        if load.poll() is None:
            load.terminate()
            load.wait(STOP_GRACE_S)
    lines = out.decode().strip().splitlines()
    if load.returncode != 0 or not lines:
        raise RuntimeError(f"loadgen failed: {err.decode().strip()[-300:]}")
    report["load"] = json.loads(lines[-1])
    _fill_rates(report)
    return report


def _fill_rates(report: dict[str, Any]) -> None:
    """Put rates per window; for a read load, the loadgen's average rate stands in for both."""
    average = report["load"].get("ops_per_s") or 0.0
    window = report["cpu_window"]
    if window["puts"] < 0:
        window["puts"] = int(average * window["seconds"])
    window["puts_per_s"] = window["puts"] / window["seconds"] if window["seconds"] else 0.0
    for process in report["processes"]:
        for r in process["threads"]:
            r["us_per_put"] = per_put(r["cpu_s"], window["puts"])
        process["us_per_put"] = per_put(sum(r["cpu_s"] for r in process["threads"]), window["puts"])
    spy = report.get("pyspy")
    if spy is not None:
        if spy["puts"] < 0:
            spy["puts"] = int(average * spy["wall_s"])
        spy["puts_per_s"] = spy["puts"] / spy["wall_s"] if spy["wall_s"] else 0.0
        expected = spy["rate_hz"] * spy["seconds"]
        spy["gil_busy_pct"] = round(spy["rollup"]["total"] / expected * 100, 1)
        # One sample stands for 1/rate s of GIL time; per put at the window's put rate.
        done = spy["puts_per_s"] * spy["seconds"]
        spy["us_per_sample_per_put"] = 1e6 / spy["rate_hz"] / done if done else None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.leader_profile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--op", choices=("put", "get", "get-ser", "txn"), default="put")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--value-size", type=int, default=256)
    p.add_argument("--settle", type=float, default=2.0, help="s of load before measuring")
    p.add_argument("--cpu-seconds", type=float, default=5.0, help="per-thread CPU window")
    p.add_argument("--spy-seconds", type=float, default=5.0, help="py-spy record window")
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument(
        "--blocking",
        action="store_true",
        help="let py-spy pause the leader for each sample (consistent stacks, slower leader)",
    )
    p.add_argument(
        "--grpc-front",
        choices=("python", "go"),
        default="python",
        help="the nodes' gRPC front (go: serve --grpc-front go; the fronts' CPU is listed too)",
    )
    p.add_argument(
        "--spy", choices=("leader", "follower"), default="leader", help="the node py-spy records"
    )
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    for name in ("clients", "rate"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    for name in ("cpu_seconds", "spy_seconds"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
    if args.settle < 0:
        p.error("--settle must be >= 0")

    def on_signal(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, on_signal)
    report: dict[str, Any] = {
        "date": timestamp(),
        "machine": machine(),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
        "op": args.op,
        "clients": args.clients,
        "grpc_front": args.grpc_front,
    }
    workdir = Path(tempfile.mkdtemp(prefix="leader_profile-"))
    cluster = Cluster("metaledger")
    try:
        print("== metaledger: starting 3 nodes", file=sys.stderr, flush=True)
        start_metaledger(cluster, workdir, go_front=args.grpc_front == "go")
        report["leader"] = cluster.leader
        print(f"== leader {cluster.leader}; profiling", file=sys.stderr, flush=True)
        report.update(profile(args, cluster, workdir))
    except KeyboardInterrupt:
        print("leader_profile: interrupted; stopping what it started", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"leader_profile: {exc}; stopping what it started", file=sys.stderr)
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # let the cleanup finish
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        for sig, handler in previous.items():  # an ignored SIGTERM would pass to children
            signal.signal(sig, handler)
    json_path, md_path = write_report("leader-profile", report, markdown(report), args.out_dir)
    print(markdown(report))
    print(f"\nwrote {json_path} and {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
