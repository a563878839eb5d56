"""Alarms across three real processes: an alarm is a record of the log, so every member
lists it, it survives restarts, and a disarm through any member clears it everywhere;
while NOSPACE is raised every member refuses growing writes (apply refuses them too, the
same on every member) and still serves reads and deletes. Ends with "all images equal":
``Hash`` is the same on every member at the same applied revision.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from nameserver.client import Client
from protos.etcdserverpb import rpc_pb2
from tests.faults.inject import small_tmpfs
from tests.harness import Cluster, grpc_code, running_cluster, wait_until

pytestmark = pytest.mark.cluster

QUOTA_BYTES = 64 * 1024
VALUE = b"v" * 4096
NO_SPACE = "etcdserver: mvcc: database space exceeded"


def alarms(c: Cluster, i: int) -> list[tuple[int, int]]:
    resp = c.maintenance(i).Alarm(rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.GET), timeout=10)
    return sorted((a.memberID, a.alarm) for a in resp.alarms)


def listed(c: Cluster, i: int, me: int) -> bool:
    return alarms(c, i) == [(me, rpc_pb2.NOSPACE)]


def member_id(c: Cluster, i: int) -> int:
    return int(c.maintenance(i).Status(rpc_pb2.StatusRequest(), timeout=5).header.member_id)


def refused(call: Callable[[], object]) -> bool:
    """Whether ``call()`` is refused with etcd's NOSPACE error."""
    try:
        call()
    except grpc.RpcError as exc:
        assert grpc_code(exc) == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
        assert exc.details() == NO_SPACE, exc.details()
        return True
    return False


def put(c: Cluster, i: int, key: bytes, value: bytes = b"small") -> Callable[[], object]:
    return lambda: c.stub(i).Put(rpc_pb2.PutRequest(key=key, value=value), timeout=10)


def txn_put(c: Cluster, i: int) -> Callable[[], object]:
    op = rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"t", value=b"v"))
    return lambda: c.stub(i).Txn(rpc_pb2.TxnRequest(success=[op]), timeout=10)


def hashes(c: Cluster) -> set[tuple[int, int]]:
    """(revision, hash) of every member's image."""
    out = set()
    for i in range(c.n):
        resp = c.maintenance(i).Hash(rpc_pb2.HashRequest(), timeout=10)
        out.add((resp.header.revision, resp.hash))
    return out


def test_nospace_is_listed_refused_and_kept_by_every_member_until_disarmed(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path, 3, extra_args=[f"--quota-backend-bytes={QUOTA_BYTES}"]) as c:
        c.wait_announced()
        writer = (c.leader() + 1) % 3  # a follower: it raises NOSPACE for itself
        me = member_id(c, writer)
        filled = 0
        while not refused(put(c, writer, b"fill/%03d" % filled, VALUE)):
            filled += 1
            assert filled < 100, "no NOSPACE after 400 KiB with a 64 KiB quota"
        assert filled >= 1
        c.wait_converged()
        for i in range(3):
            assert alarms(c, i) == [(me, rpc_pb2.NOSPACE)], i
            # etcd's /health is false while an alarm is raised
            assert health(c, i) == (503, f"alarm raised: memberID:{me} alarm:NOSPACE"), i
            # growing writes are refused on every member; reads and deletes go through
            assert refused(put(c, i, b"k%d" % i)), i
            assert refused(txn_put(c, i)), i
            got = c.stub(i).Range(rpc_pb2.RangeRequest(key=b"fill/000"), timeout=10)
            assert got.kvs[0].value == VALUE
        with Client(c.endpoints, timeout_s=10) as client:  # the client's alarm list says so too
            assert client.alarms() == [(me, "NOSPACE")]
        deleted = c.stub(0).DeleteRange(
            rpc_pb2.DeleteRangeRequest(key=b"fill/", range_end=b"fill0"), timeout=10
        )
        assert deleted.deleted == filled
        # etcd's way back (its e2e test): delete, compact (the store's size counts the
        # history until compacted), defragment, disarm
        c.stub(0).Compact(
            rpc_pb2.CompactionRequest(revision=deleted.header.revision, physical=True), timeout=10
        )

        # an alarm is a record of the log: a whole-cluster restart keeps it
        for i in range(3):
            c.stop(i)
        for i in range(3):
            c.start(i)
        c.wait_ready()
        for i in range(3):
            wait_until(lambda i=i: listed(c, i, me), 20, f"alarm on {i}")  # type: ignore[misc]
            assert refused(put(c, i, b"after-restart"))

        # disarm through another member: cleared everywhere, writes work again
        other = (writer + 1) % 3
        disarmed = c.maintenance(other).Alarm(
            rpc_pb2.AlarmRequest(
                action=rpc_pb2.AlarmRequest.DEACTIVATE, memberID=me, alarm=rpc_pb2.NOSPACE
            ),
            timeout=10,
        )
        assert [(a.memberID, a.alarm) for a in disarmed.alarms] == [(me, rpc_pb2.NOSPACE)]
        c.wait_converged()
        for i in range(3):
            assert alarms(c, i) == []
            assert healthy(c, i)
            assert not refused(put(c, i, b"after-disarm/%d" % i))

        # all images equal: one (revision, hash) on every member
        c.wait_converged()
        wait_until(lambda: len(hashes(c)) == 1, 20, lambda: f"hashes differ: {hashes(c)}")


