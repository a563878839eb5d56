"""Txns that write and read at a past revision, as etcd 3.4's etcdserver/apply.go ``Txn``:
compares (nested ones too) see the state before any write, the taken ops are checked first
(a compacted or future range revision fails the whole txn, decided by the log alone), ranges
at a revision are read by the answering node from its history (kept by a pin)."""

from __future__ import annotations

from typing import Any

import pytest

from nameserver.errors import InvalidArgument
from nameserver.kinds import REGISTRY
from nameserver.kv.apply import fill_past_ranges, read_only_txn, taken_revisions
from nameserver.kv.history import KvHistory
from nameserver.kv.mvcc import ERR_COMPACTED, ERR_FUTURE_REV, Compacted, FutureRevision
from nameserver.state.machine import CapturedImage, MetadataStateMachine
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2 as pb
from raftlog import Change, Entry
from tests.property.test_kv_history_property import compact, put

EQUAL = pb.Compare.EQUAL


def rng(key: bytes, revision: int = 0, **kw: Any) -> pb.RequestOp:
    return pb.RequestOp(request_range=pb.RangeRequest(key=key, revision=revision, **kw))


def put_op(key: bytes, value: bytes, **kw: Any) -> pb.RequestOp:
    return pb.RequestOp(request_put=pb.PutRequest(key=key, value=value, **kw))


def value_is(key: bytes, value: bytes) -> pb.Compare:
    return pb.Compare(key=key, target=pb.Compare.VALUE, result=EQUAL, value=value)


class Node:
    """A state machine with its history, fed as the apply thread feeds it."""

    def __init__(self) -> None:
        self.machine = MetadataStateMachine.empty(REGISTRY)
        self.history = KvHistory(self.machine.image, lambda: self.machine.image)
        self.offset = 0

    def step(self, entry: Entry) -> Any:
        self.offset += 1
        before = CapturedImage(self.machine.image)
        effects, result = self.machine.apply(self.offset, 1, [entry])
        self.machine.publish()
        self.history.on_applied(before, self.offset, [Change(self.offset, 1, 0, effects)])
        return result

    def txn(self, req: pb.TxnRequest) -> pb.TxnResponse:
        entry = Entry("txn", value=records_pb2.TxnOperation(txn=req).SerializeToString())
        resp = self.step(entry)
        fill_past_ranges(req, resp, self.history.view)
        return resp  # type: ignore[no-any-return]


def values(resp: pb.RangeResponse) -> list[tuple[bytes, bytes, int]]:
    return [(kv.key, kv.value, kv.mod_revision) for kv in resp.kvs]


@pytest.fixture
def node() -> Node:
    n = Node()
    n.step(put(b"a", b"1"))  # 1
    n.step(put(b"a", b"2"))  # 2
    n.step(put(b"b", b"1"))  # 3
    return n


def test_a_write_txn_reads_a_past_revision_not_its_own_writes(node: Node) -> None:
    req = pb.TxnRequest(
        success=[put_op(b"a", b"3"), rng(b"a", 1), rng(b"a"), rng(b"a", 3)],
    )
    resp = node.txn(req)
    assert values(resp.responses[1].response_range) == [(b"a", b"1", 1)]
    assert values(resp.responses[2].response_range) == [(b"a", b"3", 4)]  # its own put
    assert values(resp.responses[3].response_range) == [(b"a", b"2", 2)]  # before the txn
    assert node.machine.image.kv.get(b"a").value == b"3"  # type: ignore[union-attr]


def test_inner_headers_say_the_revision_before_the_first_change_then_the_txns(
    node: Node,
) -> None:
    inner = pb.TxnRequest(success=[rng(b"b")])
    req = pb.TxnRequest(
        success=[
            rng(b"a", 2),
            pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=b"zz")),  # nothing
            put_op(b"c", b"x"),
            rng(b"a", 2),
            pb.RequestOp(request_txn=inner),
        ]
    )
    resp = node.txn(req)
    revs = [
        resp.responses[0].response_range.header.revision,
        resp.responses[1].response_delete_range.header.revision,
        resp.responses[2].response_put.header.revision,
        resp.responses[3].response_range.header.revision,
    ]
    assert revs == [3, 3, 4, 4]
    nested_header = resp.responses[4].response_txn.header
    assert resp.responses[4].response_txn.HasField("header") and not nested_header.revision
    assert resp.responses[4].response_txn.responses[0].response_range.header.revision == 4


def test_nested_compares_see_the_state_before_the_txns_writes(node: Node) -> None:
    nested = pb.TxnRequest(
        compare=[value_is(b"new", b"x")], success=[rng(b"a")], failure=[rng(b"b")]
    )
    req = pb.TxnRequest(success=[put_op(b"new", b"x"), pb.RequestOp(request_txn=nested)])
    resp = node.txn(req)
    assert not resp.responses[1].response_txn.succeeded  # etcd: b"new" did not exist yet


