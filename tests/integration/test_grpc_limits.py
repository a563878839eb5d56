"""Requests that could exhaust a node or could not apply, against real nodes (issue 14).

- A Txn of 128 full-range reads over a large value set costs less than 50 MB of extra
  RSS and gets RESOURCE_EXHAUSTED naming max_response_bytes (it built 1.96 GB before);
  a plain Range over it too; the same reads with keys_only or a limit are served.
- A write txn whose reads would pass the limit, a txn nested past 16 levels (49 was
  written to the log and then failed to apply on every node; 50 did not decode) and an
  unknown enum are refused before anything is proposed: the log's end offset does not move.
- Hash, HashKV (also through ``etcdctl endpoint hashkv``), Defragment answer; MemberUpdate
  says what is missing, MemberPromote of an unknown member answers etcd's error; none of it
  is logged as a server error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from nameserver.config import MAX_RESPONSE_BYTES
from nameserver.kv.semantics import MAX_TXN_DEPTH
from protos.etcdserverpb import rpc_pb2 as pb
from protos.etcdserverpb import rpc_pb2_grpc, v3election_pb2, v3election_pb2_grpc, v3lock_pb2
from protos.metaledger.v1 import offsets_pb2
from tests.harness import Cluster, prefix_end, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.faults]

MiB = 1024 * 1024
INVALID = grpc.StatusCode.INVALID_ARGUMENT
BIG_PREFIX = b"big/"
BIG_KEYS = 40  # 40 values of 1 MiB: each full range is 2.5 times max_response_bytes
EXTRA_RSS_LIMIT_BYTES = 50 * MiB


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One real node holding BIG_KEYS values of 1 MiB under BIG_PREFIX."""
    c = Cluster(tmp_path_factory.mktemp("limits") / "cluster", n=1)
    failed = True
    try:
        c.wait_ready(60)
        c.wait_announced(30)
        for i in range(BIG_KEYS):
            c.put(0, BIG_PREFIX + b"%03d" % i, bytes([65 + i % 26]) * MiB, timeout=30)
        yield c
        failed = False
    finally:
        c.close(failed=failed)


def kv(c: Cluster) -> rpc_pb2_grpc.KVStub:
    return c.stub(0)


def end_offset(c: Cluster) -> int:
    return c.status(0).end_offset


def full_range(**kw: Any) -> pb.RangeRequest:
    return pb.RangeRequest(key=BIG_PREFIX, range_end=prefix_end(BIG_PREFIX), **kw)


