"""A harness for tests that run real metaledger server processes.

    cluster = Cluster(tmp_path, n=3)      # starts n nodes (own data dir and log file each)
    leader = cluster.wait_ready(30)       # every node answers Admin.Status, all agree on a leader
    cluster.stub(0).Put(...)              # etcd KV stub of node 0
    cluster.kill(leader)                  # SIGKILL (or any signal)
    cluster.start(leader)                 # same data dir, same ports
    new = cluster.add_node()              # one more node process (MemberAdd it yourself)
    cluster.close()                       # SIGTERM all, SIGKILL leftovers

Nodes are started with ``python -m nameserver.cli serve`` when the CLI package has a
``__main__`` module, else through :func:`nameserver.server.run` directly with the same
configuration (``METALEDGER_TEST_LAUNCHER=cli|python`` forces one). Each node gets its own
client, peer, remoting and metrics ports from :func:`free_ports`, so nothing collides with
DESIGN.md §6 defaults or with another test run. A port picked free can still be taken
before the node binds it: the first :meth:`Cluster.wait_ready` after the cluster's first
start (and :meth:`Cluster.add_node`) waits until every node has bound its ports, and starts
them again on fresh ports, up to 3 times, when one exited because an address was in use
(:mod:`tests.ports`). Each cluster gets its own Raft password in
``<root>/cluster-password`` (:attr:`Cluster.password`), as ``cluster up`` makes one; nodes
get the file's path (``--cluster-password-file``).

Nothing here sleeps blindly: every wait polls a condition until a deadline
(:func:`wait_until`) and says what it was waiting for when the deadline passes.
Each node's output (stdout and stderr) goes to ``<root>/<id>.log``, appended across
restarts; :meth:`Cluster.logs_tail` prints the tails, which ``close(failed=True)`` does.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

import grpc

from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import admin_pb2, admin_pb2_grpc
from raftlog.native.auth import create_password_file
from tests.ports import PortTaken, port_taken, start_on_fresh_ports

REPO_ROOT = Path(__file__).resolve().parent.parent
LAUNCHER_ENV = "METALEDGER_TEST_LAUNCHER"
#: ``go``: every node the harness starts serves its client port through the Go gRPC front
#: (``serve --grpc-front go``), to run a test file through it (TLS included)
GRPC_FRONT_ENV = "METALEDGER_TEST_GRPC_FRONT"
#: Above the server's 2 MiB request limit, so oversized requests reach the server.
GRPC_MAX_MESSAGE_BYTES = 32 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", GRPC_MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", GRPC_MAX_MESSAGE_BYTES),
    ("grpc.enable_http_proxy", 0),
    # A restarted node must be reachable again quickly, not after gRPC's 1-120 s backoff.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]

T = TypeVar("T")

# Runs one node through nameserver.server.run when the CLI is not there yet.
_PYTHON_LAUNCHER = """\
import json, logging, sys
from nameserver.config import ServerConfig, parse_initial_cluster
from nameserver.server import run
from raftlog.native.auth import read_password_file
a = json.loads(sys.argv[1])
a["cluster_password"] = read_password_file(a.pop("cluster_password_file"))
logging.basicConfig(
    level=logging.INFO,
    format="%(asctime)s %(levelname)s [%(name)s] " + a["node_id"] + ": %(message)s",
)
a["initial_cluster"] = parse_initial_cluster(a["initial_cluster"])
sys.exit(run(ServerConfig(**a)))
"""


# --------------------------------------------------------------------------- helpers
def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


#: the lowest port :func:`free_ports` picks: above the demo's default ports (9877..10000)
PICK_FROM = 10_100


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports on 127.0.0.1 that were free a moment ago.

    They are picked at random *outside* the kernel's ephemeral range: a port from inside
    it (what binding port 0 gives) can be taken, before the server binds it, as the local
    end of any outgoing connection on the machine, and nodes dialling their peers make
    many. Nor are they from the README's block (``metaledger cluster up``'s default ports,
    up to :data:`PICK_FROM`): the tests that run the demo on those ports would find one of
    them held by another test's server. All sockets are held open until every port is
    picked, so the ports are distinct.
    """
    low, high = _ephemeral_range()
    lo, hi = (PICK_FROM, low) if low - PICK_FROM >= 5_000 else (high + 1, 65_535)
    rng = random.Random()
    socks: list[socket.socket] = []
    try:
        while len(socks) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", rng.randrange(lo, hi)))
            except OSError:
                s.close()
                continue
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port_pairs(n: int) -> list[int]:
    """``n`` ports p with p and p + 1 both free a moment ago, no two pairs overlapping: a
    broker replica's remoting port and its HA port (RocketMQ's convention: HA = port + 1)."""
    out: list[int] = []
    while len(out) < n:
        (p,) = free_ports(1)
        if p + 1 > 65_535 or any(abs(p - q) <= 1 for q in out):
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", p + 1))
            except OSError:
                continue
        out.append(p)
    return out


