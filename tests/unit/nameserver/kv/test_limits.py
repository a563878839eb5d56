"""nameserver.kv.semantics's checks before proposing (enums, txn nesting and op counts) and the
response budget (max_response_bytes); nameserver.state.image_hash's determinism."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from grpc import StatusCode

from nameserver.config import MAX_RESPONSE_BYTES, ServerConfig
from nameserver.errors import Rejected
from nameserver.kinds import REGISTRY
from nameserver.kv.apply import read_only_txn
from nameserver.kv.records import KeyValue, KvImage
from nameserver.kv.semantics import (
    KV_OVERHEAD_BYTES,
    MAX_TXN_DEPTH,
    ResponseBudget,
    ResponseTooLarge,
    do_range,
    estimate_txn_reads,
    validate_range,
    validate_txn,
)
from nameserver.server import GRPC_MAX_MESSAGE_BYTES
from nameserver.state import image_hash
from nameserver.state.image import MetadataImage
from nameserver.state.machine import MetadataStateMachine
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2 as pb
from raftlog import ConfigError, Entry
from raftlog.entry import length_delimited

Compare = pb.Compare


def put_op(key: bytes, value: bytes = b"v") -> pb.RequestOp:
    return pb.RequestOp(request_put=pb.PutRequest(key=key, value=value))


def range_op(key: bytes, end: bytes = b"", **kw: object) -> pb.RequestOp:
    return pb.RequestOp(request_range=pb.RangeRequest(key=key, range_end=end, **kw))


def nested(depth: int) -> pb.TxnRequest:
    txn = pb.TxnRequest(success=[put_op(b"k")])
    for _ in range(depth - 1):
        txn = pb.TxnRequest(success=[pb.RequestOp(request_txn=txn)])
    return txn


def image_of(n: int, value_bytes: int) -> KvImage:
    items = [
        (b"k%04d" % i, KeyValue(b"k%04d" % i, b"v" * value_bytes, i + 1, i + 1, 1, 0))
        for i in range(n)
    ]
    return KvImage.from_sorted_items(items)


class CountingView:
    """A view that counts the keys handed out (to show a budget stops a range early)."""

    def __init__(self, image: KvImage) -> None:
        self.image = image
        self.handed = 0

    def get(self, key: bytes) -> KeyValue | None:
        return self.image.get(key)

    def range(self, key: bytes, range_end: bytes | None) -> Iterator[KeyValue]:
        for kv in self.image.range(key, range_end):
            self.handed += 1
            yield kv


# ------------------------------------------------------------------ enums
@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.RangeRequest(key=b"a", sort_target=99), "range.sort_target: 99"),
        (pb.RangeRequest(key=b"a", sort_order=3), "range.sort_order: 3"),
        (pb.RangeRequest(key=b""), "key is not provided"),
    ],
)
def test_validate_range_names_the_field(request_: pb.RangeRequest, field: str) -> None:
    with pytest.raises(Rejected, match=r"INVALID|etcdserver") as err:
        validate_range(request_)
    assert err.value.status == StatusCode.INVALID_ARGUMENT
    assert field in str(err.value)


def test_validate_range_accepts_every_known_option() -> None:
    for order in pb.RangeRequest.SortOrder.values():
        for target in pb.RangeRequest.SortTarget.values():
            validate_range(pb.RangeRequest(key=b"a", sort_order=order, sort_target=target))


def test_txn_enums_and_nested_ranges_are_checked() -> None:
    cases = [
        (pb.TxnRequest(compare=[Compare(key=b"a", target=7)]), "txn.compare[0].target: 7"),
        (pb.TxnRequest(compare=[Compare(key=b"a", result=8)]), "txn.compare[0].result: 8"),
        (pb.TxnRequest(failure=[range_op(b"a", sort_target=99)]), "txn range, txn.failure[0]"),
        (
            pb.TxnRequest(
                success=[pb.RequestOp(request_txn=pb.TxnRequest(success=[range_op(b"")]))]
            ),
            "txn.success[0].request_txn.success[0]",
        ),
    ]
    for txn, text in cases:
        with pytest.raises(Rejected) as err:
            validate_txn(txn, 128)
        assert err.value.status == StatusCode.INVALID_ARGUMENT and text in str(err.value), err.value


# ------------------------------------------------------------ txn shape
def test_nesting_is_limited_before_protobuf_or_recursion_are() -> None:
    validate_txn(nested(MAX_TXN_DEPTH), 128)
    with pytest.raises(Rejected, match=f"nested too deeply .*level {MAX_TXN_DEPTH + 1}"):
        validate_txn(nested(MAX_TXN_DEPTH + 1), 128)
    with pytest.raises(Rejected, match="nested too deeply"):
        validate_txn(nested(49), 128)


def test_nested_txns_share_etcds_op_budget() -> None:
    # etcd's checkTxnRequest: a nested txn may use what its parent's branch leaves
    inner = pb.TxnRequest(success=[put_op(b"i%d" % i) for i in range(64)])
    outer_ok = pb.TxnRequest(
        success=[put_op(b"o%d" % i) for i in range(63)] + [pb.RequestOp(request_txn=inner)]
    )
    validate_txn(outer_ok, 128)
    outer_bad = pb.TxnRequest(
        success=[put_op(b"o%d" % i) for i in range(64)] + [pb.RequestOp(request_txn=inner)]
    )
    with pytest.raises(Rejected, match=r"too many operations in txn request.*63 left to it"):
        validate_txn(outer_bad, 128)


def test_all_levels_together_may_hold_no_more_than_a_flat_txn() -> None:
    flat = pb.TxnRequest(
        compare=[Compare(key=b"c%d" % i) for i in range(128)],
        success=[put_op(b"s%d" % i) for i in range(128)],
        failure=[put_op(b"f%d" % i) for i in range(128)],
    )
    validate_txn(flat, 128)  # 384: etcd's largest flat txn
    # each nested txn is within etcd's budget (96 of the 126 its parent leaves), but the
    # two hold 576 compares and ops
    wide = pb.TxnRequest(
        success=[
            pb.RequestOp(
                request_txn=pb.TxnRequest(
                    compare=[Compare(key=b"x%d" % j) for j in range(96)],
                    success=[put_op(b"y%d/%d" % (i, j)) for j in range(96)],
                    failure=[put_op(b"z%d/%d" % (i, j)) for j in range(96)],
                )
            )
            for i in range(2)
        ]
    )
    with pytest.raises(Rejected, match="more than 384 compares and ops in all nesting levels"):
        validate_txn(wide, 128)


# ------------------------------------------------------------ response budget
def test_a_budget_stops_a_range_at_the_first_key_that_does_not_fit() -> None:
    view = CountingView(image_of(1000, 1000))
    per_key = 5 + 1000 + KV_OVERHEAD_BYTES
    with pytest.raises(ResponseTooLarge) as err:
        do_range(view, pb.RangeRequest(key=b"k", range_end=b"l"), ResponseBudget(10 * per_key))
    assert err.value.status == StatusCode.RESOURCE_EXHAUSTED
    assert f"max_response_bytes={10 * per_key}" in str(err.value)
    assert view.handed == 11  # not a key more was read, nor any KeyValue built past it
    resp = do_range(view, pb.RangeRequest(key=b"k", range_end=b"l"), ResponseBudget(1000 * per_key))
    assert len(resp.kvs) == resp.count == 1000


def test_keys_past_the_limit_are_counted_not_paid_for() -> None:
    view = image_of(1000, 1000)
    per_key = 5 + 1000 + KV_OVERHEAD_BYTES
    resp = do_range(
        view, pb.RangeRequest(key=b"k", range_end=b"l", limit=5), ResponseBudget(5 * per_key)
    )
    assert (len(resp.kvs), resp.count, resp.more) == (5, 1000, True)
    keys = do_range(
        view, pb.RangeRequest(key=b"k", range_end=b"l", keys_only=True), ResponseBudget(1000 * 61)
    )
    assert len(keys.kvs) == 1000 and not keys.kvs[0].value
    desc = do_range(
        view,
        pb.RangeRequest(key=b"k", range_end=b"l", limit=2, sort_order=pb.RangeRequest.DESCEND),
        ResponseBudget(2 * per_key),
    )
    assert [kv.key for kv in desc.kvs] == [b"k0999", b"k0998"] and desc.more


def test_ranges_of_a_txn_share_one_budget() -> None:
    view = image_of(100, 1000)
    per_key = 5 + 1000 + KV_OVERHEAD_BYTES
    txn = pb.TxnRequest(success=[range_op(b"k", b"l") for _ in range(128)])
    with pytest.raises(ResponseTooLarge, match="txn response is too large"):
        read_only_txn(view, txn, 1, ResponseBudget(250 * per_key, "txn"))
    two = pb.TxnRequest(success=[range_op(b"k", b"l") for _ in range(2)])
    assert len(read_only_txn(view, two, 1, ResponseBudget(200 * per_key, "txn")).responses) == 2


def test_write_txn_reads_are_estimated_on_the_costlier_branch() -> None:
    view = image_of(100, 1000)
    per_key = 5 + 1000 + KV_OVERHEAD_BYTES
    txn = pb.TxnRequest(
        success=[put_op(b"w"), range_op(b"k", b"l", limit=10)],
        failure=[
            pb.RequestOp(
                request_delete_range=pb.DeleteRangeRequest(key=b"k", range_end=b"l", prev_kv=True)
            )
        ],
    )
    estimate_txn_reads(view, txn, ResponseBudget(100 * per_key))
    with pytest.raises(ResponseTooLarge):
        estimate_txn_reads(view, txn, ResponseBudget(100 * per_key - 1))
    sorted_limited = pb.TxnRequest(
        success=[put_op(b"w"), range_op(b"k", b"l", limit=3, sort_target=pb.RangeRequest.MOD)]
    )
    estimate_txn_reads(view, sorted_limited, ResponseBudget(3 * per_key))
    inner = pb.TxnRequest(success=[range_op(b"k", b"l")])
    deep = pb.TxnRequest(success=[put_op(b"w"), pb.RequestOp(request_txn=inner)])
    with pytest.raises(ResponseTooLarge):
        estimate_txn_reads(view, deep, ResponseBudget(50 * per_key))


def test_apply_builds_ranges_without_a_budget() -> None:
    # the state machine must not depend on a node's max_response_bytes
    sm = MetadataStateMachine.empty(REGISTRY)
    for i in range(3):
        op = records_pb2.KvOperation(put=pb.PutRequest(key=b"a%d" % i, value=b"x" * 100))
        sm.apply(i + 1, 1, [Entry("kv", op.put.key, op.SerializeToString())])
        sm.publish()
    txn = pb.TxnRequest(success=[put_op(b"b"), range_op(b"a", b"b")])
    value = length_delimited(records_pb2.TxnOperation.TXN_FIELD_NUMBER, txn.SerializeToString())
    _, resp = sm.apply(4, 1, [Entry("txn", value=value)])
    assert len(resp.responses[1].response_range.kvs) == 3


# ------------------------------------------------------------ config
def test_max_response_bytes_fits_grpcs_send_limit() -> None:
    assert MAX_RESPONSE_BYTES == GRPC_MAX_MESSAGE_BYTES - 64 * 1024
    base = {"node_id": "n0", "data_dir": "/tmp/x", "cluster_password": "p" * 32}
    for bad in (0, -1, MAX_RESPONSE_BYTES + 1):
        with pytest.raises(ConfigError, match="max_response_bytes"):
            ServerConfig(**base, max_response_bytes=bad).validate()  # type: ignore[arg-type]


def test_max_response_bytes_flag() -> None:
    from nameserver import cli
    from nameserver.cli import serve

    base = ["serve", "--id", "n0", "--data-dir", "/d"]
    assert serve.build_config(cli.build_parser().parse_args(base)).max_response_bytes == (
        MAX_RESPONSE_BYTES
    )
    args = cli.build_parser().parse_args([*base, "--max-response-bytes", "1048576"])
    assert serve.build_config(args).max_response_bytes == 1024 * 1024


# ------------------------------------------------------------ hashes
def _sm_with(puts: list[tuple[bytes, bytes]]) -> MetadataStateMachine:
    sm = MetadataStateMachine.empty(REGISTRY)
    for i, (key, value) in enumerate(puts):
        op = records_pb2.KvOperation(put=pb.PutRequest(key=key, value=value))
        sm.apply(i + 1, 1, [Entry("kv", key, op.SerializeToString())])
    sm.publish()
    return sm


def test_hashes_depend_on_content_only() -> None:
    a = _sm_with([(b"x", b"1"), (b"y", b"2")]).image
    b = _sm_with([(b"x", b"1"), (b"y", b"2")]).image
    assert image_hash.kv_hash(a) == image_hash.kv_hash(b)
    assert image_hash.image_hash(a) == image_hash.image_hash(b)
    other_order = _sm_with([(b"y", b"2"), (b"x", b"1")]).image  # other revisions
    assert image_hash.kv_hash(other_order) != image_hash.kv_hash(a)
    changed = _sm_with([(b"x", b"1"), (b"y", b"3")]).image
    assert image_hash.kv_hash(changed) != image_hash.kv_hash(a)
    # framing: moving a byte from key to value changes the hash
    assert image_hash.records_hash([("kv", b"ab", b"c")]) != image_hash.records_hash(
        [("kv", b"a", b"bc")]
    )
    assert image_hash.kv_hash(MetadataImage.empty(REGISTRY)) == 0
