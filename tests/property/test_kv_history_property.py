"""Property tests: the kv history index (nameserver/kv/history.py) against a model.

Random puts, deletes, txns and compactions go through the real state machine (apply rules,
effects) in apply groups of one to three offsets, each group handed to the index as the
apply observer hands it. The model is the kv state after every offset, rebuilt from the
effects alone. At any revision from the floor up, every read the index serves (get, range,
prefix, from-key, each Range option through ``do_range``) equals the model's; below the
floor it is "compacted"; after a compaction at the current revision the index holds no
version at all (memory bounded by compaction, as etcd's keyIndex.compact).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nameserver.errors import Rejected
from nameserver.kinds import REGISTRY
from nameserver.kv import semantics as kvops
from nameserver.kv.history import KvHistory
from nameserver.kv.mvcc import Compacted
from nameserver.kv.records import KeyValue
from nameserver.state.machine import CapturedImage, MetadataStateMachine
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Change, Entry
from raftlog.entry import length_delimited

KEYS = [b"a", b"a/1", b"a/2", b"b", b"b/1", b"c"]
keys = st.sampled_from(KEYS)
values = st.binary(max_size=3)


def put(key: bytes, value: bytes) -> Entry:
    body = rpc_pb2.PutRequest(key=key, value=value).SerializeToString()
    return Entry("kv", key, length_delimited(records_pb2.KvOperation.PUT_FIELD_NUMBER, body))


def delete(key: bytes, end: bytes) -> Entry:
    body = rpc_pb2.DeleteRangeRequest(key=key, range_end=end).SerializeToString()
    field = records_pb2.KvOperation.DELETE_RANGE_FIELD_NUMBER
    return Entry("kv", key, length_delimited(field, body))


def txn(key: bytes, value: bytes, gone: bytes) -> Entry:
    req = rpc_pb2.TxnRequest(
        compare=[rpc_pb2.Compare(key=key, target=rpc_pb2.Compare.VERSION, version=0)],
        success=[
            rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=key, value=value)),
            rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=gone)),
        ],
        failure=[rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=key))],
    )
    return Entry("txn", value=records_pb2.TxnOperation(txn=req).SerializeToString())


def compact(revision: int) -> Entry:
    return Entry("compact", value=records_pb2.MvccCompaction(revision=revision).SerializeToString())


ops = st.one_of(
    st.tuples(st.just("put"), keys, values),
    st.tuples(st.just("del"), keys, st.sampled_from([b"", b"\x00", b"b", b"a0"])),
    st.tuples(st.just("txn"), keys, values, keys),
    st.tuples(st.just("compact"), st.floats(0, 1)),
)


def entry_of(op: tuple[Any, ...], current: int, compacted: int) -> Entry:
    if op[0] == "put":
        return put(op[1], op[2])
    if op[0] == "del":
        return delete(op[1], op[2])
    if op[0] == "txn":
        return txn(op[1], op[2], op[3])
    lo = max(compacted, 0)
    return compact(lo + int(op[1] * max(current - lo, 0)))  # may repeat one: rejected


def model_read(state: dict[bytes, KeyValue], key: bytes, end: bytes) -> list[KeyValue]:
    if not end:
        return [state[key]] if key in state else []
    return [state[k] for k in sorted(state) if k >= key and (end == b"\x00" or k < end)]


RANGES = [(b"a", b""), (b"a", b"b"), (b"a/", b"a0"), (b"b", b"\x00"), (b"\x00", b"\x00")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(ops, min_size=1, max_size=3), min_size=1, max_size=25),
    st.data(),
)
def test_reads_at_every_revision_equal_the_model(groups: list[list[Any]], data: Any) -> None:
    machine = MetadataStateMachine.empty(REGISTRY)
    history = KvHistory(machine.image, lambda: machine.image)
    states: dict[int, dict[bytes, KeyValue]] = {0: {}}
    state: dict[bytes, KeyValue] = {}
    offset = 0
    for group in groups:
        before = CapturedImage(machine.image)
        changes = []
        for op in group:
            offset += 1
            entry = entry_of(op, offset - 1, machine.image.mvcc.compacted)
            try:
                effects, _ = machine.apply(offset, 1, [entry])
            except Rejected:
                effects = []
            for eff in effects:
                if eff.type == "kv":
                    if eff.delete:
                        state.pop(eff.key, None)
                    else:
                        state[eff.key] = KeyValue.from_record(eff.value)
            states[offset] = dict(state)
            changes.append(Change(offset, 1, 0, effects))
        machine.publish()
        history.on_applied(before, offset, changes)

        current = machine.image.revision
        assert history.floor == max(0, machine.image.mvcc.compact_revision)
        assert history.versions() == sum(len(v) for v in history._versions.values())
        for rev in range(history.floor, current + 1):
            view = history.view(rev)
            for key, end in RANGES:
                want = model_read(states[rev], key, end)
                assert kvops.select(view, key, end) == want, (rev, key, end)
            req = rpc_pb2.RangeRequest(
                key=b"a",
                range_end=b"\x00",
                limit=data.draw(st.integers(0, 3)),
                sort_order=data.draw(st.sampled_from([0, 1, 2])),
                sort_target=data.draw(st.sampled_from([0, 1, 2, 3, 4])),
                keys_only=data.draw(st.booleans()),
                count_only=data.draw(st.booleans()),
                min_mod_revision=data.draw(st.integers(0, current)),
            )
            model_image = _image_of(states[rev])
            assert kvops.do_range(view, req) == kvops.do_range(model_image, req)
        if history.floor > 1:
            with pytest.raises(Compacted):
                history.check(history.floor - 1, current)


def test_compaction_at_the_current_revision_leaves_no_version() -> None:
    machine = MetadataStateMachine.empty(REGISTRY)
    history = KvHistory(machine.image, lambda: machine.image)
    entries = [put(b"a", b"1"), put(b"a", b"2"), put(b"b", b"1"), delete(b"b", b"")]
    entries += [put(b"c", b"1"), delete(b"c", b""), put(b"c", b"2")]
    for offset, entry in enumerate(entries, 1):
        before = CapturedImage(machine.image)
        effects, _ = machine.apply(offset, 1, [entry])
        machine.publish()
        history.on_applied(before, offset, [Change(offset, 1, 0, effects)])
    assert history.versions() > 0 and history.tombstoned(b"\x00", b"\x00") == [b"b", b"c"]
    n = len(entries) + 1
    before = CapturedImage(machine.image)
    effects, result = machine.apply(n, 1, [compact(len(entries))])
    machine.publish()
    history.on_applied(before, n, [Change(n, 1, 0, effects)])
    assert result == len(entries) and machine.image.mvcc.compact_revision == len(entries)
    assert history.versions() == 0 and history.tombstoned(b"\x00", b"\x00") == []
    assert history.floor == len(entries)
    assert [kv.value for kv in history.view(n).range(b"\x00", b"\x00")] == [b"2", b"2"]
    with pytest.raises(Compacted):
        machine.apply(n + 1, 1, [compact(len(entries))])


class _Image:
    def __init__(self, state: dict[bytes, KeyValue]) -> None:
        self.state = state

    def get(self, key: bytes) -> KeyValue | None:
        return self.state.get(key)

    def range(self, key: bytes, end: bytes | None) -> list[KeyValue]:
        return model_read(self.state, key, end or b"")


def _image_of(state: dict[bytes, KeyValue]) -> _Image:
    return _Image(state)
