"""``metaledger cluster restart NAME --data-dir DIR``: start one node or broker replica of ``cluster up`` again.

``cluster up`` records each node's ``serve`` arguments and client endpoint in
``DIR/cluster.json``. ``cluster restart n1`` stops ``n1`` if it still runs (the pid in
``DIR/n1.pid``, checked to be that node: SIGTERM, then SIGKILL after a grace period), starts it
again with the recorded arguments in the background (output appended to ``DIR/n1.log``, pid in
``DIR/n1.pid``) while the other nodes keep running, and waits until it answers and knows a
leader. The node it starts is not a child of ``cluster up``; ``cluster up`` still stops it on
Ctrl-C (it finds it through the pid file). A broker replica of ``cluster up --brokers``
(``broker-a-0``, ...) restarts the same way, and is back once it is alive in its replica
group again (it rejoins as a slave when another replica became master meanwhile).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nameserver.cli import certs
from nameserver.cli._common import (
    UsageError,
    output_parent,
    positive_float,
    printer,
    timeout_s,
)
from nameserver.cli.exitcodes import ExitCode
from nameserver.client import Client, ClientError

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers

CLUSTER_FILE = "cluster.json"
STOP_GRACE_S = 10.0
_POLL_S = 0.25
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: set by ``cluster up`` for its children; a restarted node must not die with this command
_PARENT_PID_ENV = "METALEDGER_PARENT_PID"


def write_cluster_file(
    data_dir: Path,
    argv: dict[str, list[str]],
    client: dict[str, str],
    brokers: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Record each node's ``serve`` arguments (after ``python -m nameserver.cli``) and client
    endpoint, and each broker replica's arguments, group and address, for
    :func:`run_cluster_restart`."""
    doc = {
        "nodes": {nid: {"argv": argv[nid], "client": client[nid]} for nid in argv},
        "brokers": brokers or {},
    }
    tmp = data_dir / (CLUSTER_FILE + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(data_dir / CLUSTER_FILE)


def read_cluster_file(data_dir: Path) -> dict[str, dict[str, Any]]:
    path = data_dir / CLUSTER_FILE
    try:
        doc = json.loads(path.read_text())
        nodes = doc["nodes"]
    except FileNotFoundError:
        raise UsageError(
            f"{path} not found: DIR must be the --data-dir of 'metaledger cluster up'"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{path}: unreadable: {exc}") from None
    if not isinstance(nodes, dict):
        raise UsageError(f"{path}: unreadable: no node table")
    return nodes


def read_brokers(data_dir: Path) -> dict[str, dict[str, Any]]:
    """The broker replicas ``cluster up --brokers`` recorded (none for an older file)."""
    try:
        brokers = json.loads((data_dir / CLUSTER_FILE).read_text()).get("brokers", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return brokers if isinstance(brokers, dict) else {}


def is_broker(pid: int, data_dir: str) -> bool:
    """Whether ``pid`` is a live ``broker`` process with ``--data-dir data_dir``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if stat.rpartition(")")[2].split()[:1] == ["Z"]:
        return False
    return b"broker" in cmdline and data_dir.encode() in cmdline


def read_pid(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 0


def is_node(pid: int, node_id: str) -> bool:
    """Whether ``pid`` is a live (not zombie) ``serve --id node_id`` process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if stat.rpartition(")")[2].split()[:1] == ["Z"]:
        return False
    return b"serve" in cmdline and b"--id" in cmdline and node_id.encode() in cmdline


def signal_node(pid: int, node_id: str, signum: int) -> None:
    if is_node(pid, node_id):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` has exited (or is a zombie); True if it did within ``timeout``."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:1]
        except OSError:
            return True
        if state == ["Z"] or time.monotonic() >= deadline:
            return state == ["Z"]
        time.sleep(0.05)
    return True


def stop_node(pid: int, node_id: str) -> None:
    """Stop node ``node_id`` at ``pid`` if it is that node: SIGTERM, SIGKILL after a grace."""
    signal_node(pid, node_id, signal.SIGTERM)
    if not wait_gone(pid, STOP_GRACE_S):
        print(f"metaledger: {node_id} (pid {pid}) ignored SIGTERM; killing it", file=sys.stderr)
        signal_node(pid, node_id, signal.SIGKILL)
        wait_gone(pid, STOP_GRACE_S)


def _start_detached(data_dir: Path, node_id: str, argv: list[str]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != _PARENT_PID_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PROJECT_ROOT), env.get("PYTHONPATH")]))
    with open(data_dir / f"{node_id}.log", "ab") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "nameserver.cli", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # outlives this command, and its terminal's Ctrl-C
        )


def _wait_serving(
    proc: subprocess.Popen[bytes],
    endpoint: str,
    timeout: float,
    per_call_s: float,
    tls: dict[str, str],
) -> tuple[str, str]:
    """(leader, "") once the node answers and knows a leader, else ("", why not)."""
    deadline = time.monotonic() + timeout
    why = "no answer yet"
    with Client([endpoint], timeout_s=per_call_s, **tls) as client:
        while True:
            if proc.poll() is not None:
                return "", f"it exited with code {proc.returncode}"
            try:
                status = client.status()
                if status.leader:
                    return status.leader, ""
                why = "it answers but knows no leader yet"
            except ClientError as exc:
                why = str(exc)
            if time.monotonic() >= deadline:
                return "", f"not serving within {timeout:g}s: {why}"
            time.sleep(_POLL_S)


def run_cluster_restart(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    nodes = read_cluster_file(data_dir)
    node = nodes.get(args.node)
    brokers = read_brokers(data_dir)
    if node is None and args.node in brokers:
        endpoints = [str(n["client"]) for n in nodes.values()]
        return _restart_broker(args, data_dir, brokers[args.node], endpoints)
    if node is None:
        known = ", ".join(sorted([*nodes, *brokers]))
        raise UsageError(f"cluster restart: no node {args.node!r} in {data_dir} (nodes: {known})")
    pid_path = data_dir / f"{args.node}.pid"
    old = read_pid(pid_path)
    if old and is_node(old, args.node):
        stop_node(old, args.node)
    proc = _start_detached(data_dir, args.node, [str(a) for a in node["argv"]])
    pid_path.write_text(f"{proc.pid}\n")
    log = data_dir / f"{args.node}.log"
    tls = (  # a cluster up --tls node: ask it with the cluster's client certificate
        certs.client_files(str(data_dir / certs.TLS_DIR)) if "--cert-file" in node["argv"] else {}
    )
    leader, why = _wait_serving(
        proc, str(node["client"]), args.startup_timeout, min(timeout_s(args), 1.0), tls
    )
    if why:
        print(f"metaledger: cluster restart: {args.node}: {why}; see {log}", file=sys.stderr)
        return ExitCode.ERROR
    doc = {"node": args.node, "pid": proc.pid, "client": node["client"], "leader": leader}
    text = (
        f"{args.node} restarted (pid {proc.pid}, client {node['client']}, leader {leader});"
        f" output in {log}"
    )
    printer(args).report(doc, text)
    return ExitCode.OK


def _restart_broker(
    args: argparse.Namespace, data_dir: Path, broker: dict[str, Any], endpoints: list[str]
) -> int:
    name, group, address = args.node, str(broker["group"]), str(broker["address"])
    pid_path = data_dir / f"{name}.pid"
    old = read_pid(pid_path)
    if old and is_broker(old, str(broker["data_dir"])):
        signal_pid(old, signal.SIGTERM)
        if not wait_gone(old, STOP_GRACE_S):
            signal_pid(old, signal.SIGKILL)
            wait_gone(old, STOP_GRACE_S)
    proc = _start_detached(data_dir, name, [str(a) for a in broker["argv"]])
    pid_path.write_text(f"{proc.pid}\n")
    log = data_dir / f"{name}.log"
    deadline = time.monotonic() + args.startup_timeout
    why = "not registered yet"
    role = ""
    tls = (  # a cluster up --tls broker: ask with the cluster's client certificate
        certs.client_files(str(data_dir / certs.TLS_DIR)) if "--cacert" in broker["argv"] else {}
    )
    with Client(endpoints, timeout_s=min(timeout_s(args), 1.0), **tls) as client:
        while True:
            if proc.poll() is not None:
                why = f"it exited with code {proc.returncode}"
                break
            try:
                g = client.replica_group(group)
                mine = [r for r in g.replicas if r.address == address and r.alive]
                if mine:
                    role = "master" if g.master_address == address else "slave"
                    why = ""
                    break
                why = f"not alive in {group} yet"
            except ClientError as exc:
                why = str(exc)
            if time.monotonic() >= deadline:
                why = f"not alive in {group} within {args.startup_timeout:g}s: {why}"
                break
            time.sleep(_POLL_S)
    if why:
        print(f"metaledger: cluster restart: {name}: {why}; see {log}", file=sys.stderr)
        return ExitCode.ERROR
    doc = {"broker": name, "pid": proc.pid, "address": address, "role": role}
    text = f"{name} restarted (pid {proc.pid}, {address}, {role} of {group}); output in {log}"
    printer(args).report(doc, text)
    return ExitCode.OK


def signal_pid(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def register_restart(actions: Subparsers, common: argparse.ArgumentParser) -> None:
    p = actions.add_parser(
        "restart",
        parents=[output_parent()],
        help="start one node of 'cluster up' again, with the flags it was started with",
        description=__doc__.split("\n\n", 1)[1].replace("``", "'") if __doc__ else None,
    )
    p.add_argument(
        "node",
        metavar="NAME",
        help="the node's id, e.g. n1, or a broker replica's, e.g. broker-a-0",
    )
    p.add_argument(
        "--data-dir", required=True, metavar="DIR", help="the --data-dir given to 'cluster up'"
    )
    p.add_argument(
        "--startup-timeout",
        type=positive_float,
        default=60.0,
        metavar="SECONDS",
        help="give up if the node does not serve and know a leader by then (default 60)",
    )
    p.set_defaults(run=run_cluster_restart)
