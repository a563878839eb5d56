"""One seeded partition run against a quorum-write broker group in network namespaces.

Layout: replica i of group ``netgrp`` (``metaledger broker``, SYNC_MASTER, policy 3
replicas / 2 in sync / no automatic shrinking, 2 s replica heartbeat timeout) in member
namespace i (0-2), the metaledger node in member namespace 3, the clients on the bridge
(:mod:`tests.faults.net.broker_client`): a producer with one worker per queue that reaches
every replica, and a drain after the last heal that pulls every queue from the master.
After a warm-up, faults from :mod:`tests.faults.net.broker_nemesis` in the given order,
each held ``fault_s`` and healed for ``healed_s``.

What it checks (:meth:`BrokerRunResult.problems`): the total queue, one master per epoch
and no read taken back (:mod:`tests.faults.net.broker_checker`; the producer process also
runs a consumer that pulls from every replica in turn); after every heal a send is
acknowledged within ``recover_s`` and the in-sync set holds all three replicas again within
``isr_s``; after the warm-up no stretch longer than ``gap_s`` goes without an acknowledged
send.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from broker.ha.epochs import FILE_NAME as EPOCH_FILE
from broker.ha.epochs import parse as parse_epochs
from raftlog.native.auth import create_password_file
from tests.faults.net import broker_checker as bc
from tests.faults.net.broker_nemesis import FAULTS, META, REPLICAS
from tests.faults.net.netns import Net
from tests.faults.net.run import (
    CLIENT_PORT,
    PEER_PORT,
    REPO_ROOT,
    _env,
    begin_run,
    campaign_faults,
    hold_faults,
    serve_args,
    spawn,
    stop_all,
)

GROUP = "netgrp"
BROKER_PORT = 10911


@dataclass
class BrokerPhase:
    fault: str
    description: str
    start: float
    heal: float
    master_before: str = ""
    #: heal to the first acknowledged send started after it (None: none in time)
    recovery_s: float | None = None
    #: heal to the in-sync set holding all three replicas again (None: not in time)
    isr_s: float | None = None


@dataclass
class BrokerRunResult:
    seed: int
    sends: int
    acked: int
    uncertain: int
    stored: int
    #: messages a consumer pulled while the faults ran
    read: int
    epochs: list[tuple[int, int]]
    masters: dict[int, list[str]]
    problems_found: list[str]
    phases: list[BrokerPhase]
    longest_gap_s: float
    longest_gap_at_s: float
    settle_s: float
    recover_s: float
    isr_s: float
    gap_s: float

    def problems(self) -> list[str]:
        out = list(self.problems_found)
        for ph in self.phases:
            if ph.recovery_s is None or ph.recovery_s > self.recover_s:
                out.append(f"no send acknowledged {ph.recovery_s} s after healing {ph.description}")
            if ph.isr_s is None or ph.isr_s > self.isr_s:
                out.append(f"in-sync set whole again {ph.isr_s} s after healing {ph.description}")
        if self.longest_gap_s > self.gap_s:
            out.append(
                f"no send acknowledged for {self.longest_gap_s:.2f} s "
                f"(from {self.longest_gap_at_s:.1f} s in)"
            )
        return out

    def summary(self) -> dict[str, object]:
        d = asdict(self)
        d["worst_recovery_s"] = max(
            (p.recovery_s if p.recovery_s is not None else float("inf") for p in self.phases),
            default=0.0,
        )
        d["problems"] = self.problems()
        return d


class BrokerNet:
    """The metaledger node and the three replicas, each in its member namespace."""

    def __init__(self, net: Net, root: Path, code_tree: Path = REPO_ROOT) -> None:
        self.net, self.root, self.code_tree = net, root, code_tree
        self.meta_ip = net.ips[META]
        self.endpoint = f"{self.meta_ip}:{CLIENT_PORT}"
        self.addrs = [f"{net.ips[i]}:{BROKER_PORT}" for i in REPLICAS]
        self.procs: list[subprocess.Popen[bytes] | None] = []

    def _spawn(self, member: int, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        p = spawn(self.net, self.net.members[member], self.root, name, args, self.code_tree)
        self.procs.append(p)
        return p

    def start_meta(self) -> None:
        ip = self.meta_ip
        password = self.root / "cluster-password"
        create_password_file(password)
        initial = f"m0={ip}:{PEER_PORT}"
        self._spawn(META, "meta", serve_args("m0", ip, self.root / "meta", initial, password))

    def start_replica(self, i: int) -> None:
        self._spawn(
            i,
            f"r{i}",
            [
                "nameserver.cli", "broker", "--group", GROUP, "--cluster", "netfault",
                "--data-dir", str(self.data_dir(i)), "--listen", self.addrs[i],
                "--listen-grpc", "off", "--endpoints", self.endpoint,
                "--broker-role", "SYNC_MASTER", "--replica-heartbeat-timeout-ms", "2000",
                "--slave-timeout-ms", "2000", "--flush", "ASYNC_FLUSH",
            ],
        )  # fmt: skip

    def data_dir(self, i: int) -> Path:
        return self.root / f"r{i}"

    def client_args(self, command: str, *extra: str) -> list[str]:
        """``python -m`` arguments of a :mod:`tests.faults.net.broker_client` command."""
        return [
            "tests.faults.net.broker_client", command,
            "--endpoint", self.endpoint, "--group", GROUP, "--replicas", ",".join(self.addrs),
            *extra,
        ]  # fmt: skip

    def client_cmd(self, command: str, *extra: str) -> list[str]:
        """The whole command line of a client command, run on the bridge."""
        prefix = self.net.exec_prefix(self.net.bridge_ns)
        return [*prefix, sys.executable, "-m", *self.client_args(command, *extra)]

    def start(self, timeout: float = 120.0) -> None:
        """metaledger, replica 0 (the group's first master), the policy, then the others;
        returns once all three are in the in-sync set and the topic exists."""
        self.start_meta()
        self.start_replica(0)
        setup = subprocess.Popen(
            self.client_cmd("setup"), stdout=subprocess.PIPE, env=_env(), start_new_session=True
        )
        try:
            assert setup.stdout is not None
            line = setup.stdout.readline()
            assert b"policy" in line, f"setup: {line!r}; {self.log_tail('r0')}"
            for i in REPLICAS[1:]:
                self.start_replica(i)
            line = setup.stdout.readline()
            assert b"ready" in line, f"setup: {line!r}; {self.log_tail('r1')}"
            assert setup.wait(timeout) == 0
        finally:
            stop_all([setup])

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.root / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        stop_all(list(reversed(self.procs)))  # the replicas before metaledger


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(ValueError):
            rows.append(json.loads(line))
    return rows


def _current_master(history: Path, addrs: list[str]) -> int:
    groups = [r["group"] for r in _read_jsonl(history) if "group" in r]
    master = groups[-1]["master"] if groups else ""
    return addrs.index(master) if master in addrs else 0


def _isr_back(groups: list[dict[str, Any]], heal: float, until: float) -> float | None:
    before = [g for g in groups if g["t"] <= heal]
    if before and len(before[-1]["isr"]) == 3:
        return 0.0
    after = [g for g in groups if heal < g["t"] <= until and len(g["isr"]) == 3]
    return after[0]["t"] - heal if after else None


def run_broker_once(
    root: Path,
    seed: int,
    faults: list[str],
    *,
    warmup_s: float = 3.0,
    fault_s: float = 10.0,
    healed_s: float = 8.0,
    recover_s: float = 5.0,
    isr_s: float = 10.0,
    gap_s: float = 5.0,
    code_tree: Path = REPO_ROOT,
) -> BrokerRunResult:
    """One run: the ``faults`` in order (names from :data:`broker_nemesis.FAULTS`)."""
    rng = begin_run(root, seed)
    phases: list[BrokerPhase] = []
    history = root / "history.jsonl"
    drained = root / "stored.jsonl"
    with Net(len(REPLICAS) + 1) as net:
        group = BrokerNet(net, root, code_tree)
        producer: list[subprocess.Popen[bytes] | None] = []
        try:
            group.start()
            args = group.client_args("produce", "--out", str(history))
            producer.append(spawn(net, net.bridge_ns, root, "producer", args))
            began, held, ended = hold_faults(
                net,
                faults,
                FAULTS,
                lambda: _current_master(history, group.addrs),
                rng,
                warmup_s,
                fault_s,
                healed_s,
            )
            phases += [
                BrokerPhase(h.fault, h.description, h.start, h.heal, group.addrs[h.target])
                for h in held
            ]
            stop_all(producer)
            drain = subprocess.run(
                group.client_cmd("drain", "--out", str(drained)),
                capture_output=True,
                text=True,
                env=_env(),
                timeout=180,
            )
            assert drain.returncode == 0, f"drain: {drain.stderr[-2000:]}"
        finally:
            stop_all(producer)
            group.close()
    rows = _read_jsonl(history)
    sends = [bc.Send(**{k: r[k] for k in _SEND_FIELDS if k in r}) for r in rows if "id" in r]
    groups = [r["group"] for r in rows if "group" in r]
    out = _read_jsonl(drained)
    done = next(r["done"] for r in out if "done" in r)
    stored = [bc.Stored(**r) for r in out if "id" in r]
    master_addr = done["group"]["master"]
    epoch_path = group.data_dir(group.addrs.index(master_addr)) / "store" / EPOCH_FILE
    epochs = [(e.epoch, e.start_offset) for e in parse_epochs(epoch_path.read_text())]
    states = [bc.GroupState(g["t"], g["master"], g["epoch"]) for g in groups]
    reads = [r for r in rows if "seen" in r]
    seen = [bc.Stored(r["seen"], r["q"], r["queue_offset"], r["phys"], r["crc"]) for r in reads]
    found = bc.check_queue(sends, stored) + bc.check_masters(sends, epochs, states)
    found += bc.check_reads(seen, stored, [r["replica"] for r in reads])
    for ph in phases:
        ph.recovery_s = bc.recovery(sends, ph.heal, ph.heal + healed_s)
        ph.isr_s = _isr_back(groups, ph.heal, ph.heal + healed_s)
    gap, gap_at = bc.longest_gap(sends, began + warmup_s, ended)
    masters: dict[int, set[str]] = {}
    for s in states:
        masters.setdefault(s.epoch, set()).add(s.master)
    return BrokerRunResult(
        seed=seed,
        sends=len(sends),
        acked=sum(1 for s in sends if s.status == "ok"),
        uncertain=sum(1 for s in sends if s.status == "info"),
        stored=len(stored),
        read=len(seen),
        epochs=epochs,
        masters={e: sorted(m) for e, m in sorted(masters.items())},
        problems_found=found,
        phases=phases,
        longest_gap_s=round(gap, 3),
        longest_gap_at_s=round(gap_at - began, 1),
        settle_s=round(float(done["settled_s"]), 2),
        recover_s=recover_s,
        isr_s=isr_s,
        gap_s=gap_s,
    )


_SEND_FIELDS = (
    "id", "q", "seq", "crc", "replica", "start", "end", "status", "queue_offset", "phys",
)  # fmt: skip


def campaign(args: argparse.Namespace) -> int:
    """``python -m tests.faults.net.run --workload broker``: ``--runs`` seeded runs, the
    faults rotating from each seed; a line per run, the totals in ``--out``."""
    results: list[BrokerRunResult] = []
    for k in range(args.runs):
        seed = args.seed + k
        faults = campaign_faults(
            seed, args.seconds, args.fault_s, args.healed_s, getattr(args, "faults", None) or FAULTS
        )
        root = Path(args.dir) / f"broker-seed-{seed}-{int(time.time())}"
        res = run_broker_once(
            root,
            seed,
            faults,
            fault_s=args.fault_s,
            healed_s=args.healed_s,
            code_tree=args.code_tree,
        )
        results.append(res)
        problems = res.problems()
        print(
            f"seed {seed}: {res.sends} sends, {res.acked} acknowledged, "
            f"{len(res.masters)} master epochs, worst recovery {res.summary()['worst_recovery_s']}"
            f" s, longest gap {res.longest_gap_s} s, "
            f"{'ok' if not problems else 'PROBLEMS ' + '; '.join(problems)}",
            flush=True,
        )
        totals = {
            "workload": "broker",
            "runs": len(results),
            "sends": sum(r.sends for r in results),
            "acknowledged": sum(r.acked for r in results),
            "lost_or_misplaced": sum(
                1 for r in results for p in r.problems_found if "acknowledged" in p
            ),
            "worst_recovery_s": max(float(str(r.summary()["worst_recovery_s"])) for r in results),
            "longest_gap_s": max(r.longest_gap_s for r in results),
            "failed_runs": [r.seed for r in results if r.problems()],
            "results": [r.summary() for r in results],
        }
        Path(args.out).write_text(json.dumps(totals, indent=1, default=str) + "\n")
    return 0 if all(not r.problems() for r in results) else 1
