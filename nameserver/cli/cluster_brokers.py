"""``metaledger cluster up --brokers R``: one broker replica group beside the local nodes.

The group is ``broker-a`` (cluster ``DefaultCluster``); replica j (0-based) is
``broker-a-j`` with remoting port ``B+100+10j``, HA port ``B+100+10j+1``, RocketMQ 5 gRPC port
``B+100+10j+2`` and metrics port ``B+100+10j+3`` (docs/operations.md, "Ports": scripts find replica j there without parsing
output), data in ``DIR/broker-a-j``, output in ``DIR/broker-a-j.log``, pid in
``DIR/broker-a-j.pid``. Each replica is a ``metaledger broker`` process talking to the nodes through
their client ports, as any broker would; the nameserver never imports the broker (it runs its
command line).

A group of R >= 2 replicas is a quorum-write group: its policy is set before the replicas
start (totalReplicas R, inSyncReplicas a majority, R // 2 + 1, no automatic degradation) and
every replica runs as ``SYNC_MASTER``, so a send is acknowledged once a majority holds it and
survives the master's death. One replica is an ``ASYNC_MASTER`` with the default policy.
Which replica is master is metaledger's call (the first to register).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO

from nameserver.cli.cluster_restart import is_broker, read_pid, signal_pid, wait_gone
from nameserver.client import Client, ClientError
from nameserver.client.replica_groups import GroupPolicy

HOST = "127.0.0.1"
GROUP = "broker-a"
CLUSTER = "DefaultCluster"
#: the group's ports start this far above the nodes' base port
BROKER_PORT_OFFSET = 100
PORT_STRIDE = 10
STOP_GRACE_S = 10.0
_POLL_S = 0.25
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class BrokerLayout:
    index: int
    id: str
    remoting_port: int
    ha_port: int
    grpc_port: int
    metrics_port: int

    @property
    def address(self) -> str:
        return f"{HOST}:{self.remoting_port}"

    def ports(self) -> dict[str, int]:
        return {
            "remoting": self.remoting_port,
            "ha": self.ha_port,
            "grpc": self.grpc_port,
            "metrics": self.metrics_port,
        }


def broker_layout(replicas: int, base_port: int) -> list[BrokerLayout]:
    if replicas < 0:
        raise ValueError("--brokers must be >= 0")
    first = base_port + BROKER_PORT_OFFSET
    last = first + PORT_STRIDE * max(replicas - 1, 0) + 3
    if replicas and last > 65535:
        raise ValueError(f"broker ports {first}..{last} do not fit in 1..65535")
    return [
        BrokerLayout(
            j,
            f"{GROUP}-{j}",
            first + PORT_STRIDE * j,
            first + PORT_STRIDE * j + 1,
            first + PORT_STRIDE * j + 2,
            first + PORT_STRIDE * j + 3,
        )
        for j in range(replicas)
    ]


def broker_argv(
    b: BrokerLayout,
    endpoints: str,
    data_dir: Path,
    log_level: str = "INFO",
    replicas: int = 1,
    tls: dict[str, str] | None = None,
) -> list[str]:
    """The replica's command line (the same a person would type, as ``-m nameserver.cli``);
    ``tls``: the client library's cacert/cert/key (``cluster up --tls``), as ``--cacert`` …"""
    tls_flags = [a for name, path in (tls or {}).items() for a in (f"--{name}", path)]
    return [
        sys.executable,
        "-m",
        "nameserver.cli",
        "broker",
        "--group",
        GROUP,
        "--cluster",
        CLUSTER,
        "--data-dir",
        str(data_dir / b.id),
        "--listen",
        b.address,
        "--listen-ha",
        f"{HOST}:{b.ha_port}",
        "--listen-grpc",
        f"{HOST}:{b.grpc_port}",
        "--listen-metrics",
        f"{HOST}:{b.metrics_port}",
        "--endpoints",
        endpoints,
        "--broker-role",
        "SYNC_MASTER" if replicas > 1 else "ASYNC_MASTER",
        "--log-level",
        log_level,
        *tls_flags,
    ]


def policy(replicas: int) -> GroupPolicy:
    """The group's quorum policy: a majority of R must hold each message."""
    return GroupPolicy(
        total_replicas=replicas,
        in_sync_replicas=replicas // 2 + 1 if replicas > 1 else 1,
        min_in_sync_replicas=1,
    )


def set_policy(endpoints: list[str], replicas: int, tls: dict[str, str] | None = None) -> None:
    with Client(endpoints, timeout_s=5.0, **(tls or {})) as client:
        client.replica_set_policy(GROUP, policy(replicas), cluster_name=CLUSTER)


