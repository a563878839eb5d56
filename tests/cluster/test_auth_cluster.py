"""Auth on a real 3-node cluster with JWT tokens: a token one node issued works on every
node, a refused write changes nothing on any node, a follower forwards a user's
replica-group call to the leader under the node credential, and the auth state (users,
roles, enabled) lives in the log: it survives a restart of every node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from protos.etcdserverpb import auth_pb2, rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import replica_groups_pb2, replica_groups_pb2_grpc
from tests.harness import Cluster, running_cluster

pytestmark = pytest.mark.cluster

RW = auth_pb2.Permission.READWRITE


def auth_stub(cluster: Cluster, i: int) -> rpc_pb2_grpc.AuthStub:
    return rpc_pb2_grpc.AuthStub(cluster.channel(i))


def set_up(cluster: Cluster) -> None:
    """root, and alice with readwrite on app/ and on the replica groups' records."""
    a = auth_stub(cluster, 0)
    a.UserAdd(rpc_pb2.AuthUserAddRequest(name="root", password="rootpw"), timeout=10)
    a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="root", role="root"), timeout=10)
    a.UserAdd(rpc_pb2.AuthUserAddRequest(name="alice", password="alicepw"), timeout=10)
    a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="app"), timeout=10)
    for key, end in (
        (b"app/", b"app0"),
        (b"/_metaledger/replica_group/", b"/_metaledger/replica_group0"),
    ):
        perm = auth_pb2.Permission(permType=RW, key=key, range_end=end)
        a.RoleGrantPermission(
            rpc_pb2.AuthRoleGrantPermissionRequest(name="app", perm=perm), timeout=10
        )
    a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="alice", role="app"), timeout=10)
    a.AuthEnable(rpc_pb2.AuthEnableRequest(), timeout=10)


def token_of(cluster: Cluster, i: int, name: str, password: str) -> tuple[tuple[str, str]]:
    req = rpc_pb2.AuthenticateRequest(name=name, password=password)
    return (("token", auth_stub(cluster, i).Authenticate(req, timeout=10).token),)


def code_of(method: Any, request: Any, **kwargs: Any) -> grpc.StatusCode:
    """The status ``method(request, **kwargs)`` fails with (it must fail)."""
    with pytest.raises(grpc.RpcError) as info:
        method(request, timeout=10, **kwargs)
    code: grpc.StatusCode = info.value.code()
    return code


def settled(cluster: Cluster) -> int:
    """The leader's commit offset once every node applied it (Admin.Status is open)."""
    commit = cluster.status(cluster.leader()).commit_offset
    cluster.wait_applied(commit)
    return int(commit)


def test_jwt_tokens_work_on_every_node_and_auth_survives_a_restart(tmp_path: Path) -> None:
    key = tmp_path / "jwt.key"
    key.write_bytes(b"a shared HMAC key for the whole cluster")
    flags = [f"--auth-token=jwt,sign-method=HS256,priv-key={key},ttl=5m", "--bcrypt-cost=4"]
    denied, empty, bad_token = (
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.INVALID_ARGUMENT,  # etcd: "user name is empty"
        grpc.StatusCode.UNAUTHENTICATED,
    )
    with running_cluster(tmp_path / "c", 3, extra_args=flags) as cluster:
        cluster.wait_announced()
        set_up(cluster)
        alice = token_of(cluster, 0, "alice", "alicepw")
        app = rpc_pb2.RangeRequest(key=b"app/", range_end=b"app0")
        for i in range(3):  # issued by node 0, accepted everywhere
            put = rpc_pb2.PutRequest(key=f"app/{i}".encode(), value=b"v")
            cluster.stub(i).Put(put, metadata=alice, timeout=10)
            assert cluster.stub(i).Range(app, metadata=alice, timeout=10).count == i + 1

        # refused writes change nothing, on any node
        before = settled(cluster)
        forged = (("token", alice[0][1][:-3] + "AAA"),)
        other = rpc_pb2.PutRequest(key=b"other", value=b"v")
        txn = rpc_pb2.TxnRequest(
            success=[
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"app/t", value=b"v")),
                rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=b"other")),
            ]
        )
        for i in range(3):
            kv = cluster.stub(i)
            assert code_of(kv.Put, other, metadata=alice) == denied
            assert code_of(kv.Txn, txn, metadata=alice) == denied
            assert code_of(kv.Put, other) == empty
            assert code_of(kv.Put, other, metadata=forged) == bad_token
        assert settled(cluster) == before
        root = token_of(cluster, 1, "root", "rootpw")
        t = rpc_pb2.RangeRequest(key=b"app/t")
        assert cluster.stub(2).Range(t, metadata=root, timeout=10).count == 0

        # a follower forwards alice's replica-group call to the leader (node credential)
        leader = cluster.leader()
        follower = next(i for i in range(3) if i != leader)
        groups = replica_groups_pb2_grpc.ReplicaGroupsStub(cluster.channel(follower))
        register = replica_groups_pb2.RegisterReplicaRequest(
            cluster_name="c1", broker_name="g1", address="127.0.0.1:1", broker_id=1
        )
        assert groups.Register(register, metadata=alice, timeout=10).broker_id == 1
        g2 = replica_groups_pb2.RegisterReplicaRequest(
            cluster_name="c1", broker_name="g2", address="127.0.0.1:2"
        )
        assert code_of(groups.Register, g2) == empty
        g2_denied = replica_groups_pb2.RegisterReplicaRequest(
            cluster_name="c1", broker_name="x-g2", address="127.0.0.1:2"
        )
        assert code_of(groups.Register, g2_denied, metadata=(("token", "nope"),)) == bad_token

        for i in range(3):
            cluster.restart(i)
        cluster.wait_ready()
        app0 = rpc_pb2.RangeRequest(key=b"app/0")
        for i in range(3):  # still enabled, the same users and roles; the JWT still valid
            assert code_of(cluster.stub(i).Range, app0) == empty
            assert cluster.stub(i).Range(app0, metadata=alice, timeout=10).count == 1
        root = token_of(cluster, 2, "root", "rootpw")
        users = auth_stub(cluster, 2).UserList(
            rpc_pb2.AuthUserListRequest(), metadata=root, timeout=10
        )
        assert list(users.users) == ["alice", "root"]
