"""Revisions step by step, side by side with a real etcd 3.4: the same gRPC sequence (puts,
deletes of a present and of a missing key, txns that write and that do not, lease grant,
keepalive and revoke with and without attached keys, auth users and roles, auth enable, one
put after it) against both, and after every step each side's header revision, its store
revision (a Range's header) and every key's create and mod revisions and version.

etcd 3.4 moves its store revision only when keys change (mvcc's ``txnWrite.End``: a put, a
delete that deleted something, a txn that wrote; a lease revoke only when it deleted
attached keys); auth and lease-only requests keep it, and their headers say the current
one. Revisions are compared from the state after the first put on (each side's revisions
less its own at step 0), and that first put is at revision 2 on both (a new store is at 1,
whatever offsets metaledger's own bootstrap records took).

metaledger counts this way by default: its leader switches the store to etcd's count (a
``count_revisions`` entry, proposed as soon as every member runs a version that applies it:
at once on a fresh one-node cluster; the harness's first ``wait_ready`` waits for it); with
``--offset-revisions``, or before the switch, every request moves the revision
(nameserver/kv/revision.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from protos.etcdserverpb import rpc_pb2 as pb
from protos.etcdserverpb import rpc_pb2_grpc
from tests.etcd_harness import EtcdServer
from tests.harness import Cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd 3.4 is not installed"),
]

PREFIX = b"r/"
L1, L2 = 0x5EED_0001, 0x5EED_0002


@dataclass
class Step:
    name: str
    header: int  # the step's own response header revision
    store: int  # the store revision right after it (a Range's header)
    keys: dict[bytes, tuple[int, int, int]]  # key -> (create, mod, version)


@dataclass
class Side:
    address: str
    steps: list[Step] = field(default_factory=list)
    token: str | None = None

    def __post_init__(self) -> None:
        self.channel = grpc.insecure_channel(self.address)
        self.kv = rpc_pb2_grpc.KVStub(self.channel)
        self.lease = rpc_pb2_grpc.LeaseStub(self.channel)
        self.auth = rpc_pb2_grpc.AuthStub(self.channel)
        self.maintenance = rpc_pb2_grpc.MaintenanceStub(self.channel)

    @property
    def md(self) -> list[tuple[str, str]] | None:
        return [("token", self.token)] if self.token else None

    def record(self, name: str, resp: Any) -> None:
        got = self.kv.Range(
            pb.RangeRequest(key=PREFIX, range_end=b"r0"), timeout=10, metadata=self.md
        )
        keys = {kv.key: (kv.create_revision, kv.mod_revision, kv.version) for kv in got.kvs}
        self.steps.append(Step(name, int(resp.header.revision), int(got.header.revision), keys))

    def keepalive(self, lease_id: int) -> pb.LeaseKeepAliveResponse:
        stream = self.lease.LeaseKeepAlive(iter([pb.LeaseKeepAliveRequest(ID=lease_id)]))
        try:
            resp: pb.LeaseKeepAliveResponse = next(stream)
        finally:
            stream.cancel()
        return resp

    def close(self) -> None:
        self.channel.close()


def _txn(compare_value: bytes, then: list[pb.RequestOp], otherwise: list[pb.RequestOp]) -> Any:
    cmp = pb.Compare(
        key=b"r/a", target=pb.Compare.VALUE, result=pb.Compare.EQUAL, value=compare_value
    )
    return pb.TxnRequest(compare=[cmp], success=then, failure=otherwise)


def _put(key: bytes, value: bytes, lease: int = 0) -> pb.RequestOp:
    return pb.RequestOp(request_put=pb.PutRequest(key=key, value=value, lease=lease))


def _delete(key: bytes) -> pb.RequestOp:
    return pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=key))


def _range(key: bytes) -> pb.RequestOp:
    return pb.RequestOp(request_range=pb.RangeRequest(key=key))


#: (name, what to send): the sequence both sides get, in order
SEQUENCE: list[tuple[str, Callable[[Side], tuple[Any, Any]]]] = [
    ("put r/a", lambda s: (s.kv.Put, pb.PutRequest(key=b"r/a", value=b"1"))),
    ("put r/a again", lambda s: (s.kv.Put, pb.PutRequest(key=b"r/a", value=b"2"))),
    ("put r/b", lambda s: (s.kv.Put, pb.PutRequest(key=b"r/b", value=b"1"))),
    ("delete a missing key", lambda s: (s.kv.DeleteRange, pb.DeleteRangeRequest(key=b"r/x"))),
    ("delete r/b", lambda s: (s.kv.DeleteRange, pb.DeleteRangeRequest(key=b"r/b"))),
    ("txn that writes", lambda s: (s.kv.Txn, _txn(b"2", [_put(b"r/c", b"1")], []))),
    ("txn that reads", lambda s: (s.kv.Txn, _txn(b"9", [], [_range(b"r/a")]))),
    ("txn deleting nothing", lambda s: (s.kv.Txn, _txn(b"2", [_delete(b"r/x")], []))),
    ("lease grant", lambda s: (s.lease.LeaseGrant, pb.LeaseGrantRequest(TTL=60, ID=L1))),
    ("lease keepalive", lambda s: (s.keepalive, L1)),
    ("put with the lease", lambda s: (s.kv.Put, pb.PutRequest(key=b"r/l", value=b"1", lease=L1))),
    ("lease grant 2", lambda s: (s.lease.LeaseGrant, pb.LeaseGrantRequest(TTL=60, ID=L2))),
    ("revoke, no keys", lambda s: (s.lease.LeaseRevoke, pb.LeaseRevokeRequest(ID=L2))),
    ("revoke with a key", lambda s: (s.lease.LeaseRevoke, pb.LeaseRevokeRequest(ID=L1))),
    ("user add root", lambda s: (s.auth.UserAdd, pb.AuthUserAddRequest(name="root", password="p"))),
    ("role add root", lambda s: (s.auth.RoleAdd, pb.AuthRoleAddRequest(name="root"))),
    (
        "grant root",
        lambda s: (s.auth.UserGrantRole, pb.AuthUserGrantRoleRequest(user="root", role="root")),
    ),
    ("role add r1", lambda s: (s.auth.RoleAdd, pb.AuthRoleAddRequest(name="r1"))),
    ("user add u1", lambda s: (s.auth.UserAdd, pb.AuthUserAddRequest(name="u1", password="p"))),
    ("auth enable", lambda s: (s.auth.AuthEnable, pb.AuthEnableRequest())),
]


def _run(side: Side) -> None:
    for name, send in SEQUENCE:
        method, req = send(side)
        resp = method(req) if method == side.keepalive else method(req, timeout=10)
        if name == "auth enable":  # from here on, as root
            side.token = side.auth.Authenticate(
                pb.AuthenticateRequest(name="root", password="p"), timeout=10
            ).token
        side.record(name, resp)
    resp = side.kv.Put(pb.PutRequest(key=b"r/d", value=b"1"), timeout=10, metadata=side.md)
    side.record("put after auth enable", resp)


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Side, Side, str, str]]:
    root = tmp_path_factory.mktemp("revisions")
    with EtcdServer(root / "etcd") as etcd, Cluster(root / "ml", n=1) as ml:
        etcd.wait_ready()
        ml.wait_ready(60)
        e, m = Side(etcd.address), Side(ml.endpoints[0])
        try:
            versions = [
                s.maintenance.Status(pb.StatusRequest(), timeout=10).version for s in (e, m)
            ]
            _run(e)
            _run(m)
            yield e, m, versions[0], versions[1]
        finally:
            e.close()
            m.close()


def _relative(side: Side) -> list[tuple[str, int, int, dict[bytes, tuple[int, int, int]]]]:
    """Each step's revisions less the store revision after step 0."""
    base = side.steps[0].store
    return [
        (
            s.name,
            s.header - base,
            s.store - base,
            {k: (c - base, m - base, v) for k, (c, m, v) in s.keys.items()},
        )
        for s in side.steps
    ]