@pytest.mark.parametrize(
    ("revision", "error", "text"),
    [(4, FutureRevision, ERR_FUTURE_REV), (99, FutureRevision, ERR_FUTURE_REV)],
)
def test_a_future_range_revision_fails_the_whole_txn_before_any_write(
    node: Node, revision: int, error: type[Exception], text: str
) -> None:
    """The txn's own revision (4) is a future one: etcd checks against the revision before."""
    req = pb.TxnRequest(success=[put_op(b"a", b"9"), rng(b"a", revision)])
    with pytest.raises(error, match=text):
        node.txn(req)
    assert node.machine.image.kv.get(b"a").value == b"2"  # type: ignore[union-attr]


def test_a_compacted_range_revision_fails_the_whole_txn_but_the_compaction_revision_reads(
    node: Node,
) -> None:
    node.step(compact(2))  # 4
    with pytest.raises(Compacted, match=ERR_COMPACTED):
        node.txn(pb.TxnRequest(success=[put_op(b"b", b"9"), rng(b"a", 1)]))
    assert node.machine.image.kv.get(b"b").value == b"1"  # type: ignore[union-attr]
    resp = node.txn(pb.TxnRequest(success=[put_op(b"b", b"9"), rng(b"a", 2)]))  # etcd: < only
    assert values(resp.responses[1].response_range) == [(b"a", b"2", 2)]


def test_a_bad_revision_in_the_branch_not_taken_is_not_looked_at(node: Node) -> None:
    node.step(compact(2))
    req = pb.TxnRequest(
        compare=[value_is(b"a", b"2")],
        success=[put_op(b"c", b"1")],
        failure=[rng(b"a", 1), rng(b"a", 999), put_op(b"d", b"1")],
    )
    assert node.txn(req).succeeded
    assert taken_revisions(node.machine.image.kv, req) == set()
    flipped = pb.TxnRequest(compare=[value_is(b"a", b"no")], failure=[rng(b"a", 999)])
    assert taken_revisions(node.machine.image.kv, flipped) == {999}


def test_put_checks_come_before_range_checks_as_etcds_check_requests(node: Node) -> None:
    req = pb.TxnRequest(success=[rng(b"a", 99), put_op(b"zz", b"", ignore_value=True)])
    with pytest.raises(InvalidArgument, match="etcdserver: key not found"):
        node.txn(req)


def test_the_result_is_the_same_on_every_node_whatever_its_history() -> None:
    """Apply leaves ranges at a revision empty: a node whose history starts later (a
    follower that installed a snapshot) applies the same entry to the same result."""
    full, late = Node(), Node()
    for n in (full, late):
        n.step(put(b"a", b"1"))
        n.step(put(b"a", b"2"))
    late.history.reset(late.machine.image)  # its floor is now 2
    req = pb.TxnRequest(success=[rng(b"a", 1), put_op(b"b", b"x")])
    entry = Entry("txn", value=records_pb2.TxnOperation(txn=req).SerializeToString())
    assert full.step(entry) == late.step(entry)
    assert list(full.machine.image.kv.data.items()) == list(late.machine.image.kv.data.items())


def test_a_pin_holds_the_history_through_a_compaction_and_refuses_below_the_floor(
    node: Node,
) -> None:
    pinned = node.history.pin({1, 0, 99})
    assert pinned == [1, 99]
    node.step(put(b"a", b"3"))
    node.step(compact(3))
    assert node.history.floor == 3
    assert [kv.value for kv in node.history.view(1).range(b"a", b"b")] == [b"1"]  # kept
    node.history.unpin(pinned)
    node.step(put(b"a", b"4"))  # the next group prunes what the pin held
    assert node.history.lookup(b"a", 1) is None
    node.history.pruned_to = 4  # this node's own floor (retention) above the compaction
    with pytest.raises(Compacted):
        node.history.pin([3])
    assert node.history.pin([1]) == []  # below the compaction revision: apply decides


def test_a_read_only_txn_reads_each_range_at_its_revision(node: Node) -> None:
    image = node.machine.image
    req = pb.TxnRequest(success=[rng(b"a", 1), rng(b"a")])
    resp = read_only_txn(image.kv, req, image.revision, None, node.history.view)
    assert values(resp.responses[0].response_range) == [(b"a", b"1", 1)]
    assert values(resp.responses[1].response_range) == [(b"a", b"2", 2)]
    assert resp.responses[0].response_range.header.revision == image.revision
