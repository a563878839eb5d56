"""A 3-member etcd 3.4 cluster (``/usr/bin/etcd``) in the fault harness's namespaces, in
place of metaledger's nodes: the same namespaces, nemesis, clients and checks
(:mod:`tests.faults.net.run`, ``--target etcd``), so a run shows what a known-good system
does under the same faults, and that the checker and the nemesis find nothing there.

Member i runs in ``net.members[i]`` at ``net.ips[i]`` on the ports metaledger's node would
use (client 2379, peer 2380), with etcd 3.4's defaults otherwise (100 ms heartbeats, 1 s
election timeout, no pre-vote) and the flags of the repository's other etcd harnesses
(``tests/etcd_harness.py``, ``bench/compare_etcd.py``). Its log is ``<root>/n<i>.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

from tests.etcd_harness import ETCD
from tests.faults.net.nemesis import FAULTS
from tests.faults.net.netns import Net
from tests.faults.net.run import (
    CLIENT_PORT,
    PEER_PORT,
    NetCluster,
    RunResult,
    campaign_faults,
    campaign_run,
    totals,
)


def etcd_args(i: int, ip: str, data_dir: Path, initial_cluster: str, token: str) -> list[str]:
    """etcd's flags for member ``n<i>`` at ``ip``."""
    client, peer = f"http://{ip}:{CLIENT_PORT}", f"http://{ip}:{PEER_PORT}"
    return [
        f"--name=n{i}", f"--data-dir={data_dir}",
        f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster={initial_cluster}", "--initial-cluster-state=new",
        f"--initial-cluster-token={token}",
    ]  # fmt: skip


class EtcdNetCluster(NetCluster):
    """``n`` etcd members, member i in ``net.members[i]`` at ``net.ips[i]``."""

    status_args = ("--etcd",)

    def __init__(self, net: Net, root: Path) -> None:
        super().__init__(net, root)
        self.initial = ",".join(f"n{i}=http://{ip}:{PEER_PORT}" for i, ip in enumerate(net.ips))
        self.token = f"mlnet-etcd-{os.getpid()}"

    def start(self, i: int) -> None:
        args = etcd_args(i, self.net.ips[i], self.root / f"n{i}", self.initial, self.token)
        with open(self.root / f"n{i}.log", "ab") as out:
            self.procs[i] = subprocess.Popen(
                [*self.net.exec_prefix(self.net.members[i]), ETCD, *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,
            )


TARGETS = {"metaledger": None, "etcd": EtcdNetCluster}


def fault_rows(target: str, res: RunResult) -> list[dict[str, object]]:
    """One row per fault of a run: its operations, the keys with an anomaly, the longest
    time with no write acknowledged, and when the last member served again after the heal
    (None: one did not within the healed time and 30 s more)."""
    rows: list[dict[str, object]] = []
    for k, ph in enumerate(res.phases):
        served = None if None in ph.recovery_s else max(r for r in ph.recovery_s if r is not None)
        rows.append(
            {
                "seed": res.seed,
                "k": k,
                "fault": ph.fault,
                "target": target,
                "ops": ph.ops,
                "anomalies": ph.anomalies,
                "longest_gap_s": ph.longest_gap_s,
                "all_serving_s": None if served is None else round(served, 2),
                "description": ph.description,
            }
        )
    return rows


def table(rows: list[dict[str, object]]) -> str:
    """The rows as a Markdown table, the faults of each seed in the order they were held,
    metaledger's and etcd's rows of a fault side by side."""
    head = "| seed | fault | target | ops | anomalies | longest with no write acknowledged (s) "
    head += "| every member serving after the heal (s) |\n|---|---|---|---|---|---|---|\n"
    body = "".join(
        f"| {r['seed']} | {r['fault']} | {r['target']} | {r['ops']} | {r['anomalies']} | "
        f"{r['longest_gap_s']} | {'-' if r['all_serving_s'] is None else r['all_serving_s']} |\n"
        for r in sorted(rows, key=lambda r: (r["seed"], r["k"], r["target"] != "metaledger"))
    )
    return head + body


def judged(target: str, res: RunResult) -> list[str]:
    """What fails a run: every check for metaledger; for etcd, the reference, only
    anomalies (its availability is reported: etcd 3.4 without pre-vote may lose its
    leader for seconds when a member returns)."""
    if target == "etcd":
        return [f"not linearizable: {a}" for a in res.anomalies]
    return res.problems()


def side_by_side(args: argparse.Namespace) -> int:
    """``python -m tests.faults.net.run --target etcd|both``: ``--runs`` seeded runs, each
    seed's faults against each target in turn (metaledger first); a line per run, the table
    per fault at the end, both in ``--out``."""
    targets = ["metaledger", "etcd"] if args.target == "both" else [args.target]
    results: dict[str, list[RunResult]] = {t: [] for t in targets}
    rows: list[dict[str, object]] = []
    for k in range(args.runs):
        seed = args.seed + k
        faults = campaign_faults(
            seed, args.seconds, args.fault_s, args.healed_s, getattr(args, "faults", None) or FAULTS
        )
        for target in targets:
            res = campaign_run(args, seed, faults, f"{target}-seed", TARGETS[target])
            results[target].append(res)
            rows += fault_rows(target, res)
            problems = judged(target, res)
            print(
                f"{target} seed {seed}: {res.ops} ops, {len(res.anomalies)} anomalies, worst "
                f"recovery {res.summary()['worst_recovery_s']} s, longest gap "
                f"{res.longest_gap_s} s, "
                f"{'ok' if not problems else 'PROBLEMS ' + '; '.join(problems)}",
                flush=True,
            )
            out = {t: totals(rs) for t, rs in results.items() if rs}
            Path(args.out).write_text(json.dumps({**out, "faults": rows}, indent=1) + "\n")
    print(table(rows), end="", flush=True)
    return 0 if all(not judged(t, r) for t, rs in results.items() for r in rs) else 1
