"""The metadata state machine, driven with plain entries (no consensus, no gRPC)."""

from __future__ import annotations

import pytest

from nameserver.errors import Rejected
from nameserver.kinds import REGISTRY
from nameserver.kv.records import KeyValue
from nameserver.kv.semantics import do_range, validate_txn
from nameserver.state.machine import MetadataStateMachine
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Entry

C = rpc_pb2.Compare


def put_entry(key: bytes, value: bytes, **kw: object) -> Entry:
    op = records_pb2.KvOperation(put=rpc_pb2.PutRequest(key=key, value=value, **kw))
    return Entry(type="kv", key=key, value=op.SerializeToString())


def del_entry(key: bytes, range_end: bytes = b"", prev_kv: bool = False) -> Entry:
    op = records_pb2.KvOperation(
        delete_range=rpc_pb2.DeleteRangeRequest(key=key, range_end=range_end, prev_kv=prev_kv)
    )
    return Entry(type="kv", key=key, value=op.SerializeToString())


def txn_entry(txn: rpc_pb2.TxnRequest) -> Entry:
    return Entry(type="txn", value=records_pb2.TxnOperation(txn=txn).SerializeToString())


class Driver:
    def __init__(self) -> None:
        self.sm = MetadataStateMachine.empty(REGISTRY)
        self.offset = 0
        self.effects: list[tuple[int, object]] = []

    def apply(self, entry: Entry, gap: int = 1) -> object:
        self.offset += gap
        effects, result = self.sm.apply(self.offset, 1, [entry])
        self.sm.publish()
        self.effects.extend((self.offset, e) for e in effects)
        return result

    def get(self, key: bytes) -> KeyValue | None:
        return self.sm.image.kv.get(key)


def test_put_sets_revisions_and_versions_as_etcd_defines_them() -> None:
    d = Driver()
    d.apply(put_entry(b"a", b"1"))
    d.apply(Entry(type="noop"))  # offsets have gaps; revisions are offsets
    resp = d.apply(put_entry(b"a", b"2", prev_kv=True))
    kv = d.get(b"a")
    assert kv == KeyValue(b"a", b"2", create_revision=1, mod_revision=3, version=2)
    assert isinstance(resp, rpc_pb2.PutResponse)
    assert resp.prev_kv.value == b"1" and resp.prev_kv.mod_revision == 1
    assert d.sm.image.revision == 3


def test_delete_then_recreate_restarts_version_and_create_revision() -> None:
    d = Driver()
    d.apply(put_entry(b"a", b"1"))
    resp = d.apply(del_entry(b"a", prev_kv=True))
    assert resp.deleted == 1 and resp.prev_kvs[0].value == b"1"
    assert d.get(b"a") is None
    d.apply(put_entry(b"a", b"x"))
    assert d.get(b"a") == KeyValue(b"a", b"x", 3, 3, 1)


def test_delete_range_and_prefix() -> None:
    d = Driver()
    for k in (b"a", b"b/1", b"b/2", b"c"):
        d.apply(put_entry(k, b"v"))
    assert d.apply(del_entry(b"b/", b"b0")).deleted == 2
    assert [kv.key for kv in d.sm.image.kv.range(b"\x00", b"\x00")] == [b"a", b"c"]
    assert d.apply(del_entry(b"a", b"\x00")).deleted == 2


def test_ignore_value_on_missing_key_is_rejected_and_changes_nothing() -> None:
    d = Driver()
    with pytest.raises(Rejected, match="key not found"):
        d.apply(put_entry(b"a", b"", ignore_value=True))
    assert d.get(b"a") is None


def test_range_sort_limit_count() -> None:
    d = Driver()
    for i, k in enumerate([b"k3", b"k1", b"k2"]):
        d.apply(put_entry(k, b"v%d" % i))
    req = rpc_pb2.RangeRequest(key=b"k", range_end=b"l", limit=2)
    resp = do_range(d.sm.image.kv, req)
    assert [kv.key for kv in resp.kvs] == [b"k1", b"k2"] and resp.more and resp.count == 3
    req = rpc_pb2.RangeRequest(
        key=b"k",
        range_end=b"l",
        sort_order=rpc_pb2.RangeRequest.DESCEND,
        sort_target=rpc_pb2.RangeRequest.MOD,
    )
    assert [kv.key for kv in do_range(d.sm.image.kv, req).kvs] == [b"k2", b"k1", b"k3"]
    resp = do_range(d.sm.image.kv, rpc_pb2.RangeRequest(key=b"k", range_end=b"l", count_only=True))
    assert resp.count == 3 and not resp.kvs
    resp = do_range(d.sm.image.kv, rpc_pb2.RangeRequest(key=b"k1", keys_only=True))
    assert resp.kvs[0].key == b"k1" and resp.kvs[0].value == b""


