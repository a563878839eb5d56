"""Network namespaces for fault tests: each member in a namespace of its own, a bridge in
another, addresses that exist only inside them, and packet drops with iptables.

Layout (``tag`` is unique per harness: ``<pid in hex>``)::

    mlnet-<tag>-br   bridge br0, 10.77.1.1/24: the clients run here and reach every member
    mlnet-<tag>-n<i> eth0 10.77.1.<11+i>/24, a veth to br0; member i runs here

Nothing here touches the host's own namespace: no interface, route or iptables rule is made
there (``ip netns exec`` and ``ip -n`` only). Deleting a namespace deletes its veth and
both ends go; :func:`remove_stale` deletes the namespaces of harnesses whose process is
gone (a test that died before its cleanup), by name, and only those.

The drops: :meth:`Net.cut` drops packets between two members (in both namespaces), one
way or both, all of them or a random share (iptables' ``statistic`` match); :meth:`Net.heal`
flushes the rules of the members' namespaces. Clients (10.77.1.1) are dropped only by
:meth:`Net.cut_client`.

The delay (this kernel has no ``netem``): :meth:`Net.delay` queues the packets from one
member to another (``-j NFQUEUE --queue-bypass``) to a helper in the receiving member's
namespace (tests/faults/net/nfqdelay.py) that lets each go a set time after it came;
between the clients and a member too (:data:`CLIENTS`: the member's namespace holds what
the clients send, the bridge's what the member answers);
:meth:`Net.heal` removes the rules, then stops the helpers (by PID), which let go of
everything they hold. A helper that is gone lets packets through (``--queue-bypass``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

PREFIX = "mlnet-"
SUBNET = "10.77.1"
CLIENT_IP = f"{SUBNET}.1"
DELAY_QUEUE = 0  # the netfilter queue the delay helper binds in each member's namespace
CLIENTS = -1  # in place of a member in :meth:`Net.delay`: the clients (on the bridge)
_REPO_ROOT = Path(__file__).resolve().parents[3]
_CLONE_NEWNET = 0x40000000


def unavailable_reason() -> str | None:
    """Why these tests cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/test.sh installs iptables)"
    return None


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, check=check, capture_output=True, text=True, timeout=30)


def list_namespaces() -> list[str]:
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def remove_stale() -> list[str]:
    """Delete the namespaces of harnesses whose process no longer runs; return them."""
    removed = []
    for ns in list_namespaces():
        if not ns.startswith(PREFIX):
            continue
        tag = ns[len(PREFIX) :].split("-", 1)[0]
        try:
            pid = int(tag, 16)
        except ValueError:
            continue
        if pid != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            _run("ip", "netns", "del", ns, check=False)
            removed.append(ns)
    return removed


def delay_rule(source_ip: str, queue: int = DELAY_QUEUE) -> tuple[str, ...]:
    """The iptables rule that hands packets from ``source_ip`` to the delay helper on
    ``queue``, and lets them through while no helper is bound."""
    return (
        "-A", "INPUT", "-s", source_ip,
        "-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass",
    )  # fmt: skip


def delay_helper_args(
    delay_ms: int, jitter_ms: int, seed: int, max_s: float, queue: int = DELAY_QUEUE
) -> list[str]:
    """The delay helper's command line (after the interpreter)."""
    return [
        "-m", "tests.faults.net.nfqdelay", "--queue", str(queue), "--delay-ms", str(delay_ms),
        "--jitter-ms", str(jitter_ms), "--seed", str(seed), "--max-s", str(max_s),
    ]  # fmt: skip


