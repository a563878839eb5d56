"""One seeded partition run against a 3-node metaledger cluster in network namespaces,
and a campaign of them.

A run: every node in its own namespace (:mod:`tests.faults.net.netns`), one client per
node in the bridge's namespace (:mod:`tests.faults.net.client`) putting and reading keys
linearizably throughout; after a warm-up, faults from :mod:`tests.faults.net.nemesis` in
the seed's order, each held ``fault_s`` and then healed for ``healed_s``. What it checks
(:func:`RunResult.problems`): no key's history is non-linearizable, every node serves a
write again within ``recover_s`` of every heal, and no stretch longer than ``gap_s`` goes
without an acknowledged write.

    python -m tests.faults.net.run --runs 3 --seconds 60 --seed 1 --out results.json

``--workload broker`` runs a quorum-write broker group instead
(:mod:`tests.faults.net.broker_run`), with the same seeds and schedule. ``--target etcd``
runs etcd 3.4 members in place of metaledger's nodes, ``--target both`` metaledger and then
etcd on each seed, with a table of both per fault (:mod:`tests.faults.net.etcd_run`).
``--faults loss,delay`` rotates through those faults only (to study one: each run then
holds as many of them as fit).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from raftlog.native.auth import create_password_file
from tests.faults.net import checker
from tests.faults.net.nemesis import FAULTS
from tests.faults.net.netns import Net, unavailable_reason
from tests.harness import stop_processes

REPO_ROOT = Path(__file__).resolve().parents[3]
CLIENT_PORT, PEER_PORT, REMOTING_PORT, METRICS_PORT = 2379, 2380, 2381, 2382
#: The pytest runs' schedule (tests/faults/net/test_partitions.py,
#: test_broker_partitions.py): every fault once, each held 6 s (past the 4 s after which a
#: member gives up a silent peer connection, so the redial after the heal is what recovers)
#: and healed 6 s (past the 5 s within which every node must serve again). The campaign
#: (``main``) keeps its longer 10 s and 8 s.
TEST_FAULT_S, TEST_HEALED_S = 6.0, 6.0


def _env(code_tree: Path = REPO_ROOT) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(code_tree), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("METALEDGER_PARENT_PID", None)
    return env


def spawn(
    net: Net, ns: str, root: Path, name: str, args: Sequence[str], code_tree: Path = REPO_ROOT
) -> subprocess.Popen[bytes]:
    """``python -m <args>`` in namespace ``ns`` of ``net`` and a session of its own, running
    the code of ``code_tree``, its output appended to ``<root>/<name>.log``."""
    cmd = [*net.exec_prefix(ns), sys.executable, "-m", *args]
    with open(root / f"{name}.log", "ab") as out:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=root,
            env=_env(code_tree),
            start_new_session=True,
        )


def serve_args(
    node_id: str, ip: str, data_dir: Path, initial_cluster: str, password_file: Path
) -> list[str]:
    """``nameserver.cli serve`` for a node at ``ip``, on this harness's ports."""
    return [
        "nameserver.cli", "serve", "--id", node_id, "--data-dir", str(data_dir),
        "--listen-client", f"{ip}:{CLIENT_PORT}", "--listen-peer", f"{ip}:{PEER_PORT}",
        "--listen-remoting", f"{ip}:{REMOTING_PORT}", "--listen-metrics", f"{ip}:{METRICS_PORT}",
        "--initial-cluster", initial_cluster, "--cluster-password-file", str(password_file),
    ]  # fmt: skip


