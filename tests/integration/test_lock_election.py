"""The Lock and Election services through the Python client against a 3-node cluster: etcd's
recipe semantics (owner keys, re-entrance with one lease, waiting in create-revision order),
ownership checks for stale leader keys, and the errors for bad input."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest

from nameserver.client import (
    Client,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Op,
)
from nameserver.client.locks import LeaderKey, acquire, release
from protos.etcdserverpb import v3election_pb2, v3election_pb2_grpc, v3lock_pb2, v3lock_pb2_grpc
from tests.harness import Cluster, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(module_cluster: Cluster) -> Iterator[Client]:
    with Client(module_cluster.endpoints, timeout_s=10) as c:
        yield c


def test_owner_key_is_name_slash_hex_lease_and_reentrant(client: Client) -> None:
    lease = client.lease_grant(30)
    key = acquire(client, "svc-lock/a", lease.id)
    assert key == b"svc-lock/a/%x" % lease.id
    assert acquire(client, "svc-lock/a", lease.id, timeout_s=5) == key  # same lease: no-op
    token = client.get(key).kvs[0].create_revision
    assert client.get(key).kvs[0].lease == lease.id
    release(client, key)
    assert client.get(key).kvs == []
    again = acquire(client, "svc-lock/a", lease.id)
    assert client.get(again).kvs[0].create_revision > token  # a new incarnation, a new token
    client.lease_revoke(lease.id)
    assert client.get(again).kvs == []


def test_waiters_acquire_in_order(client: Client) -> None:
    order: list[str] = []
    with client.lock("svc-lock/b", ttl_s=10) as first:
        leases = [client.lease_grant(30) for _ in range(2)]
        threads = []
        for i, lease in enumerate(leases):

            def wait(i: int = i, lease_id: int = lease.id) -> None:
                key = acquire(client, "svc-lock/b", lease_id, timeout_s=30)
                order.append(f"w{i}")
                release(client, key)

            threads.append(threading.Thread(target=wait))
            threads[-1].start()
            wait_until(
                lambda n=i + 2: len(client.get("svc-lock/b/", prefix=True).kvs) == n,
                10,
                "the waiter queued",
            )
        order.append("first")
        assert client.txn([first.is_owner()], success=[Op.put("svc-lock/b-res", "x")]).succeeded
    for t in threads:
        t.join(30)
    assert order == ["first", "w0", "w1"]
    for lease in leases:
        client.lease_revoke(lease.id)


def test_a_waiter_whose_lease_expires_fails(client: Client) -> None:
    with client.lock("svc-lock/c", ttl_s=10):
        lease = client.lease_grant(1)
        with pytest.raises(FailedPrecondition, match="mutex: session is expired"):
            acquire(client, "svc-lock/c", lease.id, timeout_s=30)


def test_lock_bad_input(client: Client, module_cluster: Cluster) -> None:
    stub = v3lock_pb2_grpc.LockStub(module_cluster.channel(1))
    with pytest.raises(grpc.RpcError) as no_lease:
        stub.Lock(v3lock_pb2.LockRequest(name=b"svc-lock/d"), timeout=10)
    assert no_lease.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "lease" in (no_lease.value.details() or "")
    with pytest.raises(NotFound, match="requested lease not found"):
        acquire(client, "svc-lock/d", 0x1234ABCD)
    with pytest.raises(grpc.RpcError) as no_name:
        stub.Lock(v3lock_pb2.LockRequest(name=b"", lease=1), timeout=10)
    assert no_name.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as no_key:
        stub.Unlock(v3lock_pb2.UnlockRequest(), timeout=10)
    assert no_key.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(InvalidArgument):
        client.lock("svc-lock/d", ttl_s=0).__enter__()
    with pytest.raises(DeadlineExceeded):
        with client.lock("svc-lock/e", ttl_s=10), client.lock("svc-lock/e", timeout_s=1):
            pass


def test_election_proclaim_resign_and_stale_keys(client: Client) -> None:
    election = client.election("svc-elect/a")
    assert election.leader() is None
    lk = election.campaign("one", ttl_s=10)
    assert lk.key == b"svc-elect/a/%x" % lk.lease
    assert client.get(lk.key).kvs[0].create_revision == lk.rev
    observed = election.observe(timeout_s=30)
    assert next(observed).value == b"one"
    election.proclaim("two")
    assert next(observed).value == b"two"
    leader = election.leader()
    assert leader is not None and leader.value == b"two" and leader.key == lk.key
    assert client.txn([lk.is_owner()], success=[Op.put("svc-elect/res", "x")]).succeeded

    stale = client.election("svc-elect/a")
    stale.leader_key = LeaderKey(lk.name, lk.key, lk.rev - 1, lk.lease)  # not this incarnation
    with pytest.raises(FailedPrecondition, match="election: not leader"):
        stale.proclaim("three")
    with pytest.raises(FailedPrecondition, match="election: not leader"):
        stale.resign()
    assert client.get(lk.key).kvs[0].value == b"two"  # the stale calls changed nothing

    election.resign()
    assert election.leader() is None
    with pytest.raises(FailedPrecondition, match="not leader"):
        election.proclaim("after resign")
    observed.close()


def test_election_bad_input(module_cluster: Cluster) -> None:
    stub = v3election_pb2_grpc.ElectionStub(module_cluster.channel(2))
    cases = [
        (stub.Proclaim, v3election_pb2.ProclaimRequest(value=b"x"), '"leader" field'),
        (stub.Resign, v3election_pb2.ResignRequest(), '"leader" field'),
        (stub.Campaign, v3election_pb2.CampaignRequest(name=b"svc-elect/b"), "lease"),
        (stub.Leader, v3election_pb2.LeaderRequest(), "key is not provided"),
    ]
    for method, request, text in cases:
        with pytest.raises(grpc.RpcError) as err:
            method(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, request
        assert text in (err.value.details() or ""), err.value.details()
    with pytest.raises(grpc.RpcError) as none:
        stub.Leader(v3election_pb2.LeaderRequest(name=b"svc-elect/nobody"), timeout=10)
    assert none.value.code() == grpc.StatusCode.NOT_FOUND
    assert none.value.details() == "election: no leader"