def test_an_alarm_raised_through_one_member_is_listed_by_all(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 3) as c:
        ids = [member_id(c, i) for i in range(3)]
        raised = c.maintenance(2).Alarm(
            rpc_pb2.AlarmRequest(
                action=rpc_pb2.AlarmRequest.ACTIVATE, memberID=ids[1], alarm=rpc_pb2.CORRUPT
            ),
            timeout=10,
        )
        assert [(a.memberID, a.alarm) for a in raised.alarms] == [(ids[1], rpc_pb2.CORRUPT)]
        c.wait_converged()
        for i in range(3):
            assert alarms(c, i) == [(ids[1], rpc_pb2.CORRUPT)]
        # CORRUPT refuses writes on every member with etcd's error (reads still served;
        # tests/cluster/test_corrupt_check.py), never as NOSPACE
        with pytest.raises(grpc.RpcError) as caught:
            put(c, 0, b"k")()
        assert grpc_code(caught.value) == grpc.StatusCode.DATA_LOSS
        assert caught.value.details() == "etcdserver: corrupt cluster"
        # disarming an alarm that is not raised answers no alarm, and no error (etcd)
        none = c.maintenance(0).Alarm(
            rpc_pb2.AlarmRequest(
                action=rpc_pb2.AlarmRequest.DEACTIVATE, memberID=ids[0], alarm=rpc_pb2.CORRUPT
            ),
            timeout=10,
        )
        assert list(none.alarms) == []
        c.wait_converged()
        wait_until(lambda: len(hashes(c)) == 1, 20, lambda: f"hashes differ: {hashes(c)}")


TMPFS_BYTES = 8 * 1024 * 1024
HEADROOM_BYTES = 1024 * 1024
BIG = b"f" * 16 * 1024


def health(c: Cluster, i: int) -> tuple[int, str]:
    """Node ``i``'s ``/health``: (HTTP status, reason)."""
    url = f"http://127.0.0.1:{c.nodes[i].metrics_port}/health"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())["reason"]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["reason"]


def healthy(c: Cluster, i: int) -> bool:
    return health(c, i)[0] == 200


def disk_ok(c: Cluster, i: int) -> bool:
    """Whether node ``i``'s own disk works (its /health may still be false for an alarm)."""
    status, reason = health(c, i)
    return status == 200 or reason.startswith("alarm raised: ")


def test_a_members_full_disk_raises_its_nospace_alarm_in_the_log(tmp_path: Path) -> None:
    """A follower's Raft log fills its disk: it proposes NOSPACE for itself, the other two
    commit it and refuse growing writes; space returns, the follower catches up and clears
    the alarm it raised: writes work again without a disarm or a restart."""
    c = Cluster(tmp_path, 3, start=False)
    victim = 2
    raft_dir = c.data_dir(victim) / "raft"
    with small_tmpfs(raft_dir, TMPFS_BYTES):
        failed = True
        try:
            for i in range(3):
                c.start(i)
            c.wait_ready()
            c.wait_announced()
            if c.leader() == victim:
                target = member_id(c, 0)
                c.maintenance(victim).MoveLeader(
                    rpc_pb2.MoveLeaderRequest(targetID=target), timeout=20
                )
                wait_until(lambda: c.leader() != victim, 20, "leadership moved")
            victim_id = member_id(c, victim)
            st = os.statvfs(raft_dir)
            filler = raft_dir / "filler"
            filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - HEADROOM_BYTES))

            def raised_on(i: int) -> bool:
                return alarms(c, i) == [(victim_id, rpc_pb2.NOSPACE)]

            leader = c.leader()
            for n in range(400):  # 1 MiB / 16 KiB: the victim's WAL fills within ~64 puts
                if raised_on(leader):
                    break
                with contextlib.suppress(grpc.RpcError):  # refused once the alarm applies
                    c.stub(leader).Put(rpc_pb2.PutRequest(key=b"big/%d" % n, value=BIG), timeout=5)
            wait_until(lambda: raised_on(leader), 30, lambda: c.log_tail(victim))
            others = [i for i in range(3) if i != victim]
            for i in others:
                wait_until(lambda i=i: raised_on(i), 20, f"alarm on {i}")  # type: ignore[misc]
                assert refused(put(c, i, b"refused/%d" % i))

            filler.unlink()
            wait_until(lambda: disk_ok(c, victim), 30, lambda: c.log_tail(victim))
            # the victim clears the alarm it raised itself once its disk has room again
            for i in range(3):
                wait_until(lambda i=i: alarms(c, i) == [], 30, f"alarm cleared on {i}")  # type: ignore[misc]
            c.wait_converged()
            for i in range(3):
                assert alarms(c, i) == []
                assert not refused(put(c, i, b"after/%d" % i))
            c.wait_converged()
            wait_until(lambda: len(hashes(c)) == 1, 20, lambda: f"hashes differ: {hashes(c)}")
            failed = False
        finally:
            c.close(failed=failed)
