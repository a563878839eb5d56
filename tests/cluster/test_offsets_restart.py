"""Offsets and quotas live in snapshots: after several snapshots and a restart of the whole
cluster, every node has the same offsets (fencing state included) and quotas as before,
and the restored quota usage still rejects what it rejected before."""

from __future__ import annotations

from typing import Any

import pytest

from nameserver.client import Client, ResourceExhausted
from protos.metaledger.v1 import offsets_pb2, offsets_pb2_grpc
from tests.cluster.test_snapshots import make_cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.cluster


def offsets_of(cluster: Any, i: int) -> list[offsets_pb2.Offset]:
    stub = offsets_pb2_grpc.OffsetsStub(cluster.channel(i))
    return list(stub.List(offsets_pb2.ListRequest(prefix=True), timeout=10).offsets)


@pytest.mark.timeout(180)
def test_offsets_and_quotas_survive_a_restart_from_snapshots(make_cluster: Any) -> None:  # noqa: F811
    cluster = make_cluster("--snapshot-every-items", "20")
    with Client(cluster.endpoints, timeout_s=10) as c:
        # the token is the grant's offset (LeaseGrant's trailing metadata): not the header's
        # revision, which with etcd's count is the store revision a grant leaves alone
        grant = c.lease_grant(600)
        for i in range(60):
            c.offsets_commit(
                "job",
                f"p{i % 6}",
                f"off-{i}",
                lease_id=grant.id,
                fencing_token=grant.fencing_token,
                position=i,
            )
        c.offsets_reset("job", "p0", "back", position=1)
        c.quota_set("offset", max_keys=6)
        with pytest.raises(ResourceExhausted, match="record type offset: 7 keys > limit 6"):
            c.offsets_commit("job", "p6", "x", lease_id=grant.id, fencing_token=grant.fencing_token)
        before = offsets_of(cluster, 0)
        quotas_before = c.quota_list()
    assert len(before) == 6 and all(cluster.snapshots(i) for i in range(cluster.n))
    marks = {i: cluster.log_mark(i) for i in range(cluster.n)}
    for i in range(cluster.n):
        cluster.stop(i)
    for i in range(cluster.n):
        cluster.start(i)
    cluster.wait_ready(60)
    for i in range(cluster.n):
        assert "restored snapshot" in cluster.log_since(i, marks[i]), cluster.log_tail(i)
        assert offsets_of(cluster, i) == before, cluster.nodes[i].id
    with Client(cluster.endpoints, timeout_s=10) as c:
        assert c.quota_list() == quotas_before
        with pytest.raises(ResourceExhausted, match="record type offset"):
            c.offsets_commit("job", "p7", "x", lease_id=grant.id, fencing_token=grant.fencing_token)