def refused(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


class PeakRss:
    """The highest VmRSS of a process while the block runs (sampled every 2 ms), and its
    VmHWM when the kernel lets us reset it (clear_refs 5) before."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before = 0
        self.peak = 0
        self.hwm_reset = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _status_kib(self.pid, "VmRSS") * 1024)
            time.sleep(0.002)

    def __enter__(self) -> PeakRss:
        self.before = _status_kib(self.pid, "VmRSS") * 1024
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            self.hwm_reset = True
        except OSError:
            pass
        self.peak = self.before
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.hwm_reset:
            self.peak = max(self.peak, _status_kib(self.pid, "VmHWM") * 1024)

    @property
    def extra(self) -> int:
        return self.peak - self.before


def node_pid(c: Cluster) -> int:
    proc = c.procs[0]
    assert proc is not None
    return proc.pid


def test_128_full_range_reads_are_refused_within_50_mb(node: Cluster) -> None:
    txn = pb.TxnRequest(success=[pb.RequestOp(request_range=full_range()) for _ in range(128)])
    pid = node_pid(node)
    for _ in range(3):  # again and again: nothing is kept either
        with PeakRss(pid) as rss:
            err = refused(lambda: kv(node).Txn(txn, timeout=30))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
        assert "response is too large" in err.details()
        assert f"max_response_bytes={MAX_RESPONSE_BYTES}" in err.details()
        assert rss.extra < EXTRA_RSS_LIMIT_BYTES, f"{rss.extra / MiB:.1f} MiB extra RSS"


def test_a_range_over_the_limit_is_refused_and_bounded_ones_are_served(node: Cluster) -> None:
    pid = node_pid(node)
    with PeakRss(pid) as rss:
        err = refused(lambda: kv(node).Range(full_range(), timeout=30))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
    assert "max_response_bytes" in err.details()
    assert rss.extra < EXTRA_RSS_LIMIT_BYTES, f"{rss.extra / MiB:.1f} MiB extra RSS"
    keys = kv(node).Range(full_range(keys_only=True), timeout=30)
    assert keys.count == BIG_KEYS and len(keys.kvs) == BIG_KEYS
    some = kv(node).Range(full_range(limit=10), timeout=30)
    assert (some.count, len(some.kvs), some.more) == (BIG_KEYS, 10, True)
    counted = kv(node).Range(full_range(count_only=True), timeout=30)
    assert counted.count == BIG_KEYS and not counted.kvs
    ranges = [pb.RequestOp(request_range=full_range(limit=2)) for _ in range(5)]
    txn = kv(node).Txn(pb.TxnRequest(success=ranges), timeout=30)
    assert [len(r.response_range.kvs) for r in txn.responses] == [2] * 5


def test_a_write_txn_reading_past_the_limit_is_not_proposed(node: Cluster) -> None:
    before = end_offset(node)
    txn = pb.TxnRequest(
        success=[
            pb.RequestOp(request_put=pb.PutRequest(key=b"w/k", value=b"v")),
            pb.RequestOp(request_range=full_range()),
        ]
    )
    err = refused(lambda: kv(node).Txn(txn, timeout=30))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
    delete = pb.DeleteRangeRequest(key=BIG_PREFIX, range_end=prefix_end(BIG_PREFIX), prev_kv=True)
    err = refused(lambda: kv(node).DeleteRange(delete, timeout=30))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
    assert end_offset(node) == before
    assert kv(node).Range(full_range(count_only=True), timeout=10).count == BIG_KEYS


def nested_txn(depth: int, key: bytes) -> pb.TxnRequest:
    txn = pb.TxnRequest(success=[pb.RequestOp(request_put=pb.PutRequest(key=key, value=b"v"))])
    for _ in range(depth - 1):
        txn = pb.TxnRequest(success=[pb.RequestOp(request_txn=txn)])
    return txn


def _field(number: int, body: bytes) -> bytes:
    """One length-delimited protobuf field (lengths here stay below 2**14)."""
    size = len(body)
    length = bytes([size]) if size < 128 else bytes([size & 0x7F | 0x80, size >> 7])
    return bytes([number << 3 | 2]) + length + body


def raw_nested_txn(depth: int, key: bytes) -> bytes:
    """:func:`nested_txn` encoded by hand: protobuf's Python classes refuse to build one
    past their decoding depth (TxnRequest.success = 2, RequestOp.request_txn = 4)."""
    op = pb.RequestOp(request_put=pb.PutRequest(key=key, value=b"v")).SerializeToString()
    txn = _field(pb.TxnRequest.SUCCESS_FIELD_NUMBER, op)
    for _ in range(depth - 1):
        op = _field(pb.RequestOp.REQUEST_TXN_FIELD_NUMBER, txn)
        txn = _field(pb.TxnRequest.SUCCESS_FIELD_NUMBER, op)
    return txn


def test_deep_txns_are_refused_before_they_are_proposed(node: Cluster) -> None:
    ok = kv(node).Txn(nested_txn(MAX_TXN_DEPTH, b"deep/ok"), timeout=10)
    assert ok.succeeded
    assert kv(node).Range(pb.RangeRequest(key=b"deep/ok"), timeout=10).count == 1
    before = end_offset(node)
    for depth in (MAX_TXN_DEPTH + 1, 49):
        err = refused(lambda d=depth: kv(node).Txn(nested_txn(d, b"deep/no"), timeout=10))
        assert err.code() == INVALID, err.details()
        assert "nested too deeply" in err.details() and str(MAX_TXN_DEPTH) in err.details()
    # 60 deep is past protobuf's own limit: it cannot be decoded at all
    assert raw_nested_txn(20, b"k") == nested_txn(20, b"k").SerializeToString()
    raw = raw_nested_txn(60, b"deep/no")
    err = refused(lambda: node.channel(0).unary_unary("/etcdserverpb.KV/Txn")(raw, timeout=10))
    assert err.code() == INVALID, err.details()
    assert "cannot decode etcdserverpb.TxnRequest" in err.details()
    assert "nested deeper" in err.details()
    # nested txns share etcd's max_txn_ops budget, and all levels a flat txn's total
    inner = pb.TxnRequest(
        success=[
            pb.RequestOp(request_put=pb.PutRequest(key=b"deep/n%d" % i, value=b"v"))
            for i in range(100)
        ]
    )
    outer = pb.TxnRequest(
        success=[pb.RequestOp(request_put=pb.PutRequest(key=b"deep/o%d" % i)) for i in range(29)]
        + [pb.RequestOp(request_txn=inner)]
    )
    err = refused(lambda: kv(node).Txn(outer, timeout=10))
    assert err.code() == INVALID and "too many operations in txn request" in err.details()
    assert end_offset(node) == before
    assert kv(node).Range(pb.RangeRequest(key=b"deep/no"), timeout=10).count == 0


def test_unknown_fields_never_reach_the_log(node: Cluster) -> None:
    """A Put carrying an unknown group nested 100 deep decodes (100 levels), but one level
    deeper, inside the log entry, it did not: it was written and failed to apply. Unknown
    fields are dropped at decoding: the put applies, and the node applies all it logs."""
    group = b""
    for _ in range(99):
        group = bytes([15 << 3 | 3]) + group + bytes([15 << 3 | 4])
    raw = pb.PutRequest(key=b"unknown/k", value=b"v").SerializeToString() + group
    node.channel(0).unary_unary("/etcdserverpb.KV/Put")(raw, timeout=10)
    got = kv(node).Range(pb.RangeRequest(key=b"unknown/k"), timeout=10)
    assert [k.value for k in got.kvs] == [b"v"]
    st = node.status(0)
    assert st.apply_offset == st.end_offset
    assert "rejected by the state machine" not in node.log_text(0)


def test_unknown_enum_values_are_refused_naming_the_field(node: Cluster) -> None:
    before = end_offset(node)
    cases: list[tuple[Callable[[], Any], str]] = [
        (
            lambda: kv(node).Range(pb.RangeRequest(key=b"a", sort_target=99), timeout=10),
            "sort_target",
        ),
        (lambda: kv(node).Range(pb.RangeRequest(key=b"a", sort_order=7), timeout=10), "sort_order"),
        (
            lambda: kv(node).Txn(
                pb.TxnRequest(
                    success=[pb.RequestOp(request_range=pb.RangeRequest(key=b"a", sort_target=9))]
                ),
                timeout=10,
            ),
            "sort_target",
        ),
        (
            lambda: kv(node).Txn(
                pb.TxnRequest(
                    compare=[pb.Compare(key=b"a", target=9)],
                    success=[pb.RequestOp(request_put=pb.PutRequest(key=b"e/k"))],
                ),
                timeout=10,
            ),
            "compare[0].target",
        ),
        (
            lambda: kv(node).Txn(
                pb.TxnRequest(
                    compare=[pb.Compare(key=b"a", result=9)],
                    success=[pb.RequestOp(request_put=pb.PutRequest(key=b"e/k"))],
                ),
                timeout=10,
            ),
            "compare[0].result",
        ),
    ]
    for call, field in cases:
        err = refused(call)
        assert err.code() == INVALID, (field, err.code(), err.details())
        assert field in err.details(), (field, err.details())
    assert end_offset(node) == before
    watch = rpc_pb2_grpc.WatchStub(node.channel(0)).Watch(
        iter([pb.WatchRequest(create_request=pb.WatchCreateRequest(key=b"a", filters=[5]))]),
        timeout=10,
    )
    first = next(watch)
    watch.cancel()
    assert first.canceled and "filters" in first.cancel_reason, first


def test_every_service_refuses_requests_over_the_request_limit(node: Cluster) -> None:
    """etcd refuses any request over --max-request-bytes; so do the lock, election,
    offsets and routing services here, before decoding it. Lock and election values are
    kv values: at most max_value_bytes."""
    before = end_offset(node)
    huge = b"n" * (2 * MiB + 1)
    calls = [
        ("/v3lockpb.Lock/Lock", v3lock_pb2.LockRequest(name=huge, lease=1)),
        ("/v3electionpb.Election/Campaign", v3election_pb2.CampaignRequest(name=huge, lease=1)),
        ("/metaledger.v1.Offsets/Commit", offsets_pb2.CommitRequest(job=huge.decode())),
        ("/etcdserverpb.KV/Range", pb.RangeRequest(key=huge)),
    ]
    for path, request in calls:
        method = node.channel(0).unary_unary(path)
        err = refused(lambda m=method, r=request: m(r.SerializeToString(), timeout=30))
        assert err.code() == INVALID, (path, err.details())
        assert "request is too large" in err.details() and "max_request_bytes" in err.details()
    lease = node.channel(0).unary_unary(
        "/etcdserverpb.Lease/LeaseGrant",
        request_serializer=pb.LeaseGrantRequest.SerializeToString,
        response_deserializer=pb.LeaseGrantResponse.FromString,
    )(pb.LeaseGrantRequest(TTL=60), timeout=10)
    campaign = v3election_pb2.CampaignRequest(
        name=b"e/big", lease=lease.ID, value=b"v" * (3 * MiB // 2 + 1)
    )
    err = refused(
        lambda: v3election_pb2_grpc.ElectionStub(node.channel(0)).Campaign(campaign, timeout=10)
    )
    assert err.code() == INVALID and "max_value_bytes" in err.details(), err.details()
    assert end_offset(node) == before + 1  # the lease grant only


def test_maintenance_and_cluster_methods_answer_without_server_errors(node: Cluster) -> None:
    since = node.nodes[0].log_path.stat().st_size
    m = node.maintenance(0)
    one = m.HashKV(pb.HashKVRequest(), timeout=30)
    again = m.HashKV(pb.HashKVRequest(revision=one.header.revision), timeout=30)
    assert one.header.revision > 0 and one.hash == again.hash
    assert one.compact_revision == 0  # never compacted
    whole = m.Hash(pb.HashRequest(), timeout=30)
    assert whole.hash and whole.hash != one.hash
    node.put(0, b"hash/changed", b"1")
    assert m.HashKV(pb.HashKVRequest(), timeout=30).hash != one.hash
    err = refused(lambda: m.HashKV(pb.HashKVRequest(revision=10**9), timeout=10))
    assert err.code() == grpc.StatusCode.OUT_OF_RANGE and "future revision" in err.details()
    assert m.HashKV(pb.HashKVRequest(revision=one.header.revision), timeout=30).hash == one.hash
    kv(node).Compact(pb.CompactionRequest(revision=one.header.revision), timeout=10)
    err = refused(lambda: m.HashKV(pb.HashKVRequest(revision=1), timeout=10))
    assert err.code() == grpc.StatusCode.OUT_OF_RANGE and "compacted" in err.details()
    m.Defragment(pb.DefragmentRequest(), timeout=10)
    cluster = node.cluster_stub(0)
    # (learners exist now: promoting an unknown member answers as etcd 3.4 does)
    err = refused(lambda: cluster.MemberPromote(pb.MemberPromoteRequest(ID=1), timeout=10))
    assert (
        err.code() == grpc.StatusCode.NOT_FOUND and err.details() == "etcdserver: member not found"
    )
    err = refused(lambda: cluster.MemberUpdate(pb.MemberUpdateRequest(ID=1), timeout=10))
    assert err.code() == grpc.StatusCode.UNIMPLEMENTED and "MemberUpdate" in err.details()
    with open(node.nodes[0].log_path, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    assert " ERROR " not in text and "Traceback" not in text, text[-3000:]


LIMITED_RESPONSE_BYTES = 64 * 1024


class LimitedCluster(Cluster):
    """Nodes started with ``serve --max-response-bytes LIMITED_RESPONSE_BYTES``."""

    def command(self, i: int) -> list[str]:
        cmd = super().command(i)
        if "serve" in cmd:
            return [*cmd, "--max-response-bytes", str(LIMITED_RESPONSE_BYTES)]
        args = json.loads(cmd[-1])  # the Python launcher: ServerConfig fields as JSON
        args["max_response_bytes"] = LIMITED_RESPONSE_BYTES
        return [*cmd[:-1], json.dumps(args)]


def test_the_serve_flag_sets_the_limit(tmp_path: Path) -> None:
    with LimitedCluster(tmp_path / "cluster", n=1) as c:
        c.wait_ready(60)
        for i in range(10):
            c.put(0, b"small/%d" % i, b"s" * 10 * 1024)
        everything = pb.RangeRequest(key=b"small/", range_end=prefix_end(b"small/"))
        err = refused(lambda: c.stub(0).Range(everything, timeout=10))
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"max_response_bytes={LIMITED_RESPONSE_BYTES}" in err.details()
        everything.limit = 5
        assert len(c.stub(0).Range(everything, timeout=10).kvs) == 5


@pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed")
def test_etcdctl_endpoint_hashkv_agrees_on_every_node(tmp_path: Path) -> None:
    with Cluster(tmp_path / "cluster", n=3) as c:
        c.wait_ready(60)
        c.wait_announced(30)
        for i in range(20):
            c.put(i % 3, b"hk/%02d" % i, b"v%d" % i)
        c.wait_converged()
        # the store revision every node now has (the apply offset runs ahead of it)
        target = int(c.stub(0).Range(pb.RangeRequest(key=b"\x00"), timeout=10).header.revision)
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ETCDCTL_")}
        env["ETCDCTL_API"] = "3"

        def hashes() -> dict[str, tuple[int, int]] | None:
            out = subprocess.run(
                [
                    "etcdctl",
                    f"--endpoints={','.join(c.endpoints)}",
                    *("endpoint", "hashkv", "-w", "json"),
                    *("--dial-timeout=5s", "--command-timeout=20s"),
                ],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
                check=True,
            )
            got = {
                e["Endpoint"]: (e["HashKV"]["header"]["revision"], e["HashKV"]["hash"])
                for e in json.loads(out.stdout)
            }
            revisions = {rev for rev, _ in got.values()}
            return got if revisions == {max(revisions)} and max(revisions) >= target else None

        got = wait_until(hashes, 30, "all nodes at one revision")
        assert len(got) == 3 and len({h for _, h in got.values()}) == 1, got