def command_plugin_path(root: Path, entry_point: str) -> str | None:
    """A folder for PYTHONPATH holding a throwaway ``*.dist-info`` that declares one
    ``metaledger.commands`` entry point (``"name = module:register"``, what ``pip install
    -e .`` writes), for a command an install made before it existed lacks; None when the
    installed metadata already declares it."""
    name = entry_point.split("=", 1)[0].strip()
    if any(ep.name == name for ep in entry_points(group="metaledger.commands")):
        return None
    info = root / "plugin" / f"metaledger_{name}_dev-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: metaledger-{name}-dev\nVersion: 0\n"
    )
    (info / "entry_points.txt").write_text(f"[metaledger.commands]\n{entry_point}\n")
    return str(root / "plugin")


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    message: str | Callable[[], str],
    interval: float = 0.05,
) -> T:
    """Poll ``predicate`` until it returns something truthy (returned) or ``timeout`` passes.

    An exception from the predicate counts as "not yet", except an AssertionError, which
    gives up at once (a predicate asserts what can never come right, such as a dead node).
    The last exception (or value) is shown in the AssertionError raised at the deadline,
    after ``message``.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = predicate()
        except AssertionError:
            raise
        except Exception as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"{text} (not within {timeout:g} s; last: {last!r})")
        time.sleep(interval)


def prefix_end(prefix: bytes) -> bytes:
    """etcd's range_end for "every key starting with prefix"."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"


def grpc_code(exc: BaseException) -> grpc.StatusCode | None:
    return exc.code() if isinstance(exc, grpc.RpcError) else None  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- cluster
def stop_processes(procs: Sequence[subprocess.Popen[bytes] | None], timeout: float = 10.0) -> None:
    """SIGTERM each running one (by its PID), then SIGKILL the process group of those not
    gone within ``timeout``."""
    for p in procs:
        if p is not None and p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        if p is None:
            continue
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10.0)


