"""``metaledger cluster up``: a local cluster of N nodes in the foreground.

(A little over 500 lines: the layout, the start, the wait and the stop of one command; its
broker group and ``cluster restart`` have their own modules.)

Node i (0-based) is ``n{i}`` on 127.0.0.1 with client port ``B+10i``, peer ``B+10i+1``,
remoting ``B+10i+2`` and metrics ``B+10i+3`` (scripts rely on it), data in ``DIR/n{i}``,
output in ``DIR/n{i}.log`` and its pid in ``DIR/n{i}.pid`` while it runs; each node's
``serve`` command line is recorded in ``DIR/cluster.json`` for ``cluster restart``. On
SIGINT/SIGTERM every node gets SIGTERM, then SIGKILL after a grace period (a node that
``cluster restart`` started too). The nodes also stop if this process dies (Linux
``PR_SET_PDEATHSIG``, see ``serve``).

The Raft peer ports authenticate with a password made for this cluster on its first start:
``DIR/cluster-password`` (mode 0600, a random token; kept and reused by later starts).
Every node gets its path (``--cluster-password-file``), never the password itself on a
command line that ``ps`` shows. The cluster's ``--initial-cluster-token`` is made the same
way (``DIR/cluster-token``, random), so two clusters never share a cluster id.

``--tls``: a throwaway CA and a certificate per node and one for the command line, made on
the first start in ``DIR/tls`` (:mod:`nameserver.cli.certs`) and reused later; every port
serves TLS and requires a client certificate; the line printed at start says how to reach
the cluster with ``metaledger`` and ``etcdctl``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from nameserver.cli import certs
from nameserver.cli import cluster_brokers as brokers_state
from nameserver.cli import cluster_restart as nodes_state
from nameserver.cli._common import (
    output,
    output_parent,
    positive_float,
    positive_int,
    printer,
)
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.serve import LOG_LEVELS, PARENT_PID_ENV
from nameserver.cli.status import split_results
from nameserver.client import DEFAULT_CLIENT_PORT, Client, ClientError, NodeStatus

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers

HOST = "127.0.0.1"
#: node n0's client port is the CLI's default endpoint's port
DEFAULT_BASE_PORT = DEFAULT_CLIENT_PORT
PORT_STRIDE = 10
STOP_GRACE_S = 10.0
_POLL_S = 0.25
#: the cluster's Raft password, in its data dir (mode 0600)
PASSWORD_FILE = "cluster-password"
#: the cluster's --initial-cluster-token (its cluster id derives from it), in its data dir
TOKEN_FILE = "cluster-token"
#: ``--tls``: the throwaway CA and certificates, in the data dir (nameserver.cli.certs)
TLS_DIR = certs.TLS_DIR


@dataclass(frozen=True)
class NodeLayout:
    index: int
    id: str
    client_port: int
    peer_port: int
    remoting_port: int
    metrics_port: int

    @property
    def client_endpoint(self) -> str:
        return f"{HOST}:{self.client_port}"

    @property
    def peer_address(self) -> str:
        return f"{HOST}:{self.peer_port}"

    def ports(self) -> dict[str, int]:
        return {
            "client": self.client_port,
            "peer": self.peer_port,
            "remoting": self.remoting_port,
            "metrics": self.metrics_port,
        }


def layout(nodes: int, base_port: int = DEFAULT_BASE_PORT) -> list[NodeLayout]:
    if nodes < 1:
        raise ValueError("a cluster needs at least one node")
    last = base_port + PORT_STRIDE * (nodes - 1) + 3
    if base_port < 1 or last > 65535:
        raise ValueError(f"ports {base_port}..{last} do not fit in 1..65535")
    return [
        NodeLayout(i, f"n{i}", *(base_port + PORT_STRIDE * i + k for k in range(4)))
        for i in range(nodes)
    ]


def initial_cluster(nodes: list[NodeLayout]) -> str:
    return ",".join(f"{n.id}={n.peer_address}" for n in nodes)


def cluster_token(data_dir: Path, node_ids: list[str]) -> str:
    """The cluster's ``--initial-cluster-token``: ``DIR/cluster-token``, made on the first
    start (random, as the password is, so no two clusters share a cluster id) and reused
    later. Nodes that an older ``cluster up`` started keep the token their data dirs record
    (``serve``'s default then). OSError if the file cannot be read or written;
    :class:`~nameserver.startup.StartupError` if a node's identity cannot be read."""
    from nameserver.startup import read_identity

    path = data_dir / TOKEN_FILE
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token
    recorded = (read_identity(str(data_dir / nid)) for nid in node_ids)
    token = next((i.cluster_token for i in recorded if i is not None), "")
    token = token or f"cluster-{secrets.token_hex(8)}"
    path.write_text(token + "\n")
    return token


def serve_argv(
    node: NodeLayout,
    nodes: list[NodeLayout],
    data_dir: Path,
    log_level: str = "INFO",
    consensus: str | None = None,
    tls: bool = False,
    token: str = "",
    grpc_front: str | None = None,
) -> list[str]:
    engine = ["--consensus", consensus] if consensus else []
    if grpc_front:
        engine += ["--grpc-front", grpc_front]
    if token:
        engine += ["--initial-cluster-token", token]
    password_file = data_dir / PASSWORD_FILE
    if tls:  # the same pair on every port; client certificates required everywhere
        cert, key, ca = (str(data_dir / TLS_DIR / f) for f in certs.node_files(node.id))
        for prefix in ("", "peer-"):
            engine += [f"--{prefix}cert-file", cert, f"--{prefix}key-file", key]
            engine += [f"--{prefix}trusted-ca-file", ca, f"--{prefix}client-cert-auth"]
    return [
        sys.executable,
        "-m",
        "nameserver.cli",
        "serve",
        "--id",
        node.id,
        "--data-dir",
        str(data_dir / node.id),
        "--listen-client",
        node.client_endpoint,
        "--listen-peer",
        node.peer_address,
        "--listen-remoting",
        f"{HOST}:{node.remoting_port}",
        "--listen-metrics",
        f"{HOST}:{node.metrics_port}",
        "--initial-cluster",
        initial_cluster(nodes),
        "--cluster-password-file",
        str(password_file),
        "--log-level",
        log_level,
        *engine,
    ]


#: ports of the layout that something else already holds
busy_ports = brokers_state.busy_ports


@dataclass
class _Running:
    node: NodeLayout
    proc: subprocess.Popen[bytes]
    log_path: Path
    pid_path: Path
    reported: bool = False


def _start(
    node: NodeLayout,
    nodes: list[NodeLayout],
    data_dir: Path,
    log_level: str,
    consensus: str | None = None,
    tls: bool = False,
    token: str = "",
    grpc_front: str | None = None,
) -> _Running:
    argv = serve_argv(node, nodes, data_dir, log_level, consensus, tls, token, grpc_front)
    parent = {PARENT_PID_ENV: str(os.getpid())}
    proc, log_path, pid_path = brokers_state.spawn(node.id, argv, data_dir, parent)
    return _Running(node, proc, log_path, pid_path)


def _stop(running: list[_Running], grace_s: float = STOP_GRACE_S) -> None:
    adopted = [(r, pid) for r in running if (pid := _restarted_pid(r))]
    for r in running:
        if r.proc.poll() is None:
            r.proc.send_signal(signal.SIGTERM)
    for r, pid in adopted:
        nodes_state.signal_node(pid, r.node.id, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for r in running:
        try:
            r.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(
                f"metaledger: {r.node.id} (pid {r.proc.pid}) ignored SIGTERM; killing it",
                file=sys.stderr,
            )
            r.proc.kill()
            r.proc.wait()
        r.pid_path.unlink(missing_ok=True)
    for r, pid in adopted:
        if not nodes_state.wait_gone(pid, max(0.0, deadline - time.monotonic())):
            nodes_state.signal_node(pid, r.node.id, signal.SIGKILL)


def _restarted_pid(r: _Running) -> int:
    """The pid of a node ``cluster restart`` started in place of this one (0: none)."""
    pid = nodes_state.read_pid(r.pid_path)
    if pid and pid != r.proc.pid and nodes_state.is_node(pid, r.node.id):
        return pid
    return 0


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def _report_deaths(running: list[_Running], err: TextIO) -> None:
    for r in running:
        code = r.proc.poll()
        if code is not None and not r.reported:
            r.reported = True
            if nodes_state.read_pid(r.pid_path) == r.proc.pid:  # not a restarted node's
                r.pid_path.unlink(missing_ok=True)
            print(
                f"metaledger: node {r.node.id} (pid {r.proc.pid}) exited with code {code}; "
                f"see {r.log_path}; to start it again: metaledger cluster restart "
                f"{r.node.id} --data-dir {r.log_path.parent}",
                file=err,
            )


def _cluster_ready(statuses: list[NodeStatus], expected: int) -> bool:
    leaders = {s.leader for s in statuses}
    return len(statuses) == expected and len(leaders) == 1 and "" not in leaders


def _unannounced(endpoints: list[str], tls: dict[str, str]) -> list[str] | None:
    """Hex ids of the members whose name and client URL are missing from some node's member
    list (``status`` through that node could not reach them); None if a list is unreadable."""
    missing: set[str] = set()
    for endpoint in endpoints:
        try:
            with Client([endpoint], timeout_s=1.0, **tls) as one:
                members = one.members()
        except ClientError:
            return None
        missing.update(f"{m.member_id:x}" for m in members if not (m.name and m.client_urls))
    return sorted(missing)


def _wait_until_up(
    running: list[_Running], stop: threading.Event, timeout_s: float, tls: dict[str, str]
) -> tuple[list[NodeStatus], str]:
    """Poll Admin.Status until every node answers, all agree on a leader and every member
    has announced its name and client URL.

    Returns the statuses and "" when up, else the last statuses and why not.
    """
    endpoints = [r.node.client_endpoint for r in running]
    deadline = time.monotonic() + timeout_s
    why = "no answer yet"
    nodes: list[NodeStatus] = []
    with Client(endpoints, timeout_s=1.0, **tls) as client:
        while not stop.is_set():
            dead = [r for r in running if r.proc.poll() is not None]
            if dead:
                r = dead[0]
                return nodes, (
                    f"node {r.node.id} exited with code {r.proc.returncode} during startup; "
                    f"last lines of {r.log_path}:\n{_tail(r.log_path)}"
                )
            nodes, errors = split_results(client.status_all())
            ready = _cluster_ready(nodes, len(running))
            unnamed = _unannounced(endpoints, tls) if ready else None
            if unnamed == []:
                return nodes, ""
            if unnamed:
                why = f"members not announced yet: {', '.join(unnamed)}"
            elif errors:
                why = "; ".join(str(e) for e in errors)
            else:
                why = "no leader agreed on: " + ", ".join(
                    f"{n.id}→{n.leader or '?'}" for n in nodes
                )
            if time.monotonic() >= deadline:
                return (
                    nodes,
                    f"not up within {timeout_s:g}s: {why}; logs in {running[0].log_path.parent}",
                )
            stop.wait(_POLL_S)
    return nodes, "interrupted"


def run_cluster_up(args: argparse.Namespace) -> int:
    try:
        nodes = layout(args.nodes, args.base_port)
        brokers = brokers_state.broker_layout(args.brokers, args.base_port)
    except ValueError as exc:
        print(f"metaledger: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    busy = busy_ports(nodes) + brokers_state.busy_ports(brokers)
    if busy:
        print(
            f"metaledger: cluster up: ports in use: {', '.join(busy)} (--base-port moves them)",
            file=sys.stderr,
        )
        return ExitCode.CANNOT_START
    from nameserver.startup import StartupError, prepare_data_dir
    from raftlog import ConfigError  # here: raftlog is not cheap to import for every command
    from raftlog.native.auth import create_password_file

    data_dir = Path(args.data_dir)
    try:
        ids = [n.id for n in nodes] + [b.id for b in brokers]
        for path in (data_dir, *(data_dir / i for i in ids)):
            prepare_data_dir(str(path))
        token = cluster_token(data_dir, [n.id for n in nodes])
    except StartupError as exc:
        print(f"metaledger: cluster up: {exc}", file=sys.stderr)
        return ExitCode.CANNOT_START
    except OSError as exc:
        print(f"metaledger: cluster up: {data_dir / TOKEN_FILE}: {exc}", file=sys.stderr)
        return ExitCode.CANNOT_START
    # serve_argv's, after data_dir
    node_flags = (args.log_level, args.consensus, args.tls, token, args.grpc_front)
    endpoints = ",".join(n.client_endpoint for n in nodes)
    # --tls: the brokers connect with the command line's client certificate
    broker_tls = certs.client_files(str(data_dir / TLS_DIR)) if args.tls else {}
    nodes_state.write_cluster_file(
        data_dir,
        {n.id: serve_argv(n, nodes, data_dir, *node_flags)[3:] for n in nodes},
        {n.id: n.client_endpoint for n in nodes},
        {
            b.id: {
                "argv": brokers_state.broker_argv(
                    b, endpoints, data_dir, args.log_level, len(brokers), broker_tls
                )[3:],
                "group": brokers_state.GROUP,
                "address": b.address,
                "data_dir": str(data_dir / b.id),
            }
            for b in brokers
        },
    )
    try:
        create_password_file(data_dir / PASSWORD_FILE)  # or reuse the one it holds
    except ConfigError as exc:  # it cannot be read
        print(f"metaledger: cluster up: {str(exc).removeprefix(exc.field + ': ')}", file=sys.stderr)
        return ExitCode.CANNOT_START

    tls: dict[str, str] = {}
    if args.tls:
        try:
            tls = certs.ensure_ca(str(data_dir / TLS_DIR), [n.id for n in nodes])
        except OSError as exc:
            print(f"metaledger: cluster up: certificates: {exc}", file=sys.stderr)
            return ExitCode.CANNOT_START

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    running: list[_Running] = []
    group: list[brokers_state.RunningBroker] = []
    try:
        for node in nodes:
            running.append(_start(node, nodes, data_dir, *node_flags))
        statuses, why = _wait_until_up(running, stop, args.startup_timeout, tls)
        if stop.is_set():
            return ExitCode.OK
        if why:
            print(f"metaledger: cluster {why}", file=sys.stderr)
            return ExitCode.ERROR
        if brokers:
            try:
                brokers_state.set_policy(endpoints.split(","), len(brokers), tls)
            except ClientError as exc:
                print(f"metaledger: cluster up: broker group policy: {exc}", file=sys.stderr)
                return ExitCode.ERROR
        for b in brokers:
            group.append(
                brokers_state.start(b, endpoints, data_dir, args.log_level, len(brokers), tls)
            )
        if group:
            why = brokers_state.wait_ready(
                group, endpoints.split(","), stop, args.startup_timeout, tls
            )
            if stop.is_set():
                return ExitCode.OK
            if why:
                print(f"metaledger: cluster {why}", file=sys.stderr)
                return ExitCode.ERROR
        printer(args).status(statuses)
        line = f"cluster up: {len(nodes)} nodes, endpoints {endpoints}"
        if group:
            addrs = ",".join(b.address for b in brokers)
            line += f"; broker group {brokers_state.GROUP}: {addrs}"
        line += " — Ctrl-C to stop"
        if tls:
            line += "\n" + certs.how_to_reach(endpoints, tls)
        print(line, file=sys.stderr if output(args) == "json" else sys.stdout, flush=True)
        while not stop.wait(0.5):
            _report_deaths(running, sys.stderr)
            brokers_state.report_deaths(group, sys.stderr)
            if all(r.reported and not _restarted_pid(r) for r in running):
                print("metaledger: every node has exited", file=sys.stderr)
                return ExitCode.ERROR
        return ExitCode.OK
    finally:
        brokers_state.stop(group)  # before the nodes: they unregister through them
        _stop(running)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


UP_HELP = f"""\
Start N nodes on 127.0.0.1 and stay in the foreground; Ctrl-C stops them all.

Node i is n<i>: client port B+10i, peer B+10i+1, remoting B+10i+2, metrics B+10i+3, with
B = --base-port (default {DEFAULT_BASE_PORT}: n0's client port is the CLI's default endpoint,
so 'metaledger status' needs no --endpoints). Node i keeps its data in DIR/n<i>, its output
in DIR/n<i>.log and its pid in DIR/n<i>.pid. The cluster's Raft password is made on the first
start in DIR/{PASSWORD_FILE} (mode 0600) and reused later; nodes get its path, never the
password. So is its --initial-cluster-token, in DIR/{TOKEN_FILE} (random: no two clusters
share a cluster id). Each node's command line is kept in DIR/cluster.json, so one node can
be started again while the others run:

  metaledger cluster restart n1 --data-dir DIR
"""


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser("cluster", help="a local cluster for development")
    actions = group.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up",
        parents=[output_parent()],
        help="start N nodes on 127.0.0.1 and stay in the foreground",
        description=UP_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    up.add_argument("--nodes", type=positive_int, default=3, help="number of nodes (default 3)")
    up.add_argument(
        "--data-dir", required=True, metavar="DIR", help="node i keeps its data in DIR/n<i>"
    )
    up.add_argument(
        "--base-port",
        type=positive_int,
        default=DEFAULT_BASE_PORT,
        help=f"node i listens on B+10i..B+10i+3 (default {DEFAULT_BASE_PORT})",
    )
    up.add_argument(
        "--startup-timeout",
        type=positive_float,
        default=60.0,
        metavar="SECONDS",
        help="give up if no leader is agreed on by then (default 60)",
    )
    up.add_argument(
        "--brokers",
        type=int,
        default=0,
        metavar="R",
        help=(
            f"also start broker group {brokers_state.GROUP} of R replicas: replica j listens on"
            " B+100+10j (remoting), +1 (HA), +3 (metrics), data in DIR/broker-a-<j>"
        ),
    )
    up.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help="the nodes' log level (default INFO; DEBUG also logs tracebacks)",
    )
    up.add_argument(
        "--consensus",
        choices=("native", "pysyncobj"),
        help="the nodes' consensus engine (default: serve's, i.e. native)",
    )
    up.add_argument(
        "--tls",
        action="store_true",
        help=f"make a throwaway CA and certificates in DIR/{TLS_DIR} (kept for later starts) "
        "and serve TLS on every port, client certificates required (docs/tls.md)",
    )
    up.add_argument(
        "--grpc-front",
        choices=("python", "go"),
        help="what serves the nodes' client ports (default: serve's, i.e. python; go: the Go "
        "gRPC front, docs/operations.md; not with --tls yet)",
    )
    up.set_defaults(run=run_cluster_up)
    nodes_state.register_restart(actions, common)