def test_status_reports_the_etcd_version_it_matches(sides: tuple[Side, Side, str, str]) -> None:
    _, _, etcd_version, ml_version = sides
    assert etcd_version.startswith("3.4."), etcd_version
    assert ml_version == etcd_version


def test_keys_and_versions_move_as_etcds_step_by_step(sides: tuple[Side, Side, str, str]) -> None:
    e, m, _, _ = sides
    assert [s.name for s in e.steps] == [s.name for s in m.steps]
    for es, ms in zip(e.steps, m.steps, strict=True):
        assert {k: v for k, (_, _, v) in es.keys.items()} == {
            k: v for k, (_, _, v) in ms.keys.items()
        }, es.name
    # within one side, a key's revisions keep etcd's order: create <= mod <= the store's
    for side in (e, m):
        for s in side.steps:
            assert all(c <= mod <= s.store for c, mod, _ in s.keys.values()), (s.name, s.keys)


def test_revisions_move_as_etcds_step_by_step(sides: tuple[Side, Side, str, str]) -> None:
    e, m, _, _ = sides
    diffs = [
        f"{es[0]}: etcd {es[1:]} metaledger {ms[1:]}"
        for es, ms in zip(_relative(e), _relative(m), strict=True)
        if es != ms
    ]
    assert not diffs, "\n".join(diffs)
    assert e.steps[0].header == m.steps[0].header == 2  # etcd's first put, on a new store


def test_offset_revisions_keeps_metaledgers_old_count(tmp_path: Path) -> None:
    """``--offset-revisions``: the leader never switches; every request moves the revision."""
    with Cluster(tmp_path / "ml", n=1, extra_args=["--offset-revisions"]) as ml:
        ml.wait_ready(60)
        ml.wait_announced(60)  # the member's own record moves the revision too (by offset)
        side = Side(ml.endpoints[0])
        try:

            def store() -> int:
                return int(side.kv.Range(pb.RangeRequest(key=b"\0"), timeout=10).header.revision)

            before = store()
            grant = side.lease.LeaseGrant(pb.LeaseGrantRequest(TTL=60), timeout=10)
            assert grant.header.revision == store() == before + 1
            assert not ml.counts_etcd_revisions(0)
        finally:
            side.close()