class Layout(Protocol):
    """A process of the local cluster and the ports it will bind (a node or a replica)."""

    @property
    def id(self) -> str: ...

    def ports(self) -> dict[str, int]: ...


def busy_ports(layouts: Sequence[Layout]) -> list[str]:
    """Ports of the layouts that something else already holds."""
    busy = []
    for layout in layouts:
        for name, port in layout.ports().items():
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((HOST, port))
                except OSError:
                    busy.append(f"{port} ({layout.id} {name})")
    return busy


@dataclass
class RunningBroker:
    layout: BrokerLayout
    proc: subprocess.Popen[bytes]
    log_path: Path
    pid_path: Path
    reported: bool = False


def spawn(
    name: str, argv: list[str], data_dir: Path, env_extra: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """Start one process of the local cluster (a node or a broker replica): this tree on its
    PYTHONPATH, output to ``DIR/<name>.log``, pid in ``DIR/<name>.pid``."""
    env = dict(os.environ)
    env.update(env_extra or {})
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PROJECT_ROOT), env.get("PYTHONPATH")]))
    log_path = data_dir / f"{name}.log"
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=env
        )
    pid_path = data_dir / f"{name}.pid"
    pid_path.write_text(f"{proc.pid}\n")
    return proc, log_path, pid_path


def start(
    b: BrokerLayout,
    endpoints: str,
    data_dir: Path,
    log_level: str,
    replicas: int,
    tls: dict[str, str] | None = None,
) -> RunningBroker:
    argv = broker_argv(b, endpoints, data_dir, log_level, replicas, tls)
    return RunningBroker(b, *spawn(b.id, argv, data_dir))


def _restarted_pid(r: RunningBroker) -> int:
    """The pid of a replica ``cluster restart`` started in place of this one (0: none)."""
    pid = read_pid(r.pid_path)
    data_dir = str(r.log_path.parent / r.layout.id)
    return pid if pid and pid != r.proc.pid and is_broker(pid, data_dir) else 0


def stop(running: list[RunningBroker], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to every replica (one ``cluster restart`` started too), SIGKILL at the grace."""
    adopted = [pid for r in running if (pid := _restarted_pid(r))]
    for r in running:
        if r.proc.poll() is None:
            r.proc.send_signal(signal.SIGTERM)
    for pid in adopted:
        signal_pid(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for r in running:
        try:
            r.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(
                f"metaledger: {r.layout.id} (pid {r.proc.pid}) ignored SIGTERM; killing it",
                file=sys.stderr,
            )
            r.proc.kill()
            r.proc.wait()
        if not _restarted_pid(r):
            r.pid_path.unlink(missing_ok=True)
    for pid in adopted:
        if not wait_gone(pid, max(0.0, deadline - time.monotonic())):
            signal_pid(pid, signal.SIGKILL)


def report_deaths(running: list[RunningBroker], err: TextIO) -> None:
    for r in running:
        code = r.proc.poll()
        if code is not None and not r.reported:
            r.reported = True
            if not _restarted_pid(r):
                r.pid_path.unlink(missing_ok=True)
            print(
                f"metaledger: broker {r.layout.id} (pid {r.proc.pid}) exited with code {code};"
                f" see {r.log_path}; to start it again: metaledger cluster restart"
                f" {r.layout.id} --data-dir {r.log_path.parent}",
                file=err,
            )


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


def wait_ready(
    running: list[RunningBroker],
    endpoints: list[str],
    stop_event: threading.Event,
    timeout_s: float,
    tls: dict[str, str] | None = None,
) -> str:
    """Wait until the group has a master and every replica is alive and in its in-sync set
    (a quorum write can be acknowledged); "" when ready, else why not."""
    deadline = time.monotonic() + timeout_s
    why = "no replica registered yet"
    with Client(endpoints, timeout_s=1.0, **(tls or {})) as client:
        while not stop_event.is_set():
            for r in running:
                if r.proc.poll() is not None:
                    return (
                        f"broker {r.layout.id} exited with code {r.proc.returncode} during"
                        f" startup; last lines of {r.log_path}:\n{_tail(r.log_path)}"
                    )
            try:
                group = client.replica_group(GROUP)
                in_sync = {x.address for x in group.replicas if x.alive and x.in_sync}
                missing = [r.layout.id for r in running if r.layout.address not in in_sync]
                if not missing and group.master_id:
                    return ""
                why = (
                    f"replicas not in {GROUP}'s in-sync set yet: {', '.join(missing)}"
                    if missing
                    else f"{GROUP} has no master yet"
                )
            except ClientError as exc:
                why = str(exc)
            if time.monotonic() >= deadline:
                return f"broker group not up within {timeout_s:g}s: {why}"
            stop_event.wait(_POLL_S)
    return "interrupted"
