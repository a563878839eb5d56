"""etcd's revision count (the default) on three members: the leader
switches the store once every member says it can; then lease and other requests keep the
revision while key changes move it one each, every member holds the same revisions (HashKV
at one revision agrees), and a restarted member (history rebuilt from its change log and
snapshots) reads past revisions and replays watches at the same revisions as before. And a
new three-member cluster numbers as a new three-member etcd 3.4 does from its first put on
(revision 2), whatever offsets its members' records took before the switch."""

from __future__ import annotations

import os
import shutil
from contextlib import ExitStack
from pathlib import Path

import grpc
import pytest

from nameserver.client import Client
from protos.etcdserverpb import rpc_pb2 as pb
from protos.etcdserverpb import rpc_pb2_grpc
from tests.etcd_harness import EtcdServer
from tests.harness import Cluster, free_ports, wait_until
from tests.integration.test_etcd_revisions import Side, _run

pytestmark = [pytest.mark.integration]

FLAGS = ["--snapshot-every-items", "20"]


def _store_revision(c: Cluster, i: int) -> int:
    return int(c.stub(i).Range(pb.RangeRequest(key=b"\x00"), timeout=10).header.revision)


def _counts(c: Cluster) -> bool:
    """Whether a lease grant keeps the store revision (the store switched)."""
    before = _store_revision(c, 0)
    with grpc.insecure_channel(c.endpoints[0]) as channel:
        resp = rpc_pb2_grpc.LeaseStub(channel).LeaseGrant(pb.LeaseGrantRequest(TTL=60), timeout=10)
    return int(resp.header.revision) == before == _store_revision(c, 0)


def test_three_members_count_alike_and_keep_it_across_a_restart(tmp_path: Path) -> None:
    with Cluster(tmp_path / "c", n=3, extra_args=FLAGS) as c:
        c.wait_ready(60)
        c.wait_announced(30)
        wait_until(lambda: _counts(c), 30, "the store counting etcd's way")
        start = _store_revision(c, 0)
        revs = [int(c.put(i % 3, b"rc/k", b"v%d" % i).header.revision) for i in range(30)]
        assert revs == list(range(start + 1, start + 31))  # one a put, nothing between
        c.wait_converged()
        last = _store_revision(c, 0)
        assert last == revs[-1]
        hashes = {
            i: c.maintenance(i).HashKV(pb.HashKVRequest(revision=last), timeout=30).hash
            for i in range(3)
        }
        assert len(set(hashes.values())) == 1, hashes

        # a lease's fencing token is still its grant's offset (LeaseGrant's trailing
        # metadata): an Offsets commit fenced by it goes through
        with Client(c.endpoints, timeout_s=10) as client:
            lease = client.lease_grant(30)
            assert lease.fencing_token > last  # an offset: ahead of the store revision
            client.offsets_commit(
                "rc-job", "p0", b"o1", lease_id=lease.id, fencing_token=lease.fencing_token
            )
            assert _store_revision(c, 0) == last  # neither moved the store revision

        c.restart(1)
        c.wait_ready(60)
        c.wait_converged()
        assert _store_revision(c, 1) == last
        readable = []
        for i, rev in enumerate(revs):
            try:
                resp = c.stub(1).Range(
                    pb.RangeRequest(key=b"rc/k", revision=rev, serializable=True), timeout=10
                )
            except grpc.RpcError as err:
                assert "compacted" in (err.details() or "") and not readable, i
                continue
            assert [kv.value for kv in resp.kvs] == [b"v%d" % i], rev
            assert resp.kvs[0].mod_revision == rev
            readable.append(i)
        assert readable and readable[-1] == 29

        # a watch from a past revision replays the puts at their revisions, on every member
        first = revs[readable[0]]
        for i in range(3):
            create = pb.WatchRequest(
                create_request=pb.WatchCreateRequest(key=b"rc/k", start_revision=first)
            )
            seen: list[int] = []
            with grpc.insecure_channel(c.endpoints[i]) as channel:
                stream = rpc_pb2_grpc.WatchStub(channel).Watch(iter([create]), timeout=20)
                try:
                    for resp in stream:
                        assert not resp.canceled, (i, resp.cancel_reason)
                        seen.extend(ev.kv.mod_revision for ev in resp.events)
                        if seen and seen[-1] == revs[-1]:
                            break
                finally:
                    stream.cancel()
            assert seen == revs[readable[0] :], i


def _etcd_three(root: Path, stack: ExitStack) -> list[EtcdServer]:
    """A new three-member etcd 3.4 cluster on free ports (stopped by ``stack``)."""
    ports = free_ports(6)
    peers = [f"http://127.0.0.1:{ports[2 * i + 1]}" for i in range(3)]
    initial = ",".join(f"e{i}={url}" for i, url in enumerate(peers))
    token = f"--initial-cluster-token=rev3-{os.getpid()}-{ports[0]}"
    return [
        stack.enter_context(
            EtcdServer(
                root / f"e{i}",
                ports=(ports[2 * i], ports[2 * i + 1]),
                extra=[f"--name=e{i}", f"--initial-cluster={initial}", token],
            )
        )
        for i in range(3)
    ]


@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd 3.4 is not installed")
def test_a_new_three_member_cluster_numbers_as_a_new_etcd_does(tmp_path: Path) -> None:
    with ExitStack() as stack:
        etcd = _etcd_three(tmp_path / "etcd", stack)
        for member in etcd:
            member.wait_ready(timeout=60)
        ml = stack.enter_context(Cluster(tmp_path / "ml", n=3))
        ml.wait_ready(60)
        ml.wait_announced(30)
        wait_until(lambda: all(ml.counts_etcd_revisions(i) for i in range(3)), 30, "switched")
        e, m = Side(etcd[0].address), Side(ml.endpoints[0])
        stack.callback(e.close)
        stack.callback(m.close)
        before = [_store_revision_of(s) for s in (e, m)]
        assert before == [1, 1]  # an empty store, on both
        _run(e)
        _run(m)
        assert [s.name for s in e.steps] == [s.name for s in m.steps]
        diffs = [
            f"{es.name}: etcd {(es.header, es.store, es.keys)} "
            f"metaledger {(ms.header, ms.store, ms.keys)}"
            for es, ms in zip(e.steps, m.steps, strict=True)
            if (es.header, es.store, es.keys) != (ms.header, ms.store, ms.keys)
        ]
        assert not diffs, "\n".join(diffs)
        assert e.steps[0].header == m.steps[0].header == 2  # the first put: 2 on both
        for i in (1, 2):  # every member holds the same numbering (as root: auth is on)
            other = Side(ml.endpoints[i])
            stack.callback(other.close)
            other.token = other.auth.Authenticate(
                pb.AuthenticateRequest(name="root", password="p"), timeout=10
            ).token
            assert _store_revision_of(other) == m.steps[-1].store


def _store_revision_of(side: Side) -> int:
    resp = side.kv.Range(pb.RangeRequest(key=b"\x00"), timeout=10, metadata=side.md)
    return int(resp.header.revision)
