"""A real replica group: one metaledger node and R real ``metaledger broker`` processes.

:class:`BrokerGroup` sets the group's quorum policy in metaledger (``replica_set_policy``)
BEFORE any replica registers, starts R broker processes of one group on free port pairs
(remoting port p, HA port p + 1) with ``--broker-role`` and short timeouts, waits until the
group has a master that takes writes and every replica is in the in-sync set, and creates a
topic on it. :meth:`BrokerGroup.send` sends one SEND_MESSAGE_V2 through a
:class:`~rmq.connection.RemotingConnection` to the master metaledger names and returns
the ``(code, remark)`` the client gets. Faults are signals to one replica's process:
SIGKILL ("down"), SIGSTOP ("hung", SIGCONT before teardown). Every process is stopped by
its PID at teardown; the logs' tails are printed when the test failed.

The metaledger node is shared by a test module (:func:`node`); each test gets its own group
name, so rows do not see each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.store.segments import list_segments
from nameserver.client import Client, GroupPolicy, QueueData, ReplicaGroupInfo
from rmq.codec import RemotingCommand
from rmq.connection import RemotingConnection
from rmq.message import properties_text
from tests.conftest import _failed
from tests.harness import Cluster, free_port_pairs, free_ports, wait_until
from tests.integration.broker.conftest import cli_env
from tests.ports import PortTaken, port_taken, start_on_fresh_ports

CLUSTER = "seeds"
TOPIC = "SeedTopic"
SEND_V2 = 310
RUNTIME_INFO = 28
PERM_RW = 6
#: response codes a producer sees (RocketMQ ResponseCode)
SEND_OK, SYSTEM_ERROR, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT = 0, 1, 11, 12
NOT_ENOUGH_REMARK = "in-sync replicas not enough"

_names = itertools.count(1)


def props(**kv: str) -> str:
    return properties_text(kv)


async def _request(
    port: int, code: int, ext: dict[str, object], body: bytes, timeout: float
) -> RemotingCommand:
    client = await RemotingConnection.connect("127.0.0.1", port, timeout)
    try:
        return await client.request(code, ext, body, timeout_s=timeout)
    finally:
        await client.close()


class BrokerProc:
    """One ``metaledger broker`` process of the group, in its own session."""

    def __init__(self, root: Path, group: str, port: int, metrics_port: int, args: list[str]):
        self.group, self.port, self.metrics_port = group, port, metrics_port
        self.name = f"{group}-{port}"
        self.root = root
        self.data_dir = root / self.name
        self.log_path = root / f"{self.name}.log"
        self.extra = list(args)  # its own: a test may add flags to one replica
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self._seen = 0

    @property
    def args(self) -> list[str]:
        return [
            "broker", "--group", self.group, "--cluster", CLUSTER,
            "--data-dir", str(self.data_dir), "--listen", f"127.0.0.1:{self.port}",
            "--listen-metrics", f"127.0.0.1:{self.metrics_port}", *self.extra,
        ]  # fmt: skip

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def port_was_taken(self) -> bool:
        """It exited because a port picked for it was in use (tests/ports.py)."""
        return self.proc is not None and port_taken(self.proc.poll(), self.log_since_start())

    def respawn_on_fresh_ports(self) -> None:
        """Pick its ports again and start it again (its first start only: metaledger knows
        a replica by its address)."""
        self.port = free_port_pairs(1)[0]
        self.metrics_port = next(p for p in free_ports(3) if p not in (self.port, self.port + 1))
        self.spawn()

    def spawn(self) -> None:
        self._seen = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nameserver.cli", *self.args],
                env=cli_env(self.root), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def serving(self) -> bool:
        """Whether it serves yet; PortTaken or AssertionError once it exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            failure = PortTaken if self.port_was_taken() else AssertionError
            raise failure(f"{self.name} exited {self.proc.returncode}:\n{self.log_tail()}")
        return b"serving on" in self.log_path.read_bytes()[self._seen :]

    def log_since_start(self) -> str:
        return self.log_path.read_bytes()[self._seen :].decode(errors="replace")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None and self.proc.poll() is None, f"{self.name} is not running"
        self.proc.send_signal(sig)
        if sig == signal.SIGSTOP:
            self.paused = True
        elif sig == signal.SIGCONT:
            self.paused = False

    def kill(self) -> None:
        """kill -9, and reap it."""
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(10)
        self.paused = False

    def terminate(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.paused:
            self.signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)

    def reap(self, timeout: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(max(0.1, timeout))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def runtime_info(self, timeout: float = 5.0) -> dict[str, str]:
        r = asyncio.run(_request(self.port, RUNTIME_INFO, {}, b"", timeout))
        assert r.code == 0, r.remark
        table: dict[str, str] = json.loads(r.body)["table"]
        return table

    def max_offset(self) -> int:
        return int(self.runtime_info()["commitLogMaxOffset"])

    def metrics(self, timeout: float = 5.0) -> dict[str, float]:
        """The ``/metrics`` samples, ``name{labels}`` -> value."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=timeout) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def slave_lag(self) -> dict[int, tuple[bool, float]]:
        """As this master's HA sees its slaves: id -> (connected, lag in bytes)."""
        out: dict[int, tuple[bool, float]] = {}
        m = self.metrics()
        for key, value in m.items():
            if key.startswith("metaledger_broker_slave_connected{"):
                sid = int(key.split('slave_id="')[1].split('"')[0])
                lag = next(
                    v
                    for k, v in m.items()
                    if k.startswith("metaledger_broker_slave_lag_bytes{")
                    and f'slave_id="{sid}"' in k
                )
                out[sid] = (value == 1.0, lag)
        return out

    def commit_log(self) -> bytes:
        """The commit log's bytes as on disk (segments are preallocated: read to the end of
        the data, which the caller cuts at the end offset it knows)."""
        data = b""
        for start, path in list_segments(str(self.data_dir / "store" / "commitlog")):
            assert start == len(data), f"a gap before segment {start} in {self.name}"
            data += Path(path).read_bytes()
        return data

    def log_tail(self, n: int = 60) -> str:
        if not self.log_path.exists():
            return "(no log)"
        lines = self.log_path.read_bytes().decode(errors="replace").splitlines()
        return "\n".join(lines[-n:])


class BrokerGroup:
    """R broker replicas of one group (see the module docstring).

    Timeouts: a replica is dead for metaledger after ``heartbeat_timeout_ms`` (6 s: a hung
    slave must still count alive while its row runs, or seed 004's ``min(alive, ...)``
    would decide instead of its acks); a SYNC master waits ``slave_timeout_ms`` (2 s, short
    for the FLUSH_SLAVE_TIMEOUT rows, long enough for 4 slaves' acks on busy cores)."""

    def __init__(
        self,
        root: Path,
        client: Client,
        endpoints: list[str],
        replicas: int,
        role: str,
        policy: GroupPolicy,
        *,
        heartbeat_timeout_ms: int = 6000,
        slave_timeout_ms: int = 2000,
        not_catchup_ms: int = 15_000,
        fallbehind_bytes: int | None = None,
    ) -> None:
        self.client = client
        self.role = role
        self.policy = policy
        self.name = f"seed{next(_names)}"
        self.root = root / self.name
        self.root.mkdir(parents=True, exist_ok=True)
        args = [
            "--broker-role", role,
            "--replica-heartbeat-timeout-ms", str(heartbeat_timeout_ms),
            "--slave-timeout-ms", str(slave_timeout_ms),
            "--ha-max-time-slave-not-catchup-ms", str(not_catchup_ms),
            "--endpoints", ",".join(endpoints),
        ]  # fmt: skip
        if fallbehind_bytes is not None:
            args += ["--ha-slave-fallbehind-max-bytes", str(fallbehind_bytes)]
        ports = free_port_pairs(replicas)
        taken = {q for p in ports for q in (p, p + 1)}
        metrics = [p for p in free_ports(replicas + 4) if p not in taken][:replicas]
        self.procs = [
            BrokerProc(self.root, self.name, p, m, args)
            for p, m in zip(ports, metrics, strict=True)
        ]

    # ------------------------------------------------------------ life cycle
    def start(self, timeout: float = 60.0) -> BrokerGroup:
        """Policy first, then the master, then every slave at once; ready when the group has a writable
        master, all replicas in its in-sync set, and the topic."""
        self.client.replica_set_policy(self.name, self.policy, cluster_name=CLUSTER)
        first, rest = self.procs[0], self.procs[1:]
        first.spawn()  # the first to register is the master: its HA port is up before
        self._wait_serving([first], timeout)  # slaves dial it
        self.wait_in_sync([first], timeout)
        for p in rest:
            p.spawn()
        self._wait_serving(rest, timeout)
        self.wait_in_sync(self.procs, timeout)
        queues = [QueueData(self.name, 1, 1, PERM_RW)]
        wait_until(
            lambda: self.client.route_topic_create(TOPIC, queues) > 0, timeout, "topic created"
        )
        return self

    @staticmethod
    def _wait_serving(procs: list[BrokerProc], timeout: float) -> None:
        """Until each of ``procs`` (spawned) serves; one that exited because a port picked
        for it was taken starts again on fresh ones (tests/ports.py)."""

        def serving() -> None:
            deadline = time.monotonic() + timeout
            while not all([p.serving() for p in procs]):  # each one checked for an exit
                if time.monotonic() > deadline:
                    raise AssertionError(f"brokers not serving within {timeout:g} s")
                time.sleep(0.05)

        def respawn() -> None:
            for p in procs:
                if p.port_was_taken():
                    p.respawn_on_fresh_ports()

        start_on_fresh_ports(serving, respawn)

    def close(self, failed: bool) -> None:
        if failed:
            for p in self.procs:
                print(f"----- {p.name} ({p.log_path})\n{p.log_tail()}", file=sys.stderr)
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                p.terminate()
        deadline = time.monotonic() + 15
        for p in self.procs:
            p.reap(deadline - time.monotonic())

    # ------------------------------------------------------------ the group
    def info(self) -> ReplicaGroupInfo:
        return self.client.replica_group(self.name)

    def ids(self) -> dict[str, int]:
        """Remoting address -> broker id, as registered."""
        return {r.address: r.broker_id for r in self.info().replicas}

    def id_of(self, proc: BrokerProc) -> int:
        return self.ids()[proc.address]

    @property
    def master(self) -> BrokerProc:
        address = self.info().master_address
        return next(p for p in self.procs if p.address == address)

    @property
    def slaves(self) -> list[BrokerProc]:
        address = self.info().master_address
        return [p for p in self.procs if p.address != address]

    def wait_in_sync(self, members: list[BrokerProc], timeout: float = 30.0) -> ReplicaGroupInfo:
        """Until the in-sync set is exactly ``members`` (the master among them) and the
        master takes writes."""

        def ready() -> ReplicaGroupInfo | None:
            g = self.info()
            ids = {r.address: r.broker_id for r in g.replicas}
            want = {ids.get(p.address, -1) for p in members}
            if not g.master_id or set(g.sync_state_set) != want:
                return None
            master = next((p for p in self.procs if p.address == g.master_address), None)
            if master is None or master.runtime_info()["writable"] != "true":
                return None
            return g

        g = wait_until(ready, timeout, lambda: f"in-sync set of {len(members)}: {self.info()}")
        assert g is not None
        return g

    def wait_slave_seen(
        self, proc: BrokerProc, connected: bool, lag: Callable[[float], bool] = lambda x: True
    ) -> None:
        """Until the master's HA shows ``proc`` (dis)connected with a lag ``lag`` accepts."""
        sid = self.id_of(proc)

        def seen() -> bool:
            state = self.master.slave_lag().get(sid)
            return state is not None and state[0] is connected and lag(state[1])

        wait_until(seen, 20, lambda: f"master's view of slave {sid}: {self.master.slave_lag()}")

    # ------------------------------------------------------------ faults
    def apply(self, states: list[str], gap_bytes: int) -> None:
        """Put the slaves (in order) in ``states``: "up"; "down" (kill -9); "hung"
        (SIGSTOP: alive in metaledger, HA connection open, acks nothing); "lagging" (hung,
        then ``gap_bytes`` of body pushed past its last ack); "inside" (hung, then
        ``gap_bytes // 4`` pushed: behind, but less than the gap)."""
        slaves = self.slaves
        assert len(slaves) == len(states), (len(slaves), states)
        unknown = set(states) - {"up", "down", "hung", "lagging", "inside"}
        assert not unknown, unknown
        self.down([p for p, s in zip(slaves, states, strict=True) if s == "down"])
        for p, s in zip(slaves, states, strict=True):
            if s == "hung":
                self.hang(p)
        for state, size in (("lagging", gap_bytes), ("inside", gap_bytes // 4)):
            procs = [p for p, s in zip(slaves, states, strict=True) if s == state]
            if procs:
                self.lag(procs, size)

    def down(self, procs: list[BrokerProc]) -> None:
        """kill -9 slaves; return once the master saw their HA connections close."""
        for p in procs:
            p.kill()
        for p in procs:
            self.wait_slave_seen(p, connected=False)

    def hang(self, proc: BrokerProc) -> None:
        """SIGSTOP: the process holds its connections and answers nothing."""
        proc.signal(signal.SIGSTOP)

    def lag(self, procs: list[BrokerProc], gap_bytes: int) -> None:
        """SIGSTOP ``procs``, then push ``gap_bytes`` of message body with WAIT=false (no
        replica wait, no admission) so their last ack falls that far behind; wait until
        the other slaves acked it all, so only the stopped ones lag."""
        for p in procs:
            p.signal(signal.SIGSTOP)
        code, remark = self.send(b"L" * gap_bytes, wait=False)
        assert code == SEND_OK, (code, remark)
        for p in self.slaves:
            if p not in procs and p.running and not p.paused:
                self.wait_slave_seen(p, connected=True, lag=lambda x: x == 0)

    # ------------------------------------------------------------ sending
    def send(self, body: bytes, wait: bool = True, timeout: float = 15.0) -> tuple[int, str]:
        """One SEND_MESSAGE_V2 to the master; the (code, remark) the client gets."""
        ext: dict[str, object] = {
            "a": "SeedProducer", "b": TOPIC, "c": "TBW102", "d": 4, "e": 0, "f": 0,
            "g": int(time.time() * 1000), "h": 0,
            "i": props(WAIT="true" if wait else "false"), "j": 0, "k": "false",
        }  # fmt: skip
        r = asyncio.run(_request(self.master.port, SEND_V2, ext, body, timeout))
        return r.code, r.remark or ""


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """One real metaledger node shared by the module's groups."""
    c = Cluster(tmp_path_factory.mktemp("node"), n=1)
    failed = True
    try:
        c.wait_ready(30)
        yield c
        failed = request.session.testsfailed > 0
    finally:
        c.close(failed=failed)


@pytest.fixture(scope="module")
def client(node: Cluster) -> Iterator[Client]:
    with Client(node.endpoints, timeout_s=10) as c:
        yield c


@pytest.fixture
def broker_group(
    tmp_path: Path, node: Cluster, client: Client, request: pytest.FixtureRequest
) -> Iterator[Callable[..., BrokerGroup]]:
    """``broker_group(replicas, role, policy, **flags)`` -> a started :class:`BrokerGroup`;
    every group made is stopped at teardown (logs shown if the test failed)."""
    groups: list[BrokerGroup] = []

    def make(replicas: int, role: str, policy: GroupPolicy, **kw: object) -> BrokerGroup:
        g = BrokerGroup(tmp_path, client, node.endpoints, replicas, role, policy, **kw)  # type: ignore[arg-type]
        groups.append(g)
        return g.start()

    yield make
    for g in groups:
        g.close(failed=_failed(request.node))
