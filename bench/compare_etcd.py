"""etcd 3.4 and metaledger side by side, 3 members each on loopback, same load generator.

    python -m bench.compare_etcd [--rows put:1,put:16,...] [--duration 10] [--warmup 1]
        [--systems etcd,metaledger,grpc-aio-noop,grpc-sync-noop,etcd-tls,metaledger-tls]
    bench/compare_etcd.sh ...   (the same, with a shell trap around it)

For each system in turn (never two at once): start a 3-member cluster on free loopback ports
with temporary data dirs (etcd from ``/usr/bin/etcd``; metaledger with ``metaledger cluster
up``), find its leader (``etcdctl endpoint status``; Admin.Status), run every row with
``nameserver.loadgen`` in its own process against the leader (or all members with ``--target all``),
then stop the cluster by PID (SIGTERM, then SIGKILL after 10 s). With ``--interleave`` every
system is started first and each row runs on each system in turn while the others idle, so
that a ratio comes from adjacent runs, not runs minutes apart on a drifting machine. The results go to
``bench/results/compare_etcd-<date>.json`` and ``.md`` with the machine's description. The
whole run is bounded (``--max-total``, SIGALRM) and stops everything it started on any exit.

The ``get-rev`` rows are historical reads (``nameserver.loadgen``: one key at a revision
from before the whole key space was written again), against etcd's own; the ``get`` row
with as many clients is the same read at the latest revision.

The two ``*-noop`` systems are the ceiling, not competitors: one ``bench.noop_kv`` process (a
gRPC server whose handlers return canned answers) in grpc.aio-on-uvloop mode, as metaledger
serves, or grpc's thread-pool mode (``--noop-workers``). "metaledger / noop" says how much of
what a Python gRPC server can do at all metaledger's replicated path keeps; "noop / etcd"
is the most any Python gRPC server reaches here. Every row also records the machine's TCP
segments per operation, per direction on the load generator's connections and machine-wide
(see ``nameserver.loadgen``): etcd coalesces the responses of many streams into one write, a Python
server sends about one segment per call.

Environment: COMPARE_ROWS, COMPARE_DURATION, COMPARE_WARMUP, ETCD, ETCDCTL, COMPARE_BASELINE_TREE
override the defaults. ``metaledger-baseline`` runs the servers of another checkout
(``--baseline-tree``) beside this one, to measure a change side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from bench.report import RESULTS_DIR, fmt, machine, timestamp, write_report
from nameserver.cli.cluster import busy_ports, layout
from nameserver.client import Client, NodeStatus

DEFAULT_ROWS = "put:1,put:16,put:64,get:64,get-ser:64,txn:16,get-rev:64"
SYSTEMS = (
    "etcd",
    "metaledger",
    "metaledger-pysyncobj",
    "metaledger-baseline",
    "metaledger-gofront",
    "metaledger-baseline-gofront",
    "grpc-aio-noop",
    "grpc-sync-noop",
    "etcd-tls",
    "metaledger-tls",
)
#: TLS systems: the same cluster with TLS on every port, client certificates required
#: (etcd: --cert-file/--key-file/--trusted-ca-file/--client-cert-auth and the --peer-* set;
#: metaledger: ``cluster up --tls``, the same flags), the load generator presenting a client
#: certificate; one throwaway CA (nameserver.cli.ca) per system
TLS_SYSTEMS = {"etcd-tls": "etcd", "metaledger-tls": "metaledger"}
#: metaledger systems and the consensus engine their nodes run (DESIGN §3: a native engine
#: must beat PySyncObj side by side)
ENGINES = {
    "metaledger": "native",
    "metaledger-pysyncobj": "pysyncobj",
    "metaledger-baseline": "native",
    "metaledger-gofront": "native",
    "metaledger-baseline-gofront": "native",
    "metaledger-tls": "native",
}
#: ``metaledger-gofront``: the nodes serve their client port through the Go gRPC front
#: (``serve --grpc-front go``, docs/operations.md); its processes count as the servers'.
GO_FRONT_SYSTEMS = {"metaledger-gofront", "metaledger-baseline-gofront"}
#: ``metaledger-baseline`` runs the servers of another checkout (``--baseline-tree``, e.g. a
#: ``git worktree`` of the commit before a change) under the same load generator: a change's
#: cost measured side by side, interleaved, instead of from two runs minutes apart;
#: ``metaledger-baseline-gofront`` the same through its Go front (``scripts/build_front.sh``
#: run in that checkout).
BASELINE_SYSTEMS = {"metaledger-baseline", "metaledger-baseline-gofront"}
NOOP_MODES = {"grpc-aio-noop": "aio", "grpc-sync-noop": "sync"}
#: Columns of the ratio table: (numerator, denominator), shown when both systems ran.
RATIOS = (
    ("metaledger", "etcd"),
    ("metaledger-pysyncobj", "etcd"),
    ("metaledger", "metaledger-pysyncobj"),
    ("metaledger", "metaledger-baseline"),
    ("metaledger-gofront", "etcd"),
    ("metaledger-gofront", "metaledger"),
    ("metaledger-gofront", "metaledger-baseline-gofront"),
    ("metaledger", "grpc-aio-noop"),
    ("metaledger", "grpc-sync-noop"),
    ("grpc-aio-noop", "etcd"),
    ("grpc-sync-noop", "etcd"),
    ("metaledger-tls", "metaledger"),
    ("etcd-tls", "etcd"),
    ("metaledger-tls", "etcd-tls"),
)
ROOT = Path(__file__).resolve().parents[1]
STARTUP_S = 60.0
STOP_GRACE_S = 10.0
ROW_OVERHEAD_S = 60.0  # key-space writes for get, process start, stragglers


@dataclass(frozen=True)
class Row:
    op: str
    clients: int

    @property
    def name(self) -> str:
        return f"{self.op}:{self.clients}"


def parse_rows(text: str) -> list[Row]:
    from nameserver.loadgen import OPS

    rows = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        op, _, clients = part.partition(":")
        if op not in OPS or not clients.isdigit() or int(clients) < 1:
            raise argparse.ArgumentTypeError(f"row {part!r} is not OP:CLIENTS (OP in {OPS})")
        rows.append(Row(op, int(clients)))
    if not rows:
        raise argparse.ArgumentTypeError("no rows given")
    return rows


class Deadline(Exception):
    """The whole comparison ran out of its time budget."""


@dataclass
class Cluster:
    """What one system's run started: processes to stop, endpoints, and server pids to watch."""

    name: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    extra_pids: list[int] = field(default_factory=list)  # started by a process in procs
    endpoints: list[str] = field(default_factory=list)
    server_pids: list[int] = field(default_factory=list)
    leader: str = ""
    version: str = ""
    tls: dict[str, str] = field(default_factory=dict)  # cacert/cert/key (TLS systems)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for pid in self.extra_pids:  # cluster up stops its nodes; make sure of it
            for _ in range(int(STOP_GRACE_S * 10)):
                if not _alive(pid):
                    break
                time.sleep(0.1)
            else:
                _kill(pid, signal.SIGKILL)
        self.procs.clear()
        self.extra_pids.clear()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def flag_argv(flags: dict[str, str]) -> list[str]:
    return [item for pair in flags.items() for item in pair]


