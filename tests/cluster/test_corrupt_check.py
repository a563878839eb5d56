"""etcd 3.4's corruption checks across three real processes
(``--experimental-corrupt-check-time``, ``--experimental-initial-corrupt-check``).

One member's image is changed behind its back with the test-only ``--debug-corrupt-kv
KEY=VALUE`` flag (off by default): at start it sets an existing key's value in the restored
image and nothing else, as a disk that flipped a value's bits while every CRC still held
would. Chosen over editing a snapshot or change-log file: those carry CRCs and are verified
on read (a rewritten file would have to be re-sealed by the writer under test), and the
flag gives the same member state deterministically; its files stay untouched and valid,
so restarting the member without the flag is one repair (its state restored from them);
the other, etcd's, removes the member and adds one from an empty data dir.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from nameserver.cli.exitcodes import ExitCode
from protos.etcdserverpb import rpc_pb2
from tests.cluster.test_alarms import alarms, member_id
from tests.etcd_harness import etcdctl_ok
from tests.harness import Cluster, grpc_code, running_cluster, wait_until

pytestmark = pytest.mark.cluster

CHECK_TIME = "1s"
CORRUPT = "etcdserver: corrupt cluster"
TAMPER = "--debug-corrupt-kv=a=tampered"


def refused_corrupt(call: Callable[[], object]) -> bool:
    """Whether ``call()`` is refused with etcd's ErrGRPCCorrupt (DATA_LOSS)."""
    try:
        call()
    except grpc.RpcError as exc:
        assert grpc_code(exc) == grpc.StatusCode.DATA_LOSS, exc
        assert exc.details() == CORRUPT, exc.details()
        return True
    return False


def get(c: Cluster, i: int, key: bytes, serializable: bool) -> bytes:
    req = rpc_pb2.RangeRequest(key=key, serializable=serializable)
    resp = c.stub(i).Range(req, timeout=10)
    return bytes(resp.kvs[0].value) if resp.kvs else b""


def start_with(c: Cluster, i: int, *flags: str) -> None:
    """Start node i with ``flags`` added to the cluster's (for this start only)."""
    saved = list(c.extra_args)
    c.extra_args.extend(flags)
    try:
        c.start(i)
    finally:
        c.extra_args[:] = saved


def caught_up(c: Cluster, i: int) -> bool:
    """Whether node i runs and every running member answers at one revision."""
    try:
        revs = {
            c.maintenance(j).Status(rpc_pb2.StatusRequest(), timeout=2).header.revision
            for j in c.running()
        }
    except grpc.RpcError:
        return False
    return len(revs) == 1 and c.is_running(i)


def seed(c: Cluster) -> int:
    """Two keys written and on every member; returns a follower."""
    c.wait_announced()
    leader = c.leader()
    c.put(leader, b"a", b"1")
    c.put(leader, b"b", b"2")
    c.wait_converged()
    return (leader + 1) % c.n


def tampered_follower(c: Cluster) -> tuple[int, int]:
    """Seeds the cluster, restarts a follower with its value of ``a`` changed behind its
    back and waits until it is caught up: (its index, its member id)."""
    f = seed(c)
    bad = member_id(c, f)
    c.stop(f)
    start_with(c, f, TAMPER)
    wait_until(lambda: caught_up(c, f), 30, "the tampered member catches up")
    return f, bad


def no_alarm_comes_back(c: Cluster) -> None:
    """The leader's next two checks find nothing."""
    leader = c.leader()
    marker = c.log_text(leader).count("finished peer corruption check")
    wait_until(
        lambda: c.log_text(leader).count("finished peer corruption check") >= marker + 2,
        15,
        "two more checks",
    )
    assert alarms(c, leader) == []