class Net:
    """``n`` member namespaces on one bridge. Use as a context manager (or :meth:`close`)."""

    def __init__(self, n: int) -> None:
        remove_stale()
        self.tag = f"{os.getpid():x}"
        self.bridge_ns = f"{PREFIX}{self.tag}-br"
        self.members = [f"{PREFIX}{self.tag}-n{i}" for i in range(n)]
        self.ips = [f"{SUBNET}.{11 + i}" for i in range(n)]
        self._made: list[str] = []
        #: namespace -> (its delay helper, (delay_ms, jitter_ms))
        self._delayers: dict[str, tuple[subprocess.Popen[str], tuple[int, int]]] = {}
        #: the last line of each delay helper stopped (how many packets it held)
        self.delay_reports: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        br = self.bridge_ns
        self._add_ns(br)
        _run("ip", "-n", br, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", br, "addr", "add", f"{CLIENT_IP}/24", "dev", "br0")
        _run("ip", "-n", br, "link", "set", "br0", "up")
        for i, (ns, ip) in enumerate(zip(self.members, self.ips, strict=True)):
            self._add_ns(ns)
            # made inside the member's namespace, the other end moved to the bridge's:
            # the host's namespace never holds either end
            _run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"v{i}")
            _run("ip", "-n", ns, "link", "set", f"v{i}", "netns", br)
            _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", br, "link", "set", f"v{i}", "master", "br0")
            _run("ip", "-n", br, "link", "set", f"v{i}", "up")

    def _add_ns(self, ns: str) -> None:
        _run("ip", "netns", "add", ns)
        self._made.append(ns)
        _run("ip", "-n", ns, "link", "set", "lo", "up")

    @contextlib.contextmanager
    def entered(self, ns: str) -> Iterator[None]:
        """The calling thread in ``ns`` while the block runs (``setns``), then back in its
        own: its sockets, the threads it starts and the processes it spawns meanwhile live
        in ``ns`` (a socket stays in the namespace it was made in). For a test that talks
        to the members from the bridge itself; gRPC's own threads do not follow."""
        libc = ctypes.CDLL(None, use_errno=True)
        with (
            open("/proc/thread-self/ns/net", "rb") as home,
            open(f"/run/netns/{ns}", "rb") as there,
        ):
            if libc.setns(there.fileno(), _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {ns}")
            try:
                yield
            finally:
                if libc.setns(home.fileno(), _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back to the thread's namespace")

    def exec_prefix(self, ns: str) -> list[str]:
        """The command prefix that runs a program inside ``ns``."""
        return ["ip", "netns", "exec", ns]

    # ------------------------------------------------------------------ faults
    def _iptables(self, i: int, *rule: str) -> None:
        self._iptables_in(self.members[i], *rule)

    def _iptables_in(self, ns: str, *rule: str) -> None:
        _run("ip", "netns", "exec", ns, "iptables", "-w", *rule)

    def cut(self, a: int, b: int, *, one_way: bool = False, probability: float = 1.0) -> None:
        """Drop packets from member ``a`` to member ``b`` (and back unless ``one_way``);
        with ``probability`` < 1, that share of them at random."""
        match: tuple[str, ...] = ()
        if probability < 1.0:
            match = ("-m", "statistic", "--mode", "random", "--probability", f"{probability}")
        self._iptables(b, "-A", "INPUT", "-s", self.ips[a], *match, "-j", "DROP")
        if not one_way:
            self._iptables(a, "-A", "INPUT", "-s", self.ips[b], *match, "-j", "DROP")

    def isolate(self, i: int) -> None:
        """Member ``i`` sees nobody: no member, and not the clients on the bridge."""
        self.partition([[i], [j for j in range(len(self.members)) if j != i]])
        self.cut_client(i)

    def cut_client(self, i: int) -> None:
        """Drop every packet from the clients to member ``i`` (their connections to it go
        silent; the member's answers are never acknowledged)."""
        self._iptables(i, "-A", "INPUT", "-s", CLIENT_IP, "-j", "DROP")

    def delay(
        self,
        a: int,
        b: int,
        delay_ms: int,
        jitter_ms: int = 0,
        *,
        one_way: bool = False,
        seed: int = 0,
        max_s: float = 120.0,
    ) -> None:
        """Hold each packet from member ``a`` to member ``b`` (and back unless ``one_way``)
        ``delay_ms`` (give or take up to ``jitter_ms``) before it arrives, without
        reordering, until :meth:`heal` (or ``max_s`` at the latest). One delay per
        receiving namespace: every source delayed into it is delayed alike.

        Either may be :data:`CLIENTS`: the clients' packets to a member are held in the
        member's namespace, the member's answers in the bridge's (where the clients run);
        a rule there matches only packets addressed to the bridge itself, so the
        member-to-member packets it forwards pass."""
        for dst, src in ((b, a),) if one_way else ((b, a), (a, b)):
            ns = self.bridge_ns if dst == CLIENTS else self.members[dst]
            dst_seed = seed + (len(self.members) if dst == CLIENTS else dst)
            self._start_delayer(ns, delay_ms, jitter_ms, dst_seed, max_s)
            self._iptables_in(ns, *delay_rule(CLIENT_IP if src == CLIENTS else self.ips[src]))

    def _start_delayer(
        self, ns: str, delay_ms: int, jitter_ms: int, seed: int, max_s: float
    ) -> None:
        if ns in self._delayers:
            if self._delayers[ns][1] != (delay_ms, jitter_ms):
                raise ValueError(f"{ns} already delays by {self._delayers[ns][1]}")
            return
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_REPO_ROOT), env.get("PYTHONPATH")) if p
        )
        args = delay_helper_args(delay_ms, jitter_ms, seed, max_s)
        proc = subprocess.Popen(
            [*self.exec_prefix(ns), sys.executable, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=_REPO_ROOT,
            start_new_session=True,
        )
        self._delayers[ns] = (proc, (delay_ms, jitter_ms))
        assert proc.stdout is not None
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stdout], [], [], deadline - time.monotonic())[0]:
                line = proc.stdout.readline()
                if line.strip() == "ready":
                    return
                if not line:
                    break
        self._stop_delayers()
        raise RuntimeError(
            f"the delay helper in {ns} did not bind its queue: {self.delay_reports[-1:]}"
        )

    def delay_helpers(self) -> dict[str, int]:
        """The PID of each namespace's running delay helper."""
        return {ns: proc.pid for ns, (proc, _) in self._delayers.items()}

    def _stop_delayers(self) -> None:
        """Stop every delay helper (SIGTERM by PID: it lets its packets go), SIGKILL after
        10 s."""
        for proc, _ in self._delayers.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        for proc, _ in self._delayers.values():
            try:
                out, _ = proc.communicate(timeout=10.0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate(timeout=10.0)
            lines = (out or "").strip().splitlines()
            self.delay_reports.append(lines[-1] if lines else f"exit {proc.returncode}")
        self._delayers.clear()

    def partition(self, groups: Sequence[Sequence[int]]) -> None:
        """Members in different groups do not see each other."""
        for gi, g in enumerate(groups):
            for h in groups[gi + 1 :]:
                for a in g:
                    for b in h:
                        self.cut(a, b)

    def heal(self) -> None:
        for i in range(len(self.members)):
            self._iptables(i, "-F", "INPUT")
            self._iptables(i, "-F", "OUTPUT")
        self._iptables_in(self.bridge_ns, "-F", "INPUT")
        self._stop_delayers()  # after the rules are gone: nothing new is queued

    def unsent(self, i: int, dst: str) -> int:
        """Bytes member ``i``'s TCP sockets to ``dst`` (``ip:port``) hold that ``dst`` has not
        acknowledged (Send-Q, closed sockets the kernel still retransmits from too): what
        may still reach ``dst`` later, a partition's heal later say."""
        out = _run(
            "ip", "netns", "exec", self.members[i], "ss", "-tnH", "state", "all", "dst", dst
        ).stdout
        return sum(int(line.split()[2]) for line in out.splitlines() if line.strip())

    def rules(self) -> dict[str, str]:
        """Each member namespace's iptables rules (for failure messages)."""
        return {
            ns: _run("ip", "netns", "exec", ns, "iptables", "-S", check=False).stdout
            for ns in [*self.members, self.bridge_ns]
        }

    # ------------------------------------------------------------------ cleanup
    def close(self) -> None:
        """Delete this harness's namespaces (their interfaces and rules go with them).
        Stop the processes inside first: a namespace with a process left lingers."""
        self._stop_delayers()
        for ns in reversed(self._made):
            _run("ip", "netns", "del", ns, check=False)
        self._made.clear()

    def __enter__(self) -> Net:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
