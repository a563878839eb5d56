"""etcd's revision count (the default) on three members: the leader
switches the store once every member says it can; then lease and other requests keep the
revision while key changes move it one each, every member holds the same revisions (HashKV
at one revision agrees), and a restarted member (history rebuilt from its change log and
snapshots) reads past revisions and replays watches at the same revisions as before."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from nameserver.client import Client
from protos.etcdserverpb import rpc_pb2 as pb
from protos.etcdserverpb import rpc_pb2_grpc
from tests.harness import Cluster, wait_until

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
