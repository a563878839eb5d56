"""Leases across a leader kill (issue 4; etcd #9888, #17132): a new leader neither hands
every lease a fresh full TTL nor expires one early.

The bound (nameserver/leases/expiry.py): after a leader change a lease lives at least its TTL
after the last keepalive acknowledged to its holder, and at most one checkpoint interval
plus one election timeout longer. etcd 3.4 instead restarts every lease's TTL on the new
leader, so a lease whose holder died halfway through its TTL would live 1.5 TTLs.
"""

from __future__ import annotations

import signal
import time

import pytest

from nameserver.leases.expiry import CHECKPOINT_INTERVAL_S, EXPIRE_INTERVAL_S
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from tests.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster

TTL_S = 10
#: ServerConfig.election_timeout_max_ms (the grace a new leader adds)
ELECTION_TIMEOUT_S = 2.0


def lease_stub(c: Cluster, i: int) -> rpc_pb2_grpc.LeaseStub:
    return rpc_pb2_grpc.LeaseStub(c.channel(i))


def time_to_live(c: Cluster, i: int, lease_id: int) -> int:
    """Remaining TTL in seconds as node ``i`` answers it (linearizable); -1 once gone."""
    resp = lease_stub(c, i).LeaseTimeToLive(rpc_pb2.LeaseTimeToLiveRequest(ID=lease_id), timeout=5)
    return int(resp.TTL)


def alive_everywhere(c: Cluster, nodes: list[int], lease_id: int) -> bool:
    return all(time_to_live(c, i, lease_id) > 0 for i in nodes)


def test_lease_keeps_its_remaining_ttl_through_a_leader_kill(cluster: Cluster) -> None:
    c = cluster
    leader = c.leader()
    follower = next(i for i in range(c.n) if i != leader)
    others = [i for i in range(c.n) if i != leader]

    grant = lease_stub(c, follower).LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=TTL_S), timeout=5)
    lease_id = grant.ID
    c.stub(follower).Put(
        rpc_pb2.PutRequest(key=b"lease/held", value=b"v", lease=lease_id), timeout=5
    )
    # One keepalive, acknowledged to the holder at `acked`; then the holder goes silent.
    keepalive = lease_stub(c, follower).LeaseKeepAlive(
        iter([rpc_pb2.LeaseKeepAliveRequest(ID=lease_id)]), timeout=5
    )
    assert [r.TTL for r in keepalive] == [TTL_S]
    acked = time.monotonic()
    # ... and wait until its checkpoint is in the log (every node's answer reflects it).
    wait_until(
        lambda: all(time_to_live(c, i, lease_id) >= TTL_S - 1 for i in range(c.n)),
        timeout=5,
        message="the keepalive's checkpoint applied on every node",
    )

    # Halfway through the TTL the leader dies.
    wait_until(lambda: time.monotonic() - acked >= TTL_S / 2, timeout=TTL_S, message="half the TTL")
    c.kill(leader, signal.SIGKILL)
    new_leader = c.wait_ready(30, nodes=others)
    assert new_leader != leader

    # Not reset: the new leader reports what is left of the TTL, not a fresh one.
    remaining = time_to_live(c, new_leader, lease_id)
    elapsed = time.monotonic() - acked
    assert 0 < remaining <= TTL_S - elapsed + 1, (
        f"remaining TTL {remaining}s after {elapsed:.1f}s of a {TTL_S}s lease: reset by the "
        "new leader?"
    )

    # Not expired early: alive until the TTL after the acknowledged keepalive has passed.
    while time.monotonic() - acked < TTL_S - 0.5:
        assert alive_everywhere(c, others, lease_id), (
            f"lease gone {time.monotonic() - acked:.1f}s after a keepalive acknowledged "
            f"with TTL {TTL_S}s"
        )
        assert c.range_all(new_leader, b"lease/") != {}, "the lease's key vanished early"
        time.sleep(0.2)  # sampling interval of a condition that must hold throughout

    # Expired within the bound: TTL + one checkpoint interval + one election timeout
    # (+ the expiry scan and one commit), far earlier than a reset TTL would allow.
    bound = TTL_S + CHECKPOINT_INTERVAL_S + ELECTION_TIMEOUT_S + EXPIRE_INTERVAL_S + 1.0
    wait_until(
        lambda: all(time_to_live(c, i, lease_id) == -1 for i in others),
        timeout=max(0.5, acked + bound - time.monotonic()),
        message=f"the lease to expire within {bound:.1f}s of its last keepalive",
    )
    gone_after = time.monotonic() - acked
    assert gone_after < elapsed + TTL_S, "expired no earlier than a fully reset TTL"
    for i in others:
        assert c.range_all(i, b"lease/", serializable=True) == {}, "its key outlived the lease"
