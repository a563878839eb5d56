"""Replicator offsets and quotas against a real 3-node cluster: commit, fetch, list and reset
through gRPC (the client library) and the CLI; fencing (an expired lease, a stale token after
a newer holder committed, a reset a stale worker cannot undo); offsets read linearizably
even when a request asks for a serializable read; quota exceeded -> RESOURCE_EXHAUSTED naming
the record type with nothing partially applied (client, CLI and the real etcdctl); bad input
gets clear errors and loses nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from nameserver.client import (
    Client,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Op,
    ResourceExhausted,
)
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import offsets_pb2, offsets_pb2_grpc
from tests.harness import Cluster, wait_until
from tests.integration.test_etcdctl import etcdctl

pytestmark = pytest.mark.integration

WORKTREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def client(module_cluster: Cluster) -> Iterator[Client]:
    with Client(module_cluster.endpoints, timeout_s=10) as c:
        yield c


def grant(c: Cluster, ttl_s: int, node: int = 0) -> tuple[int, int]:
    """A lease and its fencing token: the grant's offset, which LeaseGrant's trailing
    metadata says (its header says the store revision, which a grant does not move: etcd's
    count)."""
    resp, call = rpc_pb2_grpc.LeaseStub(c.channel(node)).LeaseGrant.with_call(
        rpc_pb2.LeaseGrantRequest(TTL=ttl_s), timeout=10
    )
    return resp.ID, int(dict(call.trailing_metadata())["x-ml-fencing-token"])


def cli(c: Cluster, *args: str, node: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nameserver.cli", "--endpoints", c.endpoints[node], *args],
        cwd=WORKTREE,
        env={**os.environ, "PYTHONPATH": WORKTREE},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_commit_fetch_list_reset_through_grpc(module_cluster: Cluster, client: Client) -> None:
    lease, token = grant(module_cluster, 30)
    w = client.offsets_commit(
        "redis-a", "db0", b"replid:100", lease_id=lease, fencing_token=token, position=100
    )
    assert (w.version, w.epoch) == (1, 1) and w.revision > token
    client.offsets_commit("redis-a", "db1", "x", lease_id=lease, fencing_token=token)
    client.offsets_commit("redis-ab", "db0", "y", lease_id=lease, fencing_token=token)
    got = client.offsets_fetch("redis-a", "db0")
    assert (got.offset, got.position, got.lease_id, got.fencing_token) == (
        b"replid:100",
        100,
        lease,
        token,
    )
    assert got.mod_revision == w.revision and got.revision >= w.revision
    assert [o.partition for o in client.offsets_list("redis-a").offsets] == ["db0", "db1"]
    assert [o.job for o in client.offsets_list("redis-a", prefix=True).offsets] == [
        "redis-a",
        "redis-a",
        "redis-ab",
    ]
    with pytest.raises(FailedPrecondition) as err:
        client.offsets_commit(
            "redis-a", "db0", "old", lease_id=lease, fencing_token=token, position=99
        )
    assert "position 99 < committed position 100" in str(err.value)
    r = client.offsets_reset("redis-a", "db0", "replid:5", position=5)
    assert (r.version, r.epoch) == (2, 2)  # the rejected commit changed nothing
    # the worker's token predates the reset: it must show it saw the new epoch
    with pytest.raises(FailedPrecondition) as err:
        client.offsets_commit(
            "redis-a", "db0", "z", lease_id=lease, fencing_token=token, position=200
        )
    assert "was reset at revision" in str(err.value)
    w = client.offsets_commit(
        "redis-a", "db0", "6", lease_id=lease, fencing_token=token, position=6, epoch=2
    )
    assert client.offsets_fetch("redis-a", "db0").offset == b"6" and w.epoch == 2


def test_serializable_fetch_is_still_linearizable(module_cluster: Cluster) -> None:
    """A commit through node 0 is visible at once to a Fetch with serializable=true on node 2
    (the table makes offsets linearizable; the unit test checks the table itself)."""
    c = module_cluster
    lease, token = grant(c, 30)
    for i in range(5):
        req = offsets_pb2.CommitRequest(
            job="lin", partition="0", offset=b"%d" % i, position=i, lease_id=lease
        )
        req.fencing_token = token
        done = offsets_pb2_grpc.OffsetsStub(c.channel(0)).Commit(req, timeout=10)
        resp = offsets_pb2_grpc.OffsetsStub(c.channel(2)).Fetch(
            offsets_pb2.FetchRequest(job="lin", partition="0", serializable=True), timeout=10
        )
        assert resp.offset.offset == b"%d" % i and resp.revision >= done.revision
        assert resp.consistency == "linearizable"


def test_commit_with_keepalive_returns_the_ttl(client: Client, module_cluster: Cluster) -> None:
    lease, token = grant(module_cluster, 7, node=1)
    w = client.offsets_commit(
        "ka", "0", "1", lease_id=lease, fencing_token=token, position=1, keepalive=True
    )
    assert w.ttl == 7


def test_commit_from_an_expired_lease_is_rejected(module_cluster: Cluster, client: Client) -> None:
    lease, token = grant(module_cluster, 1)
    client.offsets_commit("exp", "0", "1", lease_id=lease, fencing_token=token, position=1)
    stub = rpc_pb2_grpc.LeaseStub(module_cluster.channel(1))
    wait_until(
        lambda: stub.LeaseTimeToLive(rpc_pb2.LeaseTimeToLiveRequest(ID=lease), timeout=5).TTL == -1,
        20,
        "the lease did not expire",
    )
    with pytest.raises(NotFound) as err:
        client.offsets_commit("exp", "0", "2", lease_id=lease, fencing_token=token, position=2)
    assert "requested lease not found" in str(err.value) and f"{lease:x}" in str(err.value)
    assert client.offsets_fetch("exp", "0").offset == b"1"


def test_stale_token_rejected_after_a_newer_holder(module_cluster: Cluster, client: Client) -> None:
    old_lease, old_token = grant(module_cluster, 30)
    client.offsets_commit(
        "mq", "q0", "10", lease_id=old_lease, fencing_token=old_token, position=10
    )
    new_lease, new_token = grant(module_cluster, 30, node=2)
    client.offsets_commit(
        "mq", "q0", "20", lease_id=new_lease, fencing_token=new_token, position=20
    )
    with pytest.raises(FailedPrecondition) as err:
        client.offsets_commit(
            "mq", "q0", "30", lease_id=old_lease, fencing_token=old_token, position=30
        )
    assert f"stale fencing_token {old_token}" in str(err.value)
    assert client.offsets_fetch("mq", "q0").offset == b"20"


def test_cli_commit_fetch_list_reset(module_cluster: Cluster) -> None:
    c = module_cluster
    lease, token = grant(c, 30)
    args = ["--lease", f"{lease:x}", "--token", str(token)]
    out = cli(c, "offsets", "commit", "cli-job", "p0", "off-7", "--position", "7", *args)
    assert out.returncode == 0 and out.stdout.startswith("committed (revision"), out.stderr
    out = cli(c, "-w", "json", "offsets", "fetch", "cli-job", "p0", node=2)
    doc = json.loads(out.stdout)
    assert (doc["offset"], doc["position"], doc["lease"], doc["version"]) == (
        "off-7",
        7,
        f"{lease:x}",
        1,
    )
    out = cli(c, "offsets", "list", "cli-", "--prefix", node=1)
    assert out.returncode == 0 and "cli-job" in out.stdout and "off-7" in out.stdout
    assert cli(c, "offsets", "commit", "cli-job", "p0", "x", "--position", "3", *args).returncode
    out = cli(c, "-w", "json", "offsets", "reset", "cli-job", "p0", "off-1", "--position", "1")
    assert json.loads(out.stdout)["epoch"] == 2, out.stderr
    out = cli(c, "offsets", "fetch", "cli-job", "missing")
    assert out.returncode == 4 and "no offset committed" in out.stderr  # NOT_FOUND


BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"job": ""}, InvalidArgument, "job must not be empty"),
    ({"partition": ""}, InvalidArgument, "partition must not be empty"),
    ({"expected_version": -1}, InvalidArgument, "expected_version must be >= 0"),
    ({"position": -3}, InvalidArgument, "position must be >= 0"),
    ({"lease_id": 0x7777}, NotFound, "requested lease not found"),
    ({"lease_id": -1}, InvalidArgument, "lease_id must be"),
    ({"fencing_token": 0}, InvalidArgument, "fencing_token must be > 0"),
    ({"fencing_token": 1}, FailedPrecondition, "is not a token of lease"),
]


@pytest.mark.parametrize(("change", "error", "names"), BAD)
def test_bad_commits_get_clear_errors(
    module_cluster: Cluster,
    client: Client,
    change: dict[str, Any],
    error: type[Exception],
    names: str,
) -> None:
    lease, token = grant(module_cluster, 30)
    kw: dict[str, Any] = {"job": "bad", "partition": "p", "lease_id": lease, "fencing_token": token}
    kw |= change
    with pytest.raises(error) as info:
        client.offsets_commit(kw.pop("job"), kw.pop("partition"), "o", **kw)
    assert names in str(info.value)
    with pytest.raises(NotFound):
        client.offsets_fetch("bad", "p")  # nothing was written


def test_bad_reads_and_quotas(client: Client) -> None:
    with pytest.raises(InvalidArgument, match="job must not be empty"):
        client.offsets_fetch("", "p")
    with pytest.raises(InvalidArgument, match="job must not be empty"):
        client.offsets_list("")
    with pytest.raises(InvalidArgument, match="record_type 'member' has no quota"):
        client.quota_set("member", 1)
    with pytest.raises(InvalidArgument, match="max_keys must be >= 0"):
        client.quota_set("kv", -1)


def test_quota_exceeded_names_the_type_and_applies_nothing(
    module_cluster: Cluster, client: Client
) -> None:
    """Runs last in this module: it sets a kv quota (and lifts it again)."""
    c = module_cluster
    used = {q.record_type: q for q in client.quota_list()}["kv"]
    client.quota_set("kv", max_keys=used.keys + 1)
    try:
        with pytest.raises(ResourceExhausted) as info:
            client.txn([], success=[Op.put("quota/a", "1"), Op.put("quota/b", "2")])
        assert info.value.message == (
            f"metaledger: quota exceeded for record type kv: {used.keys + 2} keys > limit "
            f"{used.keys + 1}"
        )
        for node in range(c.n):  # nothing partially applied, on any node
            got = c.stub(node).Range(rpc_pb2.RangeRequest(key=b"quota/", range_end=b"quota0"))
            assert got.count == 0, node
        client.put("quota/a", "1")  # one more key fits
        res = etcdctl(c, "put", "quota/c", "3", node=2, check=False)  # the real etcdctl
        assert res.returncode != 0
        assert "quota exceeded for record type kv" in res.stderr, res.stderr
        out = cli(c, "put", "quota/d", "4", node=1)
        assert out.returncode != 0 and "quota exceeded for record type kv" in out.stderr
        client.delete("quota/a")  # deletes are always allowed
        listed = {q.record_type: q for q in client.quota_list()}["kv"]
        assert listed.max_keys == used.keys + 1 and listed.keys == used.keys
    finally:
        client.quota_set("kv", 0, 0)
    client.put("quota/after", "ok")
    client.delete("quota/after")