class NetCluster:
    """``n`` metaledger nodes, node i in ``net.members[i]`` at ``net.ips[i]``, running the
    code of ``code_tree`` (another checkout: a baseline to compare with); ``n``: every member
    of ``net`` unless given (the others run something else)."""

    def __init__(
        self,
        net: Net,
        root: Path,
        code_tree: Path = REPO_ROOT,
        n: int | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        """``extra``: more ``serve`` flags for every node (``--peer-paths 2``)."""
        self.net, self.root, self.code_tree, self.extra = net, root, code_tree, extra
        self.n = len(net.members) if n is None else n
        self.password_file = root / "cluster-password"
        create_password_file(self.password_file)
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * self.n
        self.initial = ",".join(f"n{i}={ip}:{PEER_PORT}" for i, ip in enumerate(net.ips[: self.n]))

    @property
    def endpoints(self) -> list[str]:
        return [f"{ip}:{CLIENT_PORT}" for ip in self.net.ips[: self.n]]

    def start(self, i: int) -> None:
        args = serve_args(
            f"n{i}", self.net.ips[i], self.root / f"n{i}", self.initial, self.password_file
        ) + list(self.extra)
        self.procs[i] = spawn(
            self.net, self.net.members[i], self.root, f"n{i}", args, self.code_tree
        )

    #: more arguments of ``tests.faults.net.client status`` (an etcd cluster's: ``--etcd``)
    status_args: tuple[str, ...] = ()

    def statuses(self) -> list[dict[str, object]]:
        """Each node's Admin.Status, asked from the bridge's namespace."""
        out = subprocess.run(
            [
                *self.net.exec_prefix(self.net.bridge_ns),
                sys.executable,
                "-m",
                "tests.faults.net.client",
                "status",
                *self.status_args,
                *self.endpoints,
            ],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=60,
        ).stdout
        rows: list[dict[str, object]] = [json.loads(line) for line in out.splitlines() if line]
        return rows

    def leader(self, timeout: float) -> int:
        """The node every node names as leader (it says so itself), waiting for one."""
        deadline = time.monotonic() + timeout
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            for i, p in enumerate(self.procs):
                if p is not None and p.poll() is not None:
                    raise AssertionError(f"n{i} exited with {p.returncode}: {self.log_tail(i)}")
            rows = self.statuses()
            leaders = {r.get("leader") for r in rows}
            if len(rows) == self.n and len(leaders) == 1 and "" not in leaders:
                name = leaders.pop()
                ids = [r.get("id") for r in rows]
                if name in ids and rows[ids.index(name)].get("role") == "leader":
                    return ids.index(name)
            time.sleep(0.2)  # polling a condition with a deadline
        raise AssertionError(f"no agreed leader within {timeout} s: {rows}")

    def log_tail(self, i: int, lines: int = 30) -> str:
        path = self.root / f"n{i}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        stop_all(self.procs)


def stop_all(procs: list[subprocess.Popen[bytes] | None]) -> None:
    """Stop each (by PID: SIGTERM, then SIGKILL of its group after 15 s)."""
    stop_processes(procs, timeout=15.0)


def begin_run(root: Path, seed: int) -> random.Random:
    """A run's checks that it can run here, its directory, and the seed's generator."""
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    root.mkdir(parents=True, exist_ok=True)
    return random.Random(seed)


@dataclass(frozen=True)
class Held:
    """One fault as it was held: against which member, from ``start`` until ``heal``."""

    fault: str
    description: str
    target: int
    start: float
    heal: float


def hold_faults(
    net: Net,
    faults: list[str],
    table: Mapping[str, Callable[[Net, int, random.Random], str]],
    target: Callable[[], int],
    rng: random.Random,
    warmup_s: float,
    fault_s: float,
    healed_s: float,
) -> tuple[float, list[Held], float]:
    """After ``warmup_s``, each of ``faults`` (from ``table``) against the member
    ``target()`` names then, held ``fault_s``, healed, and ``healed_s`` healed;
    (when the warm-up began, the faults as held, when the last healed time ended)."""
    waiter = threading.Event()  # never set: its wait() holds a phase for its length
    began = time.monotonic()
    waiter.wait(warmup_s)
    held = []
    for name in faults:
        who = target()
        start = time.monotonic()
        description = table[name](net, who, rng)
        waiter.wait(fault_s)
        net.heal()
        held.append(Held(name, description, who, start, time.monotonic()))
        waiter.wait(healed_s)
    return began, held, time.monotonic()


@dataclass
class Phase:
    fault: str
    description: str
    start: float
    heal: float
    #: seconds from the heal to each node's first acknowledged write (None: none in time)
    recovery_s: list[float | None] = field(default_factory=list)
    #: from the fault's start to the end of its healed time: the operations that started,
    #: the keys with an anomaly that were used, the longest time with no acknowledged write
    ops: int = 0
    anomalies: int = 0
    longest_gap_s: float = 0.0
    #: each node's first read after the heal: (status, seconds it took); None: none
    first_read: list[tuple[str, float] | None] = field(default_factory=list)


@dataclass
class RunResult:
    seed: int
    ops: int
    ok_writes: int
    uncertain_writes: int
    anomalies: list[str]
    phases: list[Phase]
    longest_gap_s: float
    longest_gap_at_s: float  # seconds since the clients started
    recover_s: float
    gap_s: float

    def problems(self) -> list[str]:
        out = [f"not linearizable: {a}" for a in self.anomalies]
        for ph in self.phases:
            for i, r in enumerate(ph.recovery_s):
                if r is None or r > self.recover_s:
                    out.append(f"n{i} served again {r} s after healing {ph.description}")
        if self.longest_gap_s > self.gap_s:
            out.append(
                f"no write acknowledged for {self.longest_gap_s:.2f} s "
                f"(from {self.longest_gap_at_s:.1f} s in)"
            )
        return out

    def summary(self) -> dict[str, object]:
        d = asdict(self)
        d["worst_recovery_s"] = max(
            (r if r is not None else float("inf") for ph in self.phases for r in ph.recovery_s),
            default=0.0,
        )
        d["problems"] = self.problems()
        return d


def run_once(
    root: Path,
    seed: int,
    faults: list[str],
    *,
    n: int = 3,
    warmup_s: float = 3.0,
    fault_s: float = 10.0,
    healed_s: float = 8.0,
    recover_s: float = 5.0,
    gap_s: float = 5.0,
    code_tree: Path = REPO_ROOT,
    cluster_type: Callable[[Net, Path], NetCluster] | None = None,
) -> RunResult:
    """One run: the ``faults`` in order (names from :data:`FAULTS`), against metaledger's
    nodes running ``code_tree``, or the cluster ``cluster_type(net, root)`` makes
    (:class:`tests.faults.net.etcd_run.EtcdNetCluster`)."""
    rng = begin_run(root, seed)
    phases: list[Phase] = []
    clients: list[subprocess.Popen[bytes] | None] = []
    with Net(n) as net:
        cluster = (
            NetCluster(net, root, code_tree) if cluster_type is None else cluster_type(net, root)
        )
        try:
            for i in range(n):
                cluster.start(i)
            cluster.leader(60)
            for i, ep in enumerate(cluster.endpoints):
                args = [
                    "tests.faults.net.client", "ops", "--endpoint", ep, "--proc", str(i),
                    "--seed", str(seed), "--out", str(root / f"history-{i}.jsonl"),
                ]  # fmt: skip
                clients.append(spawn(net, net.bridge_ns, root, f"client-{i}", args))
            began, held, ended = hold_faults(
                net, faults, FAULTS, lambda: cluster.leader(30), rng, warmup_s, fault_s, healed_s
            )
            phases += [Phase(h.fault, h.description, h.start, h.heal) for h in held]
        finally:
            stop_all(clients)
            cluster.close()
    ops = []
    for i in range(n):
        path = root / f"history-{i}.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            with contextlib.suppress(ValueError):
                ops.append(checker.Op(*json.loads(line)))
    anomalies = checker.check(ops)
    bad = {a.key for a in anomalies}
    for ph in phases:
        ph.recovery_s = [
            checker.recovery(ops, i, ph.heal, ph.heal + healed_s + 30) for i in range(n)
        ]
        ph.first_read = [checker.first_read(ops, i, ph.heal) for i in range(n)]
        during = [o for o in ops if ph.start <= o.start < ph.heal + healed_s]
        ph.ops = len(during)
        ph.anomalies = len({o.key for o in during} & bad)
        ph.longest_gap_s = round(checker.longest_gap(ops, ph.start, ph.heal + healed_s)[0], 3)
    gap, gap_at = checker.longest_gap(ops, began + warmup_s, ended)
    return RunResult(
        seed=seed,
        ops=len(ops),
        ok_writes=sum(1 for o in ops if o.kind == "w" and o.status == "ok"),
        uncertain_writes=sum(1 for o in ops if o.kind == "w" and o.status == "info"),
        anomalies=[f"{a.key}: {a.reason}" for a in anomalies],
        phases=phases,
        longest_gap_s=round(gap, 3),
        longest_gap_at_s=round(gap_at - began, 1),
        recover_s=recover_s,
        gap_s=gap_s,
    )


def campaign_faults(
    seed: int, seconds: float, fault_s: float, healed_s: float, faults: Iterable[str] = FAULTS
) -> list[str]:
    """The faults of one run of the campaign: as many as fit, rotating from the seed."""
    count = max(1, int((seconds - 3.0) // (fault_s + healed_s)))
    names = sorted(faults)
    first = random.Random(seed).randrange(len(names))
    return [names[(first + k) % len(names)] for k in range(count)]


def campaign_run(
    args: argparse.Namespace,
    seed: int,
    faults: list[str],
    name: str = "seed",
    cluster_type: Callable[[Net, Path], NetCluster] | None = None,
) -> RunResult:
    """One run of a campaign, in ``<--dir>/<name>-<seed>-<time>``."""
    root = Path(args.dir) / f"{name}-{seed}-{int(time.time())}"
    paths = getattr(args, "peer_paths", None)
    if cluster_type is None and paths is not None:
        extra = ("--peer-paths", str(paths))

        def cluster_type(net: Net, root: Path) -> NetCluster:
            return NetCluster(net, root, args.code_tree, extra=extra)

    return run_once(
        root,
        seed,
        faults,
        fault_s=args.fault_s,
        healed_s=args.healed_s,
        code_tree=args.code_tree,
        cluster_type=cluster_type,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests.faults.net.run", description=__doc__)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1, help="run k uses seed + k")
    p.add_argument("--seconds", type=float, default=60.0, help="each run's fault schedule")
    p.add_argument("--fault-s", type=float, default=10.0)
    p.add_argument("--healed-s", type=float, default=8.0)
    p.add_argument("--dir", default="/tmp/metaledger-net-runs", help="data dirs and logs")
    p.add_argument("--out", required=True, help="the summary (JSON)")
    p.add_argument(
        "--code-tree",
        type=Path,
        default=REPO_ROOT,
        help="the checkout whose server code the nodes run (default: this one)",
    )
    p.add_argument(
        "--workload",
        choices=["keys", "broker"],
        default="keys",
        help="keys: a 3-node metaledger cluster; broker: a quorum-write broker group "
        "(tests/faults/net/broker_run.py)",
    )
    p.add_argument(
        "--target",
        choices=["metaledger", "etcd", "both"],
        default="metaledger",
        help="the keys workload's members: metaledger's nodes, etcd 3.4 (/usr/bin/etcd), or "
        "both, one after the other on each seed (tests/faults/net/etcd_run.py)",
    )
    p.add_argument(
        "--peer-paths",
        type=int,
        help="the keys workload's nodes keep this many connections to each peer "
        "(serve --peer-paths; default: serve's, 2)",
    )
    p.add_argument(
        "--faults",
        type=lambda text: [f for f in text.split(",") if f],
        default=None,
        help="rotate through these faults only (comma-separated; default: all of the workload's)",
    )
    args = p.parse_args(argv)
    if args.faults is not None:
        from tests.faults.net.broker_nemesis import FAULTS as BROKER_FAULTS

        known = BROKER_FAULTS if args.workload == "broker" else FAULTS
        unknown = [f for f in args.faults if f not in known]
        if unknown or not args.faults:
            p.error(
                f"--faults: unknown {', '.join(unknown) or '(none given)'}; the "
                f"{args.workload} workload's are {', '.join(sorted(known))}"
            )
    if args.workload == "broker":
        from tests.faults.net.broker_run import campaign

        return campaign(args)
    if args.target != "metaledger":
        from tests.faults.net.etcd_run import side_by_side

        return side_by_side(args)
    results: list[RunResult] = []
    for k in range(args.runs):
        seed = args.seed + k
        faults = campaign_faults(
            seed, args.seconds, args.fault_s, args.healed_s, args.faults or FAULTS
        )
        res = campaign_run(args, seed, faults)
        results.append(res)
        worst = res.summary()["worst_recovery_s"]
        print(
            f"seed {seed}: {res.ops} ops, {len(res.anomalies)} anomalies, worst recovery "
            f"{worst} s, longest gap {res.longest_gap_s} s, "
            f"{'ok' if not res.problems() else 'PROBLEMS ' + '; '.join(res.problems())}",
            flush=True,
        )
        Path(args.out).write_text(json.dumps(totals(results), indent=1) + "\n")
    return 0 if all(not r.problems() for r in results) else 1


def totals(runs: list[RunResult]) -> dict[str, object]:
    summaries = [r.summary() for r in runs]
    return {
        "runs": len(runs),
        "ops": sum(r.ops for r in runs),
        "anomalies": sum(len(r.anomalies) for r in runs),
        "worst_recovery_s": max(float(str(s["worst_recovery_s"])) for s in summaries),
        "longest_gap_s": max(r.longest_gap_s for r in runs),
        "failed_runs": [r.seed for r in runs if r.problems()],
        "results": summaries,
    }


if __name__ == "__main__":
    sys.exit(main())