def env_with_root(root: Path = ROOT) -> dict[str, str]:
    """This environment with ``root`` (default: this project) first on PYTHONPATH (for
    ``python -m`` children)."""
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def _git_head(tree: Path) -> str:
    """`` at <short commit>`` of the checkout at ``tree``, or nothing outside git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return f" at {out.stdout.strip()}"


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_base_port(nodes: int) -> int:
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000 - 10 * nodes, 10)
        if not busy_ports(layout(nodes, base)):
            return base
    raise RuntimeError("no free base port found for metaledger")


def _wait_for(
    what: str, check: Any, timeout_s: float, procs: Sequence[subprocess.Popen[bytes]]
) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: pid {p.pid} exited with code {p.returncode}")
        try:
            result = check()
            if result:
                return result
        except Exception as exc:  # keep polling; report the last failure
            last = exc
        time.sleep(0.25)
    raise RuntimeError(f"{what}: not ready within {timeout_s:g}s (last error: {last})")


# --------------------------------------------------------------------------- etcd


def start_etcd(cluster: Cluster, etcd: str, etcdctl: str, workdir: Path, tls: bool = False) -> None:
    ports = free_ports(6)
    names = [f"m{i}" for i in range(3)]
    scheme = "https" if tls else "http"
    base = workdir / ("etcd-tls" if tls else "etcd")
    client_urls = [f"{scheme}://127.0.0.1:{ports[i]}" for i in range(3)]
    peer_urls = [f"{scheme}://127.0.0.1:{ports[3 + i]}" for i in range(3)]
    if tls:
        from nameserver.cli.certs import ensure_ca

        cluster.tls = ensure_ca(str(workdir / "etcd-pki"), names)
    initial = ",".join(f"{n}={u}" for n, u in zip(names, peer_urls, strict=True))
    cluster.version = subprocess.run(
        [etcd, "--version"], capture_output=True, text=True, timeout=10
    ).stdout.split("\n")[0]
    for i, name in enumerate(names):
        data = base / name
        data.mkdir(parents=True)
        flags = {
            "--name": name,
            "--data-dir": str(data),
            "--listen-client-urls": client_urls[i],
            "--advertise-client-urls": client_urls[i],
            "--listen-peer-urls": peer_urls[i],
            "--initial-advertise-peer-urls": peer_urls[i],
            "--initial-cluster": initial,
            "--initial-cluster-state": "new",
            "--initial-cluster-token": f"compare-etcd-{os.getpid()}",
            "--logger": "zap",
        }
        if tls:
            pem = workdir / "etcd-pki"
            for prefix in ("", "peer-"):
                flags[f"--{prefix}cert-file"] = str(pem / f"{name}.pem")
                flags[f"--{prefix}key-file"] = str(pem / f"{name}-key.pem")
                flags[f"--{prefix}trusted-ca-file"] = cluster.tls["cacert"]
        switches = ["--client-cert-auth", "--peer-client-cert-auth"] if tls else []
        with open(base / f"{name}.log", "wb") as log:
            cluster.procs.append(
                subprocess.Popen(
                    [etcd, *flag_argv(flags), *switches],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    cluster.server_pids = [p.pid for p in cluster.procs]
    cluster.endpoints = [u.split("://", 1)[1] for u in client_urls]
    tls_flags = [f"--{k}={v}" for k, v in cluster.tls.items()]

    def leader() -> str:
        out = subprocess.run(
            [
                etcdctl,
                f"--endpoints={','.join(cluster.endpoints)}",
                *tls_flags,
                "endpoint",
                "status",
                "-w",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            env={**os.environ, "ETCDCTL_API": "3"},
        )
        if out.returncode != 0:
            raise RuntimeError(out.stderr.strip())
        statuses = json.loads(out.stdout)
        if len(statuses) != 3:
            return ""
        for s in statuses:
            st = s["Status"]
            if st.get("leader") and st["header"]["member_id"] == st["leader"]:
                return str(s["Endpoint"]).split("://", 1)[-1]
        return ""

    cluster.leader = _wait_for("etcd leader", leader, STARTUP_S, cluster.procs)


# --------------------------------------------------------------------------- metaledger


def start_metaledger(
    cluster: Cluster,
    workdir: Path,
    engine: str = "native",
    tree: Path | None = None,
    tls: bool = False,
    go_front: bool = False,
) -> None:
    """A 3-node ``cluster up`` of this tree, or of the checkout at ``tree`` (``--tls``;
    ``go_front``: ``--grpc-front go``, the fronts' processes counted as servers)."""
    root = tree or ROOT
    data = workdir / (f"metaledger-{engine}" if tree is None else "metaledger-baseline")
    if go_front:
        data = data.with_name(data.name + "-gofront")
    if tls:
        from nameserver.cli.certs import TLS_DIR, client_files

        data = data.with_name(data.name + "-tls")
        cluster.tls = client_files(str(data / TLS_DIR))
    data.mkdir(parents=True)
    base = free_base_port(3)
    nodes = layout(3, base)
    flags = {
        "--nodes": "3",
        "--data-dir": str(data),
        "--base-port": str(base),
        "--log-level": "WARNING",
        "--consensus": engine,
    }
    if go_front:
        flags["--grpc-front"] = "go"
    with open(data.with_name(data.name + "-cluster-up.log"), "wb") as log:
        cluster.procs.append(
            subprocess.Popen(
                [
                    *(sys.executable, "-m", "nameserver.cli", "cluster", "up"),
                    *flag_argv(flags),
                    *(["--tls"] if tls else []),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=root,
                env=env_with_root(root),
            )
        )
    cluster.endpoints = [n.client_endpoint for n in nodes]
    cluster.version = (
        f"metaledger (this tree, {engine} engine{', Go gRPC front' if go_front else ''})"
        if tree is None
        else f"metaledger (baseline tree {tree}{_git_head(tree)}, {engine} engine"
        f"{', Go gRPC front' if go_front else ''})"
    )

    def node_pids() -> list[int]:
        files = [data / f"{n.id}.pid" for n in nodes]
        if not all(f.exists() for f in files):
            return []
        pids = [int(f.read_text()) for f in files]
        if go_front:  # each node's front, a child of its node
            fronts = [c for pid in pids for c in _children(pid)]
            if len(fronts) < len(pids):
                return []
            pids += fronts
        return pids

    cluster.server_pids = _wait_for("metaledger nodes", node_pids, STARTUP_S, cluster.procs)
    cluster.extra_pids = list(cluster.server_pids)

    def leader() -> str:
        with Client(cluster.endpoints, timeout_s=1.0, **cluster.tls) as client:
            statuses = [s for s in client.status_all() if isinstance(s, NodeStatus)]
        leaders = {s.leader for s in statuses}
        if len(statuses) != 3 or len(leaders) != 1:
            return ""
        return next((s.endpoint for s in statuses if s.id in leaders), "")

    cluster.leader = _wait_for("metaledger leader", leader, STARTUP_S, cluster.procs)


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux: /proc/PID/task/*/children)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


# --------------------------------------------------------------------------- noop (the ceiling)

#: how the aio noop serves: as metaledger's server does (nameserver.grpc.accept)
NOOP_AIO_ARGS = ("--methods", "table", "--acceptors", "32")


def start_noop(cluster: Cluster, mode: str, workers: int, workdir: Path) -> None:
    """One ``bench.noop_kv`` process; it is its own leader (Maintenance.Status says so)."""
    import grpc

    from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc

    (port,) = free_ports(1)
    endpoint = f"127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "bench.noop_kv", "--port", str(port), "--mode", mode]
    # aio: the server's own accept path (one generic table, extra accepts for hot methods)
    extra = ["--workers", str(workers)] if mode == "sync" else list(NOOP_AIO_ARGS)
    cmd += extra
    with open(workdir / f"noop-{mode}.log", "wb") as log:
        cluster.procs.append(
            subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env_with_root(),
            )
        )
    cluster.server_pids = [cluster.procs[0].pid]
    cluster.endpoints = [endpoint]
    cluster.version = " ".join(["bench.noop_kv --mode", mode, *extra])

    def leader() -> str:
        with grpc.insecure_channel(endpoint) as channel:
            status = rpc_pb2_grpc.MaintenanceStub(channel).Status(
                rpc_pb2.StatusRequest(), timeout=1.0
            )
        return endpoint if status.leader == status.header.member_id else ""

    cluster.leader = _wait_for(f"noop_kv {mode}", leader, STARTUP_S, cluster.procs)


#: ``--auth``: the user the load runs as (not root: its key ranges are checked per request)
AUTH_USER = "bench:benchpw"


def enable_auth(cluster: Cluster, etcdctl: str) -> None:
    """Auth on, the same way on etcd and metaledger (etcdctl): root, and user ``bench`` with
    readwrite on every key from "a" on (the load's keys)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETCDCTL_")}
    env["ETCDCTL_API"] = "3"
    for step in (
        ["user", "add", "root:rootpw"],
        ["user", "add", AUTH_USER],
        ["role", "add", "bench"],
        ["role", "grant-permission", "bench", "readwrite", "a", "--from-key"],
        ["user", "grant-role", "bench", "bench"],
        ["auth", "enable"],
    ):
        argv = [etcdctl, f"--endpoints={cluster.leader}", *step]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
        if out.returncode != 0:
            raise RuntimeError(f"{cluster.name}: etcdctl {' '.join(step)}: {out.stderr.strip()}")


def start_system(system: str, args: argparse.Namespace, workdir: Path) -> Cluster:
    """A running ``system`` (one of SYSTEMS) with its data under ``workdir``."""
    cluster = Cluster(system)
    if system in NOOP_MODES:
        print(f"== {system}: starting 1 member (the ceiling)", file=sys.stderr, flush=True)
        start_noop(cluster, NOOP_MODES[system], args.noop_workers, workdir)
        return cluster
    print(f"== {system}: starting 3 members", file=sys.stderr, flush=True)
    tls = system in TLS_SYSTEMS
    if TLS_SYSTEMS.get(system, system) == "etcd":
        start_etcd(cluster, args.etcd, args.etcdctl, workdir, tls)
    else:
        tree = args.baseline_tree if system in BASELINE_SYSTEMS else None
        start_metaledger(cluster, workdir, ENGINES[system], tree, tls, system in GO_FRONT_SYSTEMS)
    return cluster


# --------------------------------------------------------------------------- rows


def machine_busy_pct(seconds: float) -> float | None:
    """The machine's busy time over the next ``seconds``, in % of one core (None off Linux)."""
    from nameserver.loadgen.procstats import machine_busy_jiffies

    a = machine_busy_jiffies()
    time.sleep(seconds)
    b = machine_busy_jiffies()
    if a is None or b is None or b[1] <= a[1]:
        return None
    return (b[0] - a[0]) / (b[1] - a[1]) * (os.cpu_count() or 1) * 100


def wait_quiet(below_pct: float, max_wait_s: float, sample_s: float = 2.0) -> dict[str, float]:
    """Wait (bounded) until the machine is busy less than ``below_pct`` of a core.

    The machine is shared: a row run while others' tests take a core compares nothing. The
    row runs anyway after ``max_wait_s``; what the machine was doing is recorded with it.
    """
    started = time.monotonic()
    busy = machine_busy_pct(sample_s)
    while busy is not None and busy >= below_pct and time.monotonic() - started < max_wait_s:
        busy = machine_busy_pct(sample_s)
    return {
        "quiet_wait_s": round(time.monotonic() - started, 1),
        "busy_before_pct": round(busy, 1) if busy is not None else -1.0,
    }


def run_row(
    row: Row, cluster: Cluster, args: argparse.Namespace, budget_s: float
) -> dict[str, Any]:
    targets = cluster.endpoints if args.target == "all" else [cluster.leader]
    flags = {
        "--op": row.op,
        "--clients": str(row.clients),
        "--duration": str(args.duration),
        "--warmup": str(args.warmup),
        "--value-size": str(args.value_size),
        "--key-space": str(args.key_space),
        "--endpoints": ",".join(targets),
        "--server-pids": ",".join(map(str, cluster.server_pids)),
        **{f"--{k}": v for k, v in cluster.tls.items()},
    }
    if args.auth and cluster.name not in NOOP_MODES:
        flags["--user"] = AUTH_USER
    cmd = [sys.executable, "-m", "nameserver.loadgen", "--json", *flag_argv(flags)]
    timeout = min(args.warmup + args.duration + ROW_OVERHEAD_S, budget_s)
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env_with_root()
        )
    except subprocess.TimeoutExpired:
        return {"op": row.op, "clients": row.clients, "failed": f"timed out after {timeout:g}s"}
    if out.returncode != 0 or not out.stdout.strip():
        why = (out.stderr.strip().splitlines() or [f"exit code {out.returncode}"])[-1]
        return {"op": row.op, "clients": row.clients, "failed": why}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------- report


def ratios(entry: dict[str, Any]) -> dict[str, float | None]:
    """``"a / b"`` -> a's ops/s over b's for every RATIOS pair whose two systems ran the row."""
    out: dict[str, float | None] = {}
    for num, den in RATIOS:
        if num in entry and den in entry:
            a, b = entry[num].get("ops_per_s"), entry[den].get("ops_per_s")
            out[f"{num} / {den}"] = round(a / b, 3) if a is not None and b else None
    return out


def _systems_in(report: dict[str, Any]) -> list[str]:
    return [s for s in SYSTEMS if any(s in row for row in report["rows"])]


def table(report: dict[str, Any]) -> str:
    """Throughput of every system and the ratios, one line per row."""
    systems = _systems_in(report)
    names = [
        name
        for name in (f"{a} / {b}" for a, b in RATIOS)
        if any(name in row.get("ratios", {}) for row in report["rows"])
    ]
    head = ["row", *(f"{s} ops/s" for s in systems), *names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in report["rows"]:
        cells = [row["row"]]
        cells += [fmt(row.get(s, {}).get("ops_per_s")) for s in systems]
        cells += [fmt(row.get("ratios", {}).get(n), ".2f") for n in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_table(report: dict[str, Any]) -> str:
    """Latency, CPU, TCP segments, errors and noise of every system on every row."""
    head = (
        "| row | system | ops/s | p50 / p99 ms | client / server µs/op "
        "| TCP segs/op client→server / server→client / machine | errors "
        "| foreign CPU % (machine busy % before the row) |"
    )
    lines = [head, "|" + "---|" * 8]
    for row in report["rows"]:
        for system in _systems_in(report):
            r = row.get(system)
            if r is None:
                continue
            if "failed" in r:
                lines.append(f"| {row['row']} | {system} | failed: {r['failed']} |||||||")
                continue
            lines.append(
                f"| {row['row']} | {system} | {fmt(r.get('ops_per_s'))} "
                f"| {r['p50_ms']:.2f} / {r['p99_ms']:.2f} "
                f"| {fmt(r.get('client_cpu_us_per_op'))} / {fmt(r.get('server_cpu_us_per_op'))} "
                f"| {fmt(r.get('tcp_client_to_server_segs_per_op'), '.2f')} / "
                f"{fmt(r.get('tcp_server_to_client_segs_per_op'), '.2f')} / "
                f"{fmt(r.get('tcp_in_segs_per_op'), '.2f')} "
                f"| {fmt(r.get('errors'), 'd')} | {fmt(r.get('foreign_cpu_pct'))}"
                + (f" ({r['busy_before_pct']:.0f})" if "busy_before_pct" in r else "")
                + " |"
            )
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    load = report.get("load_avg_start")
    md = [
        f"# etcd vs metaledger — {report['date']}",
        "",
        f"Machine: {m['nproc']} CPUs, {m['cpu_model']}, kernel {m['kernel']}, Python {m['python']}"
        + (
            f"; load average at the start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}."
            if load
            else "."
        ),
        f"etcd: {report['systems'].get('etcd', {}).get('version', '-')}; "
        f"3 members each on 127.0.0.1 (the noop systems: 1 process); load: `nameserver.loadgen` "
        f"(grpc.aio, one request in flight per client), {report['warmup_s']:g} s warm-up, "
        f"{report['duration_s']:g} s measured, {report['value_size']} B values, "
        f"target: {report['target']}"
        + (
            "; interleaved: all systems up at once, each row run on each system in turn."
            if report.get("interleaved")
            else "; one system at a time."
        ),
        "Ratio a / b = a's ops/s ÷ b's. `grpc-*-noop` = `bench.noop_kv`, a gRPC server whose "
        "handlers return canned answers: the ceiling of a Python gRPC server on this machine. "
        "CPU per op: client process / sum of the servers. TCP segments per op: client→server and "
        "server→client over the load generator's own connections (`TCP_INFO`), then the "
        "machine's InSegs (`/proc/net/snmp`; on loopback every segment once, both directions, "
        "the members' peer traffic and other processes' included) over the window ÷ ops. "
        "Foreign CPU: "
        "the machine's busy time not spent by the client or the servers, in % of one core "
        "(high values mean a shared, noisy machine).",
        "",
        table(report),
        "",
        detail_table(report),
        "",
    ]
    return "\n".join(md)


# --------------------------------------------------------------------------- main


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.compare_etcd",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rows", type=parse_rows, default=os.environ.get("COMPARE_ROWS", DEFAULT_ROWS))
    p.add_argument("--duration", type=float, default=_env_float("COMPARE_DURATION", 10.0))
    p.add_argument("--warmup", type=float, default=_env_float("COMPARE_WARMUP", 1.0))
    p.add_argument("--value-size", type=int, default=256)
    p.add_argument("--key-space", type=int, default=10_000)
    p.add_argument("--target", choices=("leader", "all"), default="leader")
    p.add_argument(
        "--systems",
        default="etcd,metaledger",
        help=f"comma-separated, in run order, from: {', '.join(SYSTEMS)}",
    )
    p.add_argument(
        "--quiet-below",
        type=float,
        default=0.0,
        metavar="PCT",
        help="before each row wait until the machine is busy less than PCT%% of a core "
        "(2 s samples; 0: do not wait)",
    )
    p.add_argument(
        "--quiet-wait", type=float, default=120.0, metavar="S", help="wait at most S per row"
    )
    p.add_argument(
        "--noop-workers", type=int, default=4, help="grpc-sync-noop's thread pool (default 4)"
    )
    p.add_argument("--etcd", default=os.environ.get("ETCD", "/usr/bin/etcd"))
    p.add_argument("--etcdctl", default=os.environ.get("ETCDCTL", "etcdctl"))
    p.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    p.add_argument("--max-total", type=float, help="seconds for everything (default: computed)")
    p.add_argument("--keep-data", action="store_true", help="keep the temporary data dirs")
    p.add_argument(
        "--auth",
        action="store_true",
        help="auth on (etcd's, on every system): the load runs as a non-root user with a "
        "key-range role, sending its token on every call",
    )
    p.add_argument(
        "--baseline-tree",
        type=Path,
        default=os.environ.get("COMPARE_BASELINE_TREE"),
        help="checkout whose servers the metaledger-baseline system runs (e.g. "
        "`git worktree add --detach /tmp/before HEAD~3`)",
    )
    p.add_argument(
        "--interleave",
        action="store_true",
        help="start every system first, then run each row on each system in turn (the "
        "systems idle while another is measured): a ratio from runs minutes apart is at "
        "the mercy of a shared machine's drift, one from adjacent runs less so",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if isinstance(args.rows, str):
        args.rows = parse_rows(args.rows)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not systems or set(systems) - set(SYSTEMS) or len(set(systems)) != len(systems):
        print(
            f"compare_etcd: --systems must name some of {', '.join(SYSTEMS)} once each, "
            f"not {args.systems!r}",
            file=sys.stderr,
        )
        return 2
    if args.quiet_below < 0 or args.quiet_wait < 0:
        print("compare_etcd: --quiet-below and --quiet-wait must be >= 0", file=sys.stderr)
        return 2
    if args.noop_workers < 1:
        print(
            f"compare_etcd: --noop-workers must be >= 1, not {args.noop_workers}", file=sys.stderr
        )
        return 2
    if BASELINE_SYSTEMS & set(systems) and not (
        args.baseline_tree and (Path(args.baseline_tree) / "nameserver").is_dir()
    ):
        print(
            "compare_etcd: metaledger-baseline(-gofront) needs --baseline-tree: a checkout of "
            "metaledger",
            file=sys.stderr,
        )
        return 2
    if "etcd" in systems and not (shutil.which(args.etcd) and shutil.which(args.etcdctl)):
        print(f"compare_etcd: need {args.etcd} and {args.etcdctl}", file=sys.stderr)
        return 2
    per_row = args.warmup + args.duration + ROW_OVERHEAD_S + args.quiet_wait
    max_total = args.max_total or len(systems) * (
        2 * STARTUP_S + STOP_GRACE_S * 2 + len(args.rows) * per_row
    )
    started = time.monotonic()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGALRM:
            raise Deadline(f"over the time budget of {max_total:g}s")
        raise KeyboardInterrupt

    previous = {
        sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)
    }
    for sig in previous:
        signal.signal(sig, on_signal)
    signal.setitimer(signal.ITIMER_REAL, max_total)

    report: dict[str, Any] = {
        "date": timestamp(),
        "machine": machine(),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
        "rows_spec": [r.name for r in args.rows],
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "value_size": args.value_size,
        "key_space": args.key_space,
        "target": args.target,
        "systems": {},
        "rows": [{"row": r.name} for r in args.rows],
    }
    report["interleaved"] = args.interleave
    report["auth"] = args.auth
    workdir = Path(tempfile.mkdtemp(prefix="compare_etcd-"))
    running: list[Cluster] = []
    status = 0

    def start(system: str) -> Cluster:
        cluster = start_system(system, args, workdir)
        running.append(cluster)
        if args.auth and system not in NOOP_MODES:
            enable_auth(cluster, args.etcdctl)
        report["systems"][system] = {
            "version": cluster.version,
            "endpoints": cluster.endpoints,
            "leader": cluster.leader,
        }
        print(f"== {system}: leader {cluster.leader}", file=sys.stderr, flush=True)
        return cluster

    def measure(row: Row, entry: dict[str, Any], system: str, cluster: Cluster) -> None:
        quiet = wait_quiet(args.quiet_below, args.quiet_wait) if args.quiet_below > 0 else {}
        budget = max_total - (time.monotonic() - started) - STOP_GRACE_S
        result = {**run_row(row, cluster, args, budget), **quiet}
        entry[system] = result
        shown = result.get("failed") or (
            f"{result['ops_per_s']:.0f} ops/s, p99 {result['p99_ms']:.1f} ms"
        )
        label = f"{row.name} {system}" if args.interleave else row.name
        print(f"   {label:<12} {shown}", file=sys.stderr, flush=True)

    try:
        if args.interleave:
            clusters = {system: start(system) for system in systems}
            for row, entry in zip(args.rows, report["rows"], strict=True):
                for system in systems:
                    measure(row, entry, system, clusters[system])
        else:
            for system in systems:
                cluster = start(system)
                for row, entry in zip(args.rows, report["rows"], strict=True):
                    measure(row, entry, system, cluster)
                cluster.stop()
                running.remove(cluster)
    except KeyboardInterrupt:
        print("compare_etcd: interrupted; stopping what it started", file=sys.stderr)
        status = 130
    except (Deadline, RuntimeError) as exc:
        print(f"compare_etcd: {exc}; stopping what it started", file=sys.stderr)
        status = 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # let the cleanup finish
        for cluster in running:
            cluster.stop()
        if not args.keep_data:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"compare_etcd: data and logs kept in {workdir}", file=sys.stderr)
        for sig, handler in previous.items():  # an ignored SIGTERM would pass to children
            signal.signal(sig, handler)

    for entry in report["rows"]:
        entry["ratios"] = ratios(entry)
        entry["ratio"] = entry["ratios"].get("metaledger / etcd")  # the name earlier reports used
    if any(system in entry for entry in report["rows"] for system in systems):
        json_path, md_path = write_report("compare_etcd", report, markdown(report), args.out_dir)
        print(table(report) + "\n\n" + detail_table(report))
        print(f"\nwrote {json_path} and {md_path}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
