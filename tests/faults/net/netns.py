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
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

PREFIX = "mlnet-"
SUBNET = "10.77.1"
CLIENT_IP = f"{SUBNET}.1"


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


class Net:
    """``n`` member namespaces on one bridge. Use as a context manager (or :meth:`close`)."""

    def __init__(self, n: int) -> None:
        remove_stale()
        self.tag = f"{os.getpid():x}"
        self.bridge_ns = f"{PREFIX}{self.tag}-br"
        self.members = [f"{PREFIX}{self.tag}-n{i}" for i in range(n)]
        self.ips = [f"{SUBNET}.{11 + i}" for i in range(n)]
        self._made: list[str] = []
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

    def exec_prefix(self, ns: str) -> list[str]:
        """The command prefix that runs a program inside ``ns``."""
        return ["ip", "netns", "exec", ns]

    # ------------------------------------------------------------------ faults
    def _iptables(self, i: int, *rule: str) -> None:
        _run("ip", "netns", "exec", self.members[i], "iptables", "-w", *rule)

    def cut(self, a: int, b: int, *, one_way: bool = False, probability: float = 1.0) -> None:
        """Drop packets from member ``a`` to member ``b`` (and back unless ``one_way``);
        with ``probability`` < 1, that share of them at random."""
        match: tuple[str, ...] = ()
        if probability < 1.0:
            match = ("-m", "statistic", "--mode", "random", "--probability", f"{probability}")
        self._iptables(b, "-A", "INPUT", "-s", self.ips[a], *match, "-j", "DROP")
        if not one_way:
            self._iptables(a, "-A", "INPUT", "-s", self.ips[b], *match, "-j", "DROP")

    def cut_client(self, i: int) -> None:
        """Drop every packet from the clients to member ``i`` (their connections to it go
        silent; the member's answers are never acknowledged)."""
        self._iptables(i, "-A", "INPUT", "-s", CLIENT_IP, "-j", "DROP")

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

    def rules(self) -> dict[str, str]:
        """Each member namespace's iptables rules (for failure messages)."""
        return {
            ns: _run("ip", "netns", "exec", ns, "iptables", "-S", check=False).stdout
            for ns in self.members
        }

    # ------------------------------------------------------------------ cleanup
    def close(self) -> None:
        """Delete this harness's namespaces (their interfaces and rules go with them).
        Stop the processes inside first: a namespace with a process left lingers."""
        for ns in reversed(self._made):
            _run("ip", "netns", "del", ns, check=False)
        self._made.clear()

    def __enter__(self) -> Net:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
