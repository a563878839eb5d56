"""The process side of the broker benchmarks: one metaledger node and a broker replica group.

For one mode of ``MODES`` (issue 17's performance section: one replica, async replication,
sync 2 replicas, quorum 2 of 3) ``BrokerGroup.start``:

1. runs ``metaledger cluster up --nodes 1 --base-port B --data-dir D/meta`` (foreground
   process; SIGTERM to it stops its node);
2. starts replica 0 with :func:`replica_argv` (``metaledger broker --group broker-a
   --data-dir ... --listen 127.0.0.1:PORT --endpoints ...``, HA on PORT+1 by RocketMQ's
   convention) and waits until metaledger names it master: metaledger assigns broker ids and
   the first replica of a group to register becomes its master (there is no "--broker-id 0
   means master");
3. sets the group's quorum policy, ``metaledger replica-group policy broker-a ...``
   (research/broker.md §6.1: totalReplicas, inSyncReplicas, minInSyncReplicas), then starts
   the other replicas, each its own process, and waits until the in-sync set holds
   ``inSyncReplicas`` of them;
4. creates the topic once the group has registered (``metaledger route topic create``) and
   finds the master's address in the group (``Client.replica_group``), as clients find it in
   the route (broker id 0).

``stop`` sends SIGTERM to every process it started, by PID, then SIGKILL after a grace period;
``kill`` sends one replica SIGKILL (the failover benchmark). The command lines are plain
functions (:func:`replica_argv`, :func:`policy_argv`) so they can follow the broker CLI's
flags as it settles.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness import free_ports, wait_until

HOST = "127.0.0.1"
GROUP = "broker-a"
CLUSTER = "DefaultCluster"
TOPIC = "BenchTopic"
ROOT = Path(__file__).resolve().parents[1]
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class Mode:
    """One broker configuration under test."""

    name: str
    replicas: int
    role: str  # --broker-role of the master (RocketMQ's brokerRole)
    in_sync_replicas: int  # the group policy's inSyncReplicas (= minInSyncReplicas)
    what: str


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("single", 1, "ASYNC_MASTER", 1, "one replica"),
        Mode("async", 2, "ASYNC_MASTER", 1, "2 replicas, ASYNC_MASTER"),
        # the same three processes and two replication streams as quorum2of3: only the
        # wait for the acknowledgements differs (what seed 001's "about 10%" compares)
        Mode("async3", 3, "ASYNC_MASTER", 1, "3 replicas, ASYNC_MASTER"),
        Mode("sync2", 2, "SYNC_MASTER", 2, "2 replicas, SYNC_MASTER"),
        Mode("quorum2of3", 3, "SYNC_MASTER", 2, "3 replicas, inSyncReplicas=2"),
    )
}


def cli() -> list[str]:
    """``metaledger`` from this tree (the installed script may be another checkout's)."""
    return [sys.executable, "-m", "nameserver.cli"]


def unavailable_reason() -> str | None:
    """None when ``metaledger broker`` exists; else why the broker systems are skipped."""
    r = subprocess.run(
        [*cli(), "broker", "--help"], capture_output=True, text=True, env=_env(), timeout=60
    )
    if r.returncode != 0:
        return "metaledger broker not available (`metaledger broker --help` failed)"
    return None


def replica_argv(
    mode: Mode, data_dir: Path, port: int, endpoints: str, extra: tuple[str, ...] = ()
) -> list[str]:
    """The command line of one replica of ``mode``'s group (metaledger assigns its id)."""
    return [
        *cli(),
        "broker",
        "--group",
        GROUP,
        "--cluster",
        CLUSTER,
        "--data-dir",
        str(data_dir),
        "--listen",
        f"{HOST}:{port}",
        "--endpoints",
        endpoints,
        "--broker-role",
        mode.role,
        *extra,
    ]


def policy_argv(mode: Mode, endpoints: str) -> list[str]:
    """The group's quorum policy, set before any replica starts."""
    n = str(mode.in_sync_replicas)
    return [
        *cli(),
        "replica-group",
        "policy",
        GROUP,
        "--cluster",
        CLUSTER,
        "--total-replicas",
        str(mode.replicas),
        "--in-sync-replicas",
        n,
        "--min-in-sync-replicas",
        n,
        "--endpoints",
        endpoints,
    ]


def cluster_up_argv(base_port: int, data_dir: Path) -> list[str]:
    """One metaledger node in the foreground: client port B, peer B+1, remoting B+2,
    metrics B+3."""
    return [
        *cli(),
        "cluster",
        "up",
        "--nodes",
        "1",
        "--base-port",
        str(base_port),
        "--data-dir",
        str(data_dir),
    ]


def route_argv(endpoints: str) -> list[str]:
    """The topic's route as JSON: the group's broker id 0 is its master, where clients and
    the load send (RocketMQ's ``MixAll.MASTER_ID``)."""
    return [*cli(), "route", "get", TOPIC, "-w", "json", "--endpoints", endpoints]


def master_of(route: dict[str, Any]) -> str:
    """The master's ``ip:port`` in a route (``metaledger route get -w json``), or ""."""
    for data in route.get("brokerDatas", []):
        if data.get("brokerName") == GROUP:
            return str(data.get("brokerAddrs", {}).get("0", ""))
    return ""


def topic_argv(queues: int, endpoints: str) -> list[str]:
    q = str(queues)
    return [
        *cli(),
        "route",
        "topic",
        "create",
        TOPIC,
        "--broker",
        GROUP,
        "--read-queues",
        q,
        "--write-queues",
        q,
        "--endpoints",
        endpoints,
    ]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _ports_free(ports: list[int]) -> bool:
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((HOST, port))
            except OSError:
                return False
    return True


def free_block(n: int) -> int:
    """The first of ``n`` consecutive free ports (a node's client..metrics, a replica's
    remoting and HA port)."""
    for _ in range(200):
        base = free_ports(1)[0]
        if base + n < 65535 and _ports_free(list(range(base, base + n))):
            return base
    raise RuntimeError(f"no {n} consecutive free ports on {HOST}")


@dataclass
class BrokerGroup:
    mode: Mode
    queues: int = 4
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-broker-")))
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    endpoints: str = ""
    master_address: str = ""
    #: more ``metaledger broker`` flags for every replica (e.g. a short heartbeat timeout)
    extra_args: tuple[str, ...] = ()
    #: replica name (``r0``..) -> its remoting port (HA on port + 1), kept across restarts
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.root / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_env(),
                start_new_session=True,
            )

    def _run(self, argv: list[str], what: str) -> str:
        r = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"{what}: exit {r.returncode}: {(r.stderr or r.stdout).strip()}")
        return r.stdout

    def _alive(self) -> bool:
        for name, p in self.procs.items():
            if p.poll() is not None:
                tail = (self.root / f"{name}.log").read_text(errors="replace").splitlines()[-10:]
                raise AssertionError(f"{name} exited with {p.returncode}:\n" + "\n".join(tail))
        return True

    def start(self, timeout_s: float = 90.0) -> None:
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _group(self) -> Any:
        """The replica group as metaledger has it (``Client.replica_group``), or None."""
        from nameserver.client import Client, NotFound

        with Client([self.endpoints], timeout_s=5.0) as client:
            try:
                return client.replica_group(GROUP)
            except NotFound:
                return None

    def start_replica(self, index: int, timeout_s: float = 60.0) -> None:
        """Start replica ``index`` (a new one on free ports, or again on its own data dir
        and ports) and wait until its remoting port accepts connections."""
        name = f"r{index}"
        if name not in self.ports:
            self.ports[name] = free_block(2)
        port = self.ports[name]
        argv = replica_argv(self.mode, self.root / name, port, self.endpoints, self.extra_args)
        self._spawn(name, argv)

        def serving() -> bool:
            self._alive()
            with socket.create_connection((HOST, port), timeout=1.0):
                return True

        wait_until(serving, timeout_s, f"replica {name} serving", interval=0.1)

    def address(self, name: str) -> str:
        return f"{HOST}:{self.ports[name]}"

    def kill(self, name: str) -> None:
        """SIGKILL one replica, by PID (the failover benchmark's kill -9)."""
        p = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        del self.procs[name]

    def _start(self, timeout_s: float) -> None:
        base = free_block(4)
        self.endpoints = f"{HOST}:{base}"
        self._spawn("meta", cluster_up_argv(base, self.root / "meta"))
        status = [*cli(), "status", "--endpoints", self.endpoints]
        wait_until(
            lambda: self._alive() and self._run(status, "status") is not None,
            timeout_s,
            "metaledger node up",
            interval=0.25,
        )
        # metaledger names the master: the first replica of the group to register
        self.start_replica(0, timeout_s)
        wait_until(
            lambda: (
                self._alive() and (g := self._group()) and g.master_address == self.address("r0")
            ),
            timeout_s,
            "replica 0 registered as the group's master",
            interval=0.25,
        )
        self._run(policy_argv(self.mode, self.endpoints), "replica-group policy")
        for i in range(1, self.mode.replicas):
            self.start_replica(i, timeout_s)
        wait_until(
            lambda: (
                self._alive()
                and (g := self._group())
                and len(g.sync_state_set) >= self.mode.in_sync_replicas
            ),
            timeout_s,
            f"{self.mode.in_sync_replicas} replica(s) in sync",
            interval=0.25,
        )
        topic = topic_argv(self.queues, self.endpoints)
        wait_until(
            lambda: self._alive() and self._run(topic, "route topic create") is not None,
            timeout_s,
            "topic created on the group",
            interval=0.5,
        )
        route = route_argv(self.endpoints)

        def master() -> str:
            self._alive()
            return master_of(json.loads(self._run(route, "route get")))

        self.master_address = wait_until(master, timeout_s, "the master in the route", 0.25)

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Replicas first, then the metaledger node (through its ``cluster up``), by PID."""
        order = [n for n in self.procs if n != "meta"] + (["meta"] if "meta" in self.procs else [])
        for name in order:
            p = self.procs[name]
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
                p.wait(5)
        shutil.rmtree(self.root, ignore_errors=True)