@dataclass(frozen=True)
class NodeSpec:
    id: str
    client_port: int
    peer_port: int
    remoting_port: int
    metrics_port: int
    data_dir: Path
    log_path: Path

    @property
    def client_addr(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_addr(self) -> str:
        return f"127.0.0.1:{self.peer_port}"


class Cluster:
    """``n`` real metaledger nodes on loopback, each a subprocess in its own session."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        n: int = 3,
        start: bool = True,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.root = Path(root)
        #: more ``metaledger serve`` flags for every node (TLS, auth, quotas, compaction)
        self.extra_args = list(extra_args)
        self.root.mkdir(parents=True, exist_ok=True)
        #: the Raft peer ports' password, made for this cluster (as ``cluster up`` does);
        #: nodes get the file's path, never the password on their command line
        self.password_file = self.root / "cluster-password"
        self.password = create_password_file(self.password_file)
        self.nodes = self._specs(0, n)
        self._existing_data_dirs = {s.data_dir for s in self.nodes if s.data_dir.exists()}
        self.initial_cluster = ",".join(f"{s.id}={s.peer_addr}" for s in self.nodes)
        # --initial-cluster of nodes added later (add_node); the others use initial_cluster
        self.initial_clusters: dict[int, str] = {}
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * n
        #: more environment for node i's process (node index -> variables), e.g. libfaketime
        self.node_env: dict[int, dict[str, str]] = {}
        self._channels: dict[int, grpc.Channel] = {}
        #: where node i's log was when it was last started (its output since is that start's)
        self._log_marks: dict[int, int] = {}
        #: the first start, not yet seen bound: wait_ready checks it (and starts again on
        #: fresh ports if a picked one was taken), so clusters made one after another boot
        #: together
        self._first_start_unchecked = start
        #: the first wait_ready with every node running also waits until the store counts
        #: revisions etcd's way (the default: the leader switches it once all members can),
        #: so no test sees the numbering change under it
        self._switch_unchecked = "--offset-revisions" not in self.extra_args
        if start:
            try:
                for i in range(n):
                    self.start(i)
            except BaseException:
                self.close(failed=True)
                raise

    def _specs(self, first: int, count: int) -> list[NodeSpec]:
        """Nodes ``first`` … ``first + count - 1`` on ports picked free (all distinct)."""
        ports = free_ports(4 * count)
        return [
            NodeSpec(
                id=f"n{i}",
                client_port=ports[4 * k],
                peer_port=ports[4 * k + 1],
                remoting_port=ports[4 * k + 2],
                metrics_port=ports[4 * k + 3],
                data_dir=self.root / f"n{i}",
                log_path=self.root / f"n{i}.log",
            )
            for k, i in enumerate(range(first, first + count))
        ]

    def _check_first_start(self) -> None:
        """Once each node of the first start has bound its ports (or exited); when one
        exited because a picked port was taken, every node again on fresh ports."""
        if not self._first_start_unchecked:
            return
        self._first_start_unchecked = False
        start_on_fresh_ports(lambda: self.wait_bound(range(self.n)), self._restart_all_fresh)

    def _restart_all_fresh(self) -> None:
        """Another first start: every node stopped, its fresh data dir gone (the others
        may have recorded the old peer addresses), fresh ports for all, all started."""
        stop_processes(self.procs)
        for s in self.nodes:
            if s.data_dir not in self._existing_data_dirs:
                shutil.rmtree(s.data_dir, ignore_errors=True)
        self.nodes = self._specs(0, self.n)
        self.initial_cluster = ",".join(f"{s.id}={s.peer_addr}" for s in self.nodes)
        for i in range(self.n):
            self.start(i)

    # ------------------------------------------------------------- addresses
    @property
    def n(self) -> int:
        return len(self.nodes)

    @property
    def endpoints(self) -> list[str]:
        """Client (gRPC) addresses ``host:port``, node i at index i."""
        return [s.client_addr for s in self.nodes]

    def data_dir(self, i: int) -> Path:
        return self.nodes[i].data_dir

    def index_of(self, node_id: str) -> int:
        for i, s in enumerate(self.nodes):
            if s.id == node_id:
                return i
        raise KeyError(node_id)

    def peer_url(self, i: int) -> str:
        """Node i's peer URL as etcd's Cluster service spells it (``http://host:port``)."""
        return f"http://{self.nodes[i].peer_addr}"

    # ------------------------------------------------------------- processes
    def add_node(self, members: list[int] | None = None, start: bool = True) -> int:
        """A new node ``n<index>`` with fresh ports and data dir, whose ``--initial-cluster``
        lists ``members`` (default: every node so far) and itself; started unless told not to.
        Returns its index. It joins only once a member accepts it (Cluster.MemberAdd)."""
        i = self.n
        existing = list(range(i)) if members is None else members
        self.nodes.append(self._specs(i, 1)[0])
        self.procs.append(None)
        fresh = not self.nodes[i].data_dir.exists()

        def set_initial_cluster() -> None:
            spec = self.nodes[i]
            self.initial_clusters[i] = ",".join(
                [
                    *(f"{self.nodes[j].id}={self.nodes[j].peer_addr}" for j in existing),
                    f"{spec.id}={spec.peer_addr}",
                ]
            )

        def start_once() -> None:
            self.start(i)
            self.wait_bound([i])

        def repick() -> None:
            stop_processes([self.procs[i]])
            if fresh:
                shutil.rmtree(self.nodes[i].data_dir, ignore_errors=True)
            self.nodes[i] = self._specs(i, 1)[0]
            set_initial_cluster()

        set_initial_cluster()
        if start:
            start_on_fresh_ports(start_once, repick)
        return i

    def command(self, i: int) -> list[str]:
        s = self.nodes[i]
        initial_cluster = self.initial_clusters.get(i, self.initial_cluster)
        launcher = os.environ.get(LAUNCHER_ENV) or (
            "cli" if (REPO_ROOT / "nameserver" / "cli" / "__main__.py").exists() else "python"
        )
        if self.extra_args and launcher != "cli":
            raise ValueError(f"extra_args {self.extra_args} need the cli launcher ({LAUNCHER_ENV})")
        if launcher == "cli":
            return [
                sys.executable,
                "-m",
                "nameserver.cli",
                "serve",
                "--id",
                s.id,
                "--data-dir",
                str(s.data_dir),
                "--listen-client",
                s.client_addr,
                "--listen-peer",
                s.peer_addr,
                "--listen-remoting",
                f"127.0.0.1:{s.remoting_port}",
                "--listen-metrics",
                f"127.0.0.1:{s.metrics_port}",
                "--initial-cluster",
                initial_cluster,
                "--cluster-password-file",
                str(self.password_file),
                *self.extra_args,
                *self._front_args(),
            ]
        args = {
            "node_id": s.id,
            "data_dir": str(s.data_dir),
            "listen_client": s.client_addr,
            "listen_peer": s.peer_addr,
            "listen_remoting": f"127.0.0.1:{s.remoting_port}",
            "listen_metrics": f"127.0.0.1:{s.metrics_port}",
            "initial_cluster": initial_cluster,
            "cluster_password_file": str(self.password_file),
        }
        return [sys.executable, "-c", _PYTHON_LAUNCHER, json.dumps(args)]

    def _front_args(self) -> list[str]:
        """``--grpc-front go`` when :data:`GRPC_FRONT_ENV` asks for it and nothing forbids."""
        if os.environ.get(GRPC_FRONT_ENV) != "go" or "--grpc-front" in self.extra_args:
            return []
        return ["--grpc-front", "go"]

    def start(self, i: int) -> subprocess.Popen[bytes]:
        """Start node i (its data dir is kept across starts); output appends to its log."""
        if self.is_running(i):
            raise RuntimeError(f"{self.nodes[i].id} is already running")
        s = self.nodes[i]
        s.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.command(i)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("METALEDGER_PARENT_PID", None)
        env.update(self.node_env.get(i, {}))
        with open(s.log_path, "ab") as out:
            self._log_marks[i] = out.tell()
            out.write(f"=== harness {time.strftime('%H:%M:%S')}: start {s.id}\n".encode())
            out.flush()
            self.procs[i] = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                env=env,
                start_new_session=True,
            )
        self._drop_channel(i)
        return self.procs[i]  # type: ignore[return-value]

    def output_since_start(self, i: int) -> bytes:
        """Node i's log from its last start on."""
        try:
            with open(self.nodes[i].log_path, "rb") as f:
                f.seek(self._log_marks.get(i, 0))
                return f.read()
        except FileNotFoundError:
            return b""

    def wait_bound(self, nodes: Iterable[int], timeout: float = 30.0) -> None:
        """Wait until each of ``nodes`` has bound its ports since its last start (it logs
        that it is serving) or has exited. :class:`tests.ports.PortTaken` when one exited
        because an address it was given is in use; any other exit, or a node still
        starting at the deadline, is left for the caller's own waits to report."""
        pending = set(nodes)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for i in sorted(pending):
                out, p = self.output_since_start(i), self.procs[i]
                if b" serving: client " in out:
                    pending.discard(i)
                elif p is None or p.poll() is not None:
                    if p is not None and port_taken(p.returncode, out):
                        raise PortTaken(
                            f"{self.nodes[i].id} exited {p.returncode}\n{self.log_tail(i)}"
                        )
                    pending.discard(i)
            if pending:
                time.sleep(0.05)

    def is_running(self, i: int) -> bool:
        p = self.procs[i]
        return p is not None and p.poll() is None

    def running(self) -> list[int]:
        return [i for i in range(self.n) if self.is_running(i)]

    def kill(self, i: int, sig: int = signal.SIGKILL, timeout: float = 15.0) -> int | None:
        """Send ``sig`` to node i; for SIGKILL/SIGTERM wait (up to ``timeout``) for it to exit.

        Returns the exit code (None if the signal does not end the process).
        """
        p = self.procs[i]
        if p is None or p.poll() is not None:
            return p.returncode if p is not None else None
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            try:
                return p.wait(timeout)
            except subprocess.TimeoutExpired:
                if sig == signal.SIGKILL:
                    raise
                p.kill()
                p.wait(timeout)
                raise AssertionError(
                    f"{self.nodes[i].id} did not exit within {timeout:g} s of signal {sig}; "
                    f"killed\n{self.log_tail(i)}"
                ) from None
            finally:
                self._drop_channel(i)
        return None

    def stop(self, i: int, timeout: float = 15.0) -> int | None:
        """SIGTERM node i and wait for a clean exit (AssertionError and SIGKILL if it hangs)."""
        return self.kill(i, signal.SIGTERM, timeout)

    def restart(self, i: int, timeout: float = 15.0) -> subprocess.Popen[bytes]:
        self.stop(i, timeout)
        return self.start(i)

    def wait_exit(self, i: int, timeout: float) -> int:
        """Wait for node i to exit on its own; return its exit code."""
        p = self.procs[i]
        assert p is not None, f"{self.nodes[i].id} was never started"
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.nodes[i].id} still running after {timeout:g} s\n{self.log_tail(i)}"
            ) from None

    def close(self, failed: bool = False) -> None:
        """Stop every node (SIGTERM, then SIGKILL after a deadline). With ``failed``, print
        the tails of the node logs first."""
        if failed:
            print(self.logs_tail(), file=sys.stderr)
        stop_processes(self.procs)
        for i in list(self._channels):
            self._drop_channel(i)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(failed=exc_type is not None)

    # ------------------------------------------------------------- logs
    def log_tail(self, i: int, lines: int = 40) -> str:
        s = self.nodes[i]
        try:
            text = s.log_path.read_text(errors="replace")
        except FileNotFoundError:
            text = ""
        tail = "\n".join(text.splitlines()[-lines:])
        return f"----- {s.id} log ({s.log_path}), last {lines} lines -----\n{tail}"

    def logs_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_tail(i, lines) for i in range(self.n))

    def log_text(self, i: int) -> str:
        return self.nodes[i].log_path.read_text(errors="replace")

    # ------------------------------------------------------------- gRPC
    def channel(self, i: int) -> grpc.Channel:
        ch = self._channels.get(i)
        if ch is None:
            ch = self._channels[i] = grpc.insecure_channel(
                self.nodes[i].client_addr, options=CHANNEL_OPTIONS
            )
        return ch

    def _drop_channel(self, i: int) -> None:
        ch = self._channels.pop(i, None)
        if ch is not None:
            ch.close()

    def stub(self, i: int) -> rpc_pb2_grpc.KVStub:
        return rpc_pb2_grpc.KVStub(self.channel(i))

    def admin(self, i: int) -> admin_pb2_grpc.AdminStub:
        return admin_pb2_grpc.AdminStub(self.channel(i))

    def cluster_stub(self, i: int) -> rpc_pb2_grpc.ClusterStub:
        return rpc_pb2_grpc.ClusterStub(self.channel(i))

    def maintenance(self, i: int) -> rpc_pb2_grpc.MaintenanceStub:
        return rpc_pb2_grpc.MaintenanceStub(self.channel(i))

    def disarm_alarms(self, i: int = 0) -> None:
        """Deactivate every alarm through node i (as ``etcdctl alarm disarm``): after a
        fuzzed, valid Alarm ACTIVATE, writes are refused by design until then."""
        maintenance = self.maintenance(i)
        listed = maintenance.Alarm(
            rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.GET), timeout=10
        )
        for alarm in listed.alarms:
            request = rpc_pb2.AlarmRequest(
                action=rpc_pb2.AlarmRequest.DEACTIVATE, memberID=alarm.memberID, alarm=alarm.alarm
            )
            maintenance.Alarm(request, timeout=10)

    def status(self, i: int, timeout: float = 2.0) -> admin_pb2.StatusResponse:
        """Admin.Status of node i (raises grpc.RpcError if it does not answer)."""
        return self.admin(i).Status(admin_pb2.StatusRequest(), timeout=timeout)

    def statuses(self, nodes: list[int] | None = None) -> dict[int, admin_pb2.StatusResponse]:
        """Admin.Status of each of ``nodes`` (default: the running ones) that answers."""
        out = {}
        for i in self.running() if nodes is None else nodes:
            with contextlib.suppress(grpc.RpcError):
                out[i] = self.status(i, timeout=1.0)
        return out

    # ------------------------------------------------------------- readiness
    def _agreed_leader(self, nodes: list[int]) -> int | None:
        for i in nodes:
            p = self.procs[i]
            if p is None or p.poll() is not None:
                raise AssertionError(
                    f"{self.nodes[i].id} exited with {p.returncode if p else None}\n"
                    f"{self.log_tail(i)}"
                )
        st = self.statuses(nodes)
        if len(st) != len(nodes):
            return None
        leaders = {s.leader for s in st.values()}
        if len(leaders) != 1 or "" in leaders:
            return None
        leader = self.index_of(leaders.pop())
        if leader not in st or st[leader].role != "leader" or not st[leader].has_quorum:
            return None
        return leader

    def wait_ready(self, timeout: float = 30.0, nodes: list[int] | None = None) -> int:
        """Wait until every running node (or each of ``nodes``) answers Admin.Status and all
        name the same leader, which says it is leader with a quorum. Returns its index.
        The first call after the cluster's first start also checks that start (it starts
        again on fresh ports when a picked port was taken)."""
        self._check_first_start()
        members = self.running() if nodes is None else nodes
        if not members:
            raise AssertionError("no node is running")

        def agreed() -> list[int] | None:  # a list: leader 0 must count as found
            leader = self._agreed_leader(members)
            return None if leader is None else [leader]

        leader = wait_until(
            agreed,
            timeout,
            lambda: (
                f"nodes {[self.nodes[i].id for i in members]} did not agree on a leader: "
                f"{self._describe(members)}\n{self.logs_tail()}"
            ),
            interval=0.1,
        )[0]
        if self._switch_unchecked and len(members) == self.n == len(self.running()):
            self._switch_unchecked = False
            wait_until(
                lambda: self.counts_etcd_revisions(leader),
                timeout,
                lambda: f"the store did not switch to etcd's revision count\n{self.logs_tail()}",
                interval=0.05,
            )
        return leader

    def counts_etcd_revisions(self, i: int) -> bool:
        """Whether node i's store counts revisions etcd's way (its Status's trailing
        metadata says so); True too when node i does not answer Status to this harness
        (auth), which then cannot tell."""
        try:
            _, call = self.maintenance(i).Status.with_call(rpc_pb2.StatusRequest(), timeout=5)
        except grpc.RpcError as exc:
            if grpc_code(exc) in (
                grpc.StatusCode.UNAUTHENTICATED,
                grpc.StatusCode.PERMISSION_DENIED,
                grpc.StatusCode.INVALID_ARGUMENT,
            ):
                return True
            return False
        return ("x-ml-store-revisions", "etcd") in list(call.trailing_metadata() or ())

    def wait_announced(self, timeout: float = 30.0, nodes: list[int] | None = None) -> None:
        """Wait until each running node's image (Admin.Members) has every member's client
        URL: each node writes its own member record once a leader exists."""
        members = self.running() if nodes is None else nodes
        want = {s.id: [f"http://{s.client_addr}"] for s in self.nodes}

        def announced() -> bool:
            for i in members:
                resp = self.admin(i).Members(admin_pb2.MembersRequest(), timeout=1.0)
                if {m.id: list(m.client_urls) for m in resp.members} != want:
                    return False
            return True

        wait_until(announced, timeout, "every member announced its client URL", 0.1)

    def _describe(self, nodes: list[int]) -> str:
        parts = []
        for i in nodes:
            try:
                s = self.status(i, timeout=1.0)
                parts.append(
                    f"{s.id}: role={s.role} term={s.term} leader={s.leader!r} "
                    f"end={s.end_offset} commit={s.commit_offset} apply={s.apply_offset} "
                    f"quorum={s.has_quorum}"
                )
            except grpc.RpcError as exc:
                parts.append(f"{self.nodes[i].id}: {exc.code().name}")
        return "; ".join(parts)

    def leader(self, timeout: float = 15.0) -> int:
        """Index of the leader all running nodes agree on (waits up to ``timeout``)."""
        return self.wait_ready(timeout)

    def wait_applied(
        self, offset: int, nodes: list[int] | None = None, timeout: float = 20.0
    ) -> None:
        """Wait until each of ``nodes`` (default: running ones) has applied ``offset``."""
        members = self.running() if nodes is None else nodes

        def done() -> bool:
            return all(self.status(i, timeout=1.0).apply_offset >= offset for i in members)

        wait_until(
            done,
            timeout,
            lambda: f"apply_offset did not reach {offset}: {self._describe(members)}",
        )

    def wait_converged(self, nodes: list[int] | None = None, timeout: float = 20.0) -> int:
        """Wait until every node (default: running ones) has applied all the leader has.

        A linearizable read through the leader first makes the leader apply a fresh read
        barrier, so its apply offset covers every write acknowledged before the call; that
        offset is the target, and is returned. (Not the commit offset: this keeps the
        idle-cluster "apply reaches commit" property, which
        tests/cluster/test_cluster.py checks on its own, out of every other test.)
        """
        members = self.running() if nodes is None else nodes
        leader = self.wait_ready(timeout, members)
        self.stub(leader).Range(rpc_pb2.RangeRequest(key=b"\x00"), timeout=timeout)
        target = self.status(leader).apply_offset
        self.wait_applied(target, members, timeout)
        return target

    # ------------------------------------------------------------- KV shortcuts
    def range_all(
        self, i: int, prefix: bytes = b"", serializable: bool = False, timeout: float = 10.0
    ) -> dict[bytes, tuple[bytes, int, int, int]]:
        """Every key (under ``prefix``) of node i → (value, create_rev, mod_rev, version)."""
        key, end = (prefix, prefix_end(prefix)) if prefix else (b"\x00", b"\x00")
        resp = self.stub(i).Range(
            rpc_pb2.RangeRequest(key=key, range_end=end, serializable=serializable),
            timeout=timeout,
        )
        assert not resp.more
        return {
            kv.key: (kv.value, kv.create_revision, kv.mod_revision, kv.version) for kv in resp.kvs
        }

    def put(self, i: int, key: bytes, value: bytes, timeout: float = 10.0) -> rpc_pb2.PutResponse:
        return self.stub(i).Put(rpc_pb2.PutRequest(key=key, value=value), timeout=timeout)

    def put_retrying(
        self, i: int, key: bytes, value: bytes, timeout: float = 20.0
    ) -> rpc_pb2.PutResponse:
        """Put through node i, retrying while there is no leader (UNAVAILABLE, deadline)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.put(i, key, value, timeout=5.0)
            except grpc.RpcError as exc:
                retriable = exc.code() in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                )
                if not retriable or time.monotonic() >= deadline:
                    raise
            time.sleep(0.1)


@contextlib.contextmanager
def running_cluster(
    root: str | os.PathLike[str],
    n: int = 3,
    timeout: float = 30.0,
    extra_args: Sequence[str] = (),
) -> Iterator[Cluster]:
    """A started, ready cluster, closed (with log tails on an exception) at the end."""
    cluster = Cluster(root, n, extra_args=extra_args)
    failed = True
    try:
        cluster.wait_ready(timeout)
        yield cluster
        failed = False
    finally:
        cluster.close(failed=failed)