def test_periodic_check_raises_corrupt_refuses_writes_until_disarmed(tmp_path: Path) -> None:
    flags = [f"--experimental-corrupt-check-time={CHECK_TIME}"]
    with running_cluster(tmp_path, 3, extra_args=flags) as c:
        f, bad = tampered_follower(c)
        began = time.monotonic()
        # detected within the check period (plus a check's own time on a loaded machine)
        for i in range(c.n):
            wait_until(
                lambda i=i: alarms(c, i) == [(bad, rpc_pb2.CORRUPT)],
                10,
                f"n{i} lists CORRUPT for the tampered member",
            )
        took = time.monotonic() - began
        assert took < 10, took
        leader = c.leader()
        assert "same compact revision then hashes must match" in c.log_text(leader)
        out = etcdctl_ok(c.endpoints[0], "alarm", "list")
        assert out.strip() == f"memberID:{bad} alarm:CORRUPT", out
        # writes refused on every member, with etcd's error; reads still served
        for i in range(c.n):
            stub = c.stub(i)
            assert refused_corrupt(
                lambda s=stub: s.Put(rpc_pb2.PutRequest(key=b"c", value=b"3"), timeout=10)
            )
            assert refused_corrupt(
                lambda s=stub: s.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"b"), timeout=10)
            )
            op = rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"t", value=b"v"))
            assert refused_corrupt(
                lambda s=stub, op=op: s.Txn(rpc_pb2.TxnRequest(success=[op]), timeout=10)
            )
            assert get(c, i, b"b", serializable=False) == b"2"
            assert get(c, i, b"b", serializable=True) == b"2"
        assert get(c, f, b"a", serializable=True) == b"tampered"  # what it holds
        # the repair: the member restarted from its own (valid) files, then disarm
        c.stop(f)
        c.start(f)
        wait_until(lambda: caught_up(c, f), 30, "the repaired member catches up")
        assert get(c, f, b"a", serializable=True) == b"1"
        etcdctl_ok(c.endpoints[leader], "alarm", "disarm")
        for i in range(c.n):
            wait_until(lambda i=i: alarms(c, i) == [], 10, f"n{i} lists no alarm")
        c.put_retrying(leader, b"c", b"3")
        c.wait_converged()
        assert {get(c, i, b"c", serializable=True) for i in range(c.n)} == {b"3"}
        no_alarm_comes_back(c)


def test_initial_check_refuses_to_start_a_member_whose_hash_differs(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 3) as c:
        f = seed(c)
        c.stop(f)
        start_with(c, f, "--experimental-initial-corrupt-check", TAMPER)
        assert c.wait_exit(f, 30) == ExitCode.CANNOT_START
        text = c.log_text(f)
        assert "found different hash values from remote peer" in text
        assert f"{member_id(c, (f + 1) % 3):x}" in text
        assert "found data inconsistency with peers" in text
        # its files were not touched: it starts with the check and passes it
        start_with(c, f, "--experimental-initial-corrupt-check")
        wait_until(lambda: caught_up(c, f), 30, "the member starts and catches up")
        assert "initial corruption checking passed; no corruption" in c.log_text(f)
        assert get(c, f, b"a", serializable=True) == b"1"


def test_a_corrupt_member_removed_and_added_back_empty_then_disarm(tmp_path: Path) -> None:
    """The repair etcd's docs give: remove the member the alarm names, add a member from an
    empty data dir, then `alarm disarm` (with etcdctl throughout)."""
    flags = [f"--experimental-corrupt-check-time={CHECK_TIME}"]
    with running_cluster(tmp_path, 3, extra_args=flags) as c:
        f, bad = tampered_follower(c)
        rest = [i for i in range(c.n) if i != f]
        wait_until(lambda: alarms(c, rest[0]) == [(bad, rpc_pb2.CORRUPT)], 10, "CORRUPT raised")
        endpoint = c.endpoints[rest[0]]
        etcdctl_ok(endpoint, "member", "remove", f"{bad:x}")
        assert c.wait_exit(f, 30) == ExitCode.REMOVED, c.log_tail(f)
        fresh = c.add_node(rest, start=False)
        etcdctl_ok(endpoint, "member", "add", c.nodes[fresh].id, f"--peer-urls={c.peer_url(fresh)}")
        c.start(fresh)
        wait_until(lambda: caught_up(c, fresh), 30, "the new member catches up")
        assert get(c, fresh, b"a", serializable=True) == b"1"
        assert refused_corrupt(lambda: c.put(rest[0], b"c", b"3"))
        etcdctl_ok(endpoint, "alarm", "disarm")
        members = [*rest, fresh]
        for i in members:
            wait_until(lambda i=i: alarms(c, i) == [], 10, f"n{i} lists no alarm")
        c.put_retrying(rest[0], b"c", b"3")
        wait_until(
            lambda: {get(c, i, b"c", serializable=True) for i in members} == {b"3"},
            20,
            "the write reaches every member",
        )
        no_alarm_comes_back(c)
