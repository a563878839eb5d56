"""Learners side by side: the same ``etcdctl`` steps against etcd 3.4 and metaledger.

One voter and one learner on each: ``member add --learner``, ``member promote`` before the
learner runs (refused: not in sync), of a voter (refused: not a learner), a second learner
(refused: one at most), requests to the running learner (a serializable get served, the
rest refused with "rpc not supported for learner"), the learner killed (the voter still
writes: it was never in the quorum), then ``member promote`` once it caught up. Every
step must end with the same exit code and the same error line on both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.etcd_harness import EtcdServer, etcdctl
from tests.harness import Cluster, free_ports, wait_until

pytestmark = pytest.mark.cluster

ADDED = re.compile(r"Member +([0-9a-f]+) added to cluster")  # (etcdctl pads ids: %16x)


class Side:
    """One system under the steps: its voter's and its learner's endpoints."""

    def __init__(self, voter: str, learner_peer_url: str) -> None:
        self.voter = voter
        self.learner = ""
        self.learner_peer_url = learner_peer_url
        self.learner_id = ""

    def ctl(self, endpoint: str, *args: str) -> tuple[int, str, str]:
        r = etcdctl(endpoint, *args, command_timeout_s=5)
        # the error line etcdctl ends with (its retry warnings before it are logs)
        err = [line for line in r.stderr.splitlines() if line.startswith("Error")]
        return r.returncode, r.stdout.strip(), err[-1] if err else ""


def steps_before_start(side: Side) -> list[tuple[int, str]]:
    out = []
    side.ctl(side.voter, "put", "k", "v")
    code, stdout, err = side.ctl(
        side.voter, "member", "add", "learner", "--learner", f"--peer-urls={side.learner_peer_url}"
    )
    assert code == 0, (stdout, err)
    m = ADDED.search(stdout)
    assert m is not None, stdout
    side.learner_id = m.group(1)
    out.append((code, "added"))
    listed = json.loads(side.ctl(side.voter, "member", "list", "-w", "json")[1])
    out.append((0, str(sorted(bool(x.get("isLearner", False)) for x in listed["members"]))))
    voter_id = next(f"{x['ID']:x}" for x in listed["members"] if not x.get("isLearner"))
    for args in (
        ("member", "promote", side.learner_id),
        ("member", "promote", voter_id),
        ("member", "add", "second", "--learner", "--peer-urls=http://127.0.0.1:9"),
    ):
        code, _, err = side.ctl(side.voter, *args)
        out.append((code, err))
    return out


def steps_on_learner(side: Side) -> list[tuple[int, str]]:
    out = []
    for args in (
        ("get", "k", "--consistency=s"),
        ("get", "k"),
        ("put", "k2", "v"),
        ("member", "list"),
        ("lease", "grant", "10"),
        ("member", "promote", side.learner_id),
    ):
        code, stdout, err = side.ctl(side.learner, *args)
        out.append((code, err or stdout))
    return out


def steps_after_kill(side: Side) -> list[tuple[int, str]]:
    code, stdout, err = side.ctl(side.voter, "put", "k3", "v3")
    return [(code, err or stdout)]


def steps_promote(side: Side) -> list[tuple[int, str]]:
    code, stdout, err = side.ctl(side.voter, "member", "promote", side.learner_id)
    promoted = re.match(rf"Member +{side.learner_id} promoted in cluster", stdout) is not None
    listed = json.loads(side.ctl(side.voter, "member", "list", "-w", "json")[1])
    flags = sorted(bool(x.get("isLearner", False)) for x in listed["members"])
    return [(code, str(promoted) + err), (0, str(flags))]


def served(side: Side, key: str) -> Callable[[], bool]:
    """Whether the learner serves ``key`` (put through the voter just before)."""

    def caught_up() -> bool:
        code, stdout, _ = side.ctl(side.learner, "get", key, "--consistency=s")
        return code == 0 and stdout == f"{key}\nv"

    return caught_up


def test_learners_answer_as_etcd_3_4_does(tmp_path: Path) -> None:
    learner_client, learner_peer = free_ports(2)
    learner_url = f"http://127.0.0.1:{learner_peer}"
    with (
        EtcdServer(tmp_path / "etcd") as etcd,
        Cluster(tmp_path / "ml", n=1) as ml,
    ):
        etcd.wait_ready()
        ml.wait_ready(30)
        new = ml.add_node(start=False)
        e = Side(etcd.address, learner_url)
        m = Side(ml.endpoints[0], ml.peer_url(new))
        results: dict[str, list[list[tuple[int, str]]]] = {"etcd": [], "metaledger": []}
        results["etcd"].append(steps_before_start(e))
        results["metaledger"].append(steps_before_start(m))

        # the learners start
        token = next(a for a in etcd_argv(etcd) if a.startswith("--initial-cluster-token"))
        etcd_peer = next(a for a in etcd_argv(etcd) if a.startswith("--initial-advertise-peer"))
        etcd_learner = EtcdServer(
            tmp_path / "etcd-learner",
            ports=(learner_client, learner_peer),
            extra=[
                "--name=learner",
                f"--initial-cluster=e0={etcd_peer.split('=', 1)[1]},learner={learner_url}",
                "--initial-cluster-state=existing",
                token,
            ],
        )
        try:
            ml.start(new)
            e.learner = etcd_learner.address
            m.learner = ml.endpoints[new]
            for side in (e, m):
                side.ctl(side.voter, "put", "k2", "v")
                wait_until(served(side, "k2"), 30, f"the learner of {side.voter} caught up")
            results["etcd"].append(steps_on_learner(e))
            results["metaledger"].append(steps_on_learner(m))
            etcd_learner.stop()
            ml.kill(new)
            results["etcd"].append(steps_after_kill(e))
            results["metaledger"].append(steps_after_kill(m))
            etcd_learner = EtcdServer(
                tmp_path / "etcd-learner",
                ports=(learner_client, learner_peer),
                extra=etcd_learner.extra,
            )
            ml.start(new)
            for side in (e, m):
                side.ctl(side.voter, "put", "k4", "v")  # (after the restart: a fresh ack)
                wait_until(served(side, "k4"), 30, f"the learner of {side.voter} caught up")
            results["etcd"].append(steps_promote(e))
            results["metaledger"].append(steps_promote(m))
        finally:
            etcd_learner.stop()
    assert results["metaledger"] == results["etcd"]
    # and what they say is etcd 3.4's (so the comparison is not of two equal failures)
    before, on_learner, after_kill, promote = results["etcd"]
    assert before[1:] == [
        (0, "[False, True]"),
        (1, "Error: etcdserver: can only promote a learner member which is in sync with leader"),
        (1, "Error: etcdserver: can only promote a learner member"),
        (1, "Error: etcdserver: too many learner members in cluster"),
    ]
    assert on_learner[0] == (0, "k\nv")
    assert all("etcdserver: rpc not supported for learner" in r[1] for r in on_learner[1:])
    assert after_kill == [(0, "OK")]
    assert promote == [(0, "True"), (0, "[False, False]")]


def etcd_argv(etcd: EtcdServer) -> list[str]:
    args = etcd.proc.args
    assert isinstance(args, list)
    return [str(a) for a in args]
