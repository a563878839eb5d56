"""Learners (etcd 3.4's non-voting members) on real processes: three voters and a learner.

Raft sections are those of Ongaro's dissertation: §4.2.1 (a new server catches up, without
a vote, before it joins the configuration: what a learner is), §4.1 (one change at a time:
the promotion is one). The learner is added (``metaledger member add --learner``) before it
runs, so its promotion is refused with etcd's message; started, it catches up and serves
serializable reads only; killed together with a voter it leaves the two other voters a
quorum of three (as a fourth voter it would not: two of four); promoted once caught up, it
votes, and serves every request.
"""

from __future__ import annotations

import io
import json
import time
from contextlib import redirect_stdout

import grpc
import pytest

from nameserver import cli
from nameserver.cli.exitcodes import ExitCode
from nameserver.client import Client
from protos.etcdserverpb import rpc_pb2
from tests.harness import Cluster, running_cluster, wait_until

pytestmark = pytest.mark.cluster

NOT_SUPPORTED = "etcdserver: rpc not supported for learner"
NOT_READY = "etcdserver: can only promote a learner member which is in sync with leader"


def run_cli(*argv: str) -> tuple[int, str]:
    """``metaledger argv`` in-process; returns (exit code, stdout)."""
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


def serializable_count(cluster: Cluster, i: int, prefix: bytes) -> int:
    req = rpc_pb2.RangeRequest(
        key=prefix, range_end=prefix[:-1] + b"0", serializable=True, count_only=True
    )
    return int(cluster.stub(i).Range(req, timeout=5).count)


def refused(call: object) -> grpc.RpcError:
    try:
        call()  # type: ignore[operator]
    except grpc.RpcError as exc:
        return exc
    raise AssertionError("the call was not refused")


def learners(cluster: Cluster, i: int) -> dict[str, bool]:
    resp = cluster.cluster_stub(i).MemberList(rpc_pb2.MemberListRequest(), timeout=5)
    return {m.peerURLs[0]: m.isLearner for m in resp.members}


def test_a_learner_catches_up_costs_no_quorum_and_is_promoted_4_2_1(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with running_cluster(tmp_path, 3) as cluster:
        leader = cluster.wait_ready(30)
        for k in range(200):
            cluster.put(leader, b"pre/%03d" % k, b"v" * 100)
        new = cluster.add_node(start=False)
        endpoints = ",".join(cluster.endpoints[:3])
        code, out = run_cli(
            "member", "add", cluster.peer_url(new), "--learner", "--name", "n3",
            "--endpoints", endpoints, "--timeout", "20", "-w", "json",
        )  # fmt: skip
        assert code == ExitCode.OK, out
        added = json.loads(out)
        assert added["member"]["is_learner"] is True
        member_id = added["member"]["member_id"]
        assert learners(cluster, leader)[cluster.peer_url(new)] is True
        # not running: nothing of the log yet, the promotion is refused (etcd's error)
        err = refused(
            lambda: cluster.cluster_stub(leader).MemberPromote(
                rpc_pb2.MemberPromoteRequest(ID=member_id), timeout=10
            )
        )
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and err.details() == NOT_READY
        # a second learner: etcd 3.4 has one at most
        err = refused(
            lambda: cluster.cluster_stub(leader).MemberAdd(
                rpc_pb2.MemberAddRequest(peerURLs=["http://127.0.0.1:9"], isLearner=True),
                timeout=10,
            )
        )
        assert err.details() == "etcdserver: too many learner members in cluster"

        cluster.start(new)
        wait_until(
            lambda: serializable_count(cluster, new, b"pre/") == 200, 30, "the learner caught up"
        )
        # a learner serves serializable reads only (etcd 3.4)
        err = refused(
            lambda: cluster.stub(new).Range(rpc_pb2.RangeRequest(key=b"pre/000"), timeout=5)
        )
        assert err.code() == grpc.StatusCode.UNAVAILABLE and err.details() == NOT_SUPPORTED
        err = refused(
            lambda: cluster.stub(new).Put(rpc_pb2.PutRequest(key=b"x", value=b"y"), timeout=5)
        )
        assert err.code() == grpc.StatusCode.UNAVAILABLE and err.details() == NOT_SUPPORTED
        # the learner and one voter down: two of the three voters still commit and keep
        # their leader past check quorum's step-down time
        cluster.kill(new)
        other = next(i for i in range(3) if i != leader)
        cluster.kill(other)
        until = time.monotonic() + 3.0  # past check quorum's 2 s: puts all along
        k = 0
        while k < 20 or time.monotonic() < until:
            cluster.put(leader, b"down/%03d" % k, b"w")
            k += 1
        status = cluster.status(leader)
        assert status.role == "leader" and status.has_quorum
        cluster.start(other)
        cluster.start(new)
        wait_until(
            lambda: serializable_count(cluster, new, b"down/") == k, 30, "the learner caught up"
        )
        leader = cluster.wait_ready(30, nodes=[0, 1, 2])
        code, out = run_cli(
            "member", "promote", f"{member_id:x}", "--endpoints", endpoints, "--timeout", "20"
        )  # (by id: a member restarted a moment ago may not have applied n3's name yet)
        assert code == ExitCode.OK, out
        assert not any(learners(cluster, leader).values())
        with Client([cluster.endpoints[new]], timeout_s=20.0) as via_new:
            assert not any(m.is_learner for m in via_new.members())  # served by it now
        cluster.put(new, b"after/promote", b"1", timeout=20)
        resp = cluster.stub(new).Range(rpc_pb2.RangeRequest(key=b"after/promote"), timeout=10)
        assert resp.kvs[0].value == b"1"


def test_a_learner_caught_up_by_snapshot_stays_a_learner_after_a_restart_5_3(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The leader compacted its log: the learner gets its snapshot (§5.3), whose metadata
    carries the learners; restarted, it loads that snapshot and still does not vote."""
    with running_cluster(tmp_path, 3, extra_args=["--snapshot-every-items", "20"]) as cluster:
        leader = cluster.wait_ready(30)
        for k in range(150):
            cluster.put(leader, b"pre/%03d" % k, b"v" * 100)
        new = cluster.add_node(start=False)
        with Client([cluster.endpoints[leader]], timeout_s=20.0) as c:
            c.member_add(cluster.peer_url(new), learner=True)
        cluster.start(new)  # (the log was compacted behind index 100 already: a snapshot)
        for k in range(50):
            cluster.put(leader, b"more/%03d" % k, b"v")
        wait_until(
            lambda: serializable_count(cluster, new, b"more/") == 50, 30, "the learner caught up"
        )
        assert "installed the leader's snapshot" in cluster.nodes[new].log_path.read_text()
        cluster.kill(new)
        cluster.start(new)
        cluster.put(leader, b"after/restart", b"1")
        wait_until(
            lambda: serializable_count(cluster, new, b"after/") == 1, 30, "the learner is back"
        )
        err = refused(
            lambda: cluster.stub(new).Range(rpc_pb2.RangeRequest(key=b"pre/000"), timeout=5)
        )
        assert err.code() == grpc.StatusCode.UNAVAILABLE and err.details() == NOT_SUPPORTED
        assert learners(cluster, leader)[cluster.peer_url(new)] is True