@pytest.mark.parametrize(
    ("target", "field", "value", "result", "expected"),
    [
        (C.VERSION, "version", 1, C.EQUAL, True),
        (C.VERSION, "version", 1, C.GREATER, False),
        (C.VERSION, "version", 2, C.LESS, True),
        (C.CREATE, "create_revision", 1, C.EQUAL, True),
        (C.MOD, "mod_revision", 1, C.NOT_EQUAL, False),
        (C.VALUE, "value", b"v", C.EQUAL, True),
        (C.VALUE, "value", b"a", C.GREATER, True),
        (C.VALUE, "value", b"z", C.LESS, True),
    ],
)
def test_txn_compares(target: int, field: str, value: object, result: int, expected: bool) -> None:
    d = Driver()
    d.apply(put_entry(b"k", b"v"))
    cmp = C(key=b"k", target=target, result=result, **{field: value})
    txn = rpc_pb2.TxnRequest(
        compare=[cmp],
        success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"ok", value=b"1"))],
        failure=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"ko", value=b"1"))],
    )
    resp = d.apply(txn_entry(txn))
    assert resp.succeeded is expected
    assert (d.get(b"ok") is not None) is expected and (d.get(b"ko") is not None) is not expected


def test_txn_value_compare_on_missing_key_fails_but_version_zero_matches() -> None:
    d = Driver()
    value_cmp = C(key=b"nope", target=C.VALUE, result=C.NOT_EQUAL, value=b"x")
    assert d.apply(txn_entry(rpc_pb2.TxnRequest(compare=[value_cmp]))).succeeded is False
    version_cmp = C(key=b"nope", target=C.VERSION, result=C.EQUAL, version=0)
    assert d.apply(txn_entry(rpc_pb2.TxnRequest(compare=[version_cmp]))).succeeded is True


def test_txn_reads_see_its_own_writes_and_share_one_revision() -> None:
    d = Driver()
    txn = rpc_pb2.TxnRequest(
        success=[
            rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"a", value=b"1")),
            rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"b", value=b"2")),
            rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=b"a", range_end=b"c")),
        ]
    )
    resp = d.apply(txn_entry(txn))
    assert [kv.key for kv in resp.responses[2].response_range.kvs] == [b"a", b"b"]
    assert d.get(b"a").mod_revision == d.get(b"b").mod_revision == 1


def test_failed_txn_changes_nothing_even_after_partial_writes() -> None:
    d = Driver()
    txn = rpc_pb2.TxnRequest(
        success=[
            rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"a", value=b"1")),
            rpc_pb2.RequestOp(
                request_put=rpc_pb2.PutRequest(key=b"b", value=b"", ignore_value=True)
            ),
        ]
    )
    with pytest.raises(Rejected):
        d.apply(txn_entry(txn))
    assert d.get(b"a") is None


def test_validate_txn_limits_and_duplicates() -> None:
    op = rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"a", value=b"1"))
    with pytest.raises(Rejected, match="duplicate key"):
        validate_txn(rpc_pb2.TxnRequest(success=[op, op]), 128)
    many = [
        rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"k%d" % i, value=b""))
        for i in range(129)
    ]
    with pytest.raises(Rejected, match="max_txn_ops=128"):
        validate_txn(rpc_pb2.TxnRequest(success=many), 128)


def test_effects_are_whole_records_so_replay_rebuilds_the_image() -> None:
    from nameserver.state.image import MetadataDelta, MetadataImage

    d = Driver()
    d.apply(put_entry(b"a", b"1"))
    d.apply(put_entry(b"b", b"1"))
    d.apply(put_entry(b"a", b"2"))
    d.apply(del_entry(b"b"))
    delta = MetadataDelta(MetadataImage.empty(REGISTRY))
    for _, eff in d.effects:
        delta.replay(eff.type, eff.key, eff.value, eff.delete)  # type: ignore[attr-defined]
    rebuilt = delta.build()
    assert list(rebuilt.kv.range(b"\x00", b"\x00")) == list(d.sm.image.kv.range(b"\x00", b"\x00"))


def test_unknown_entry_type_is_an_error() -> None:
    d = Driver()
    with pytest.raises(Rejected, match="unknown entry type"):
        d.apply(Entry(type="bogus"))
