"""The apply path's shortcuts keep its semantics: quotas skipped only when no limit can apply,
one shared undo journal per request, a watch hub that is not woken when nobody watches, a
whole apply group appended to the segments at once, and the cheap entry decoder."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from grpc import StatusCode

from nameserver.errors import Rejected
from nameserver.kinds import REGISTRY
from nameserver.state.machine import MetadataStateMachine, image_from_records, image_records
from nameserver.watch.events import HubEvent
from nameserver.watch.hub import Watcher, WatchHub
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Change, Entry, SegmentConfig, SegmentLog, encode_batch
from raftlog.entry import decode_item, encode_item, encode_request, length_delimited, varint
from tests.unit.nameserver.offsets.test_offsets import Driver, grant, put, quota
from tests.unit.nameserver.watch.test_hub import FakeHistory


# ---------------------------------------------------------------------------- quotas
def test_a_quota_set_in_the_same_request_as_the_put_is_enforced() -> None:
    d = Driver()
    d.apply(put(b"a", b"1"), put(b"b", b"2"))  # no quota anywhere: not counted, all pass
    err = d.rejected(quota("kv", max_keys=2), put(b"c", b"3"))
    assert err.status == StatusCode.RESOURCE_EXHAUSTED
    assert "record type kv: 3 keys > limit 2" in str(err)
    image = d.sm.image
    assert image.kv.get(b"c") is None and image.quotas.get("kv") is None  # all-or-nothing


def test_quota_counting_resumes_exactly_after_a_quota_is_removed_and_set_again() -> None:
    d = Driver()
    d.apply(quota("kv", max_bytes=100))
    d.apply(quota("kv"))  # back to the default: the record is deleted, no limit left
    assert d.sm.image.quotas.get("kv") is None
    d.apply(put(b"k", b"x" * 200))  # uncounted, yet the image's byte total stays exact
    assert d.sm.image.kv.value_bytes == 201
    d.apply(quota("kv", max_bytes=250))
    assert "bytes > limit 250" in str(d.rejected(put(b"j", b"y" * 60)))
    d.apply(put(b"k", b"z" * 10))  # shrinking passes
    assert d.sm.image.kv.value_bytes == 11


# ------------------------------------------------------------------- undo journal
def test_a_rejected_request_rolls_back_every_type_it_touched() -> None:
    d = Driver()
    d.apply(put(b"keep", b"v"))
    before = d.sm.image
    d.offset += 1
    sm = d.sm
    with pytest.raises(Rejected):
        # a lease, a key attached to it, an overwrite, then a put on a missing lease
        sm.apply(
            d.offset, 1, [grant(7), put(b"k", b"v", lease=7), put(b"keep", b"w"), put(b"x", b"", 9)]
        )
    # the same delta goes on: the next request in the group applies on the rolled-back state
    sm.apply(d.offset + 1, 1, [put(b"other", b"o")])
    sm.publish()
    image = sm.image
    assert image.leases.get(7) is None and image.kv.keys_of_lease(7) == frozenset()
    assert image.kv.get(b"k") is None and image.kv.get(b"keep") == before.kv.get(b"keep")
    assert len(image.kv) == 2 and image.kv.value_bytes == len(b"keepv") + len(b"othero")
    assert sorted(image_records(image)) == sorted(
        image_records(image_from_records(image_records(image), 0, 0, REGISTRY))
    )


# ---------------------------------------------------------------------- watch hub
class _Sink:
    def __init__(self) -> None:
        self.events: list[HubEvent] = []

    def send(self, response: rpc_pb2.WatchResponse) -> None:
        pass

    def send_events(self, w: Watcher, events: list[HubEvent], header_revision: int) -> None:
        self.events.extend(events)


class _CountingLoop(asyncio.SelectorEventLoop):
    """Counts the callbacks other threads hand it (each one a wake-up of the loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.handed = 0

    def call_soon_threadsafe(self, callback: Any, *args: Any, context: Any = None) -> Any:
        self.handed += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


def test_hub_is_not_woken_without_watchers_and_a_later_watcher_starts_after_the_skipped() -> None:
    sm = MetadataStateMachine.empty(REGISTRY)
    loop = _CountingLoop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        hub = WatchHub(
            FakeHistory(),
            lambda: sm.image,
            0,
            lambda r: rpc_pb2.ResponseHeader(revision=r),
            1 << 20,
        )
        hub.attach(loop)
        effects, _ = sm.apply(1, 1, [put(b"a", b"1")])
        before = sm.capture()
        sm.publish()
        hub.on_applied(before, 1, [Change(1, 1, 1000, effects)])
        assert loop.handed == 0 and hub.delivered == 1

        sink = _Sink()
        w = Watcher(id=1, sink=sink, key=b"a", end=None)

        async def start() -> None:
            hub.start(w, 0)

        asyncio.run_coroutine_threadsafe(start(), loop).result(5)
        assert w.next_rev == 2 and w.backlog is None  # nothing owed before it: no replay

        before = sm.capture()
        effects, _ = sm.apply(2, 1, [put(b"a", b"2")])
        sm.publish()
        hub.on_applied(before, 2, [Change(2, 1, 1000, effects)])
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(5)  # drain the loop
        assert [(e.revision, e.type) for e in sink.events] == [(2, 0)]
        assert hub.delivered == 2
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


# ----------------------------------------------------------------------- segments
def test_append_many_writes_what_appends_one_by_one_write(tmp_path: Path) -> None:
    records = [(o, s, b"payload-%d-%d" % (o, s) * 20) for o in range(1, 40) for s in range(3)]
    config = SegmentConfig(segment_max_bytes=1024, index_every_bytes=128, fsync_policy="always")
    one = SegmentLog.open(tmp_path / "one", config)
    for r in records:
        one.append(*r)
    many = SegmentLog.open(tmp_path / "many", config)
    for i in range(0, len(records), 7):
        many.append_many(records[i : i + 7])
    assert many.flushed_offset == many.last_offset == 39  # "always": synced on return
    assert [(s.first_offset, s.size) for s in one.segments()] == [
        (s.first_offset, s.size) for s in many.segments()
    ]
    assert list(one.read_from(1)) == list(many.read_from(1))
    one.close()
    many.close()
    reopened = SegmentLog.open(tmp_path / "many", config)
    assert [(r.offset, r.sub, r.payload) for r in reopened.read_from(1)] == records
    reopened.close()


def test_append_many_refuses_a_record_out_of_order_after_writing_the_ones_before(
    tmp_path: Path,
) -> None:
    log = SegmentLog.open(tmp_path, SegmentConfig(fsync_policy="never"))
    with pytest.raises(ValueError, match=r"record \(2, 0\) does not follow the last record"):
        log.append_many([(1, 0, b"a"), (2, 0, b"b"), (2, 0, b"c")])
    assert log.last_offset_sub == (2, 0)
    log.append_many([])  # nothing to do
    log.close()


# -------------------------------------------------------------------------- decode
def test_decode_item_builds_entries_equal_to_the_dataclass_constructor() -> None:
    reqs = [
        [Entry("kv", b"k", b"v", timestamp_ms=5, client_id="c", seq=7)],
        [Entry("noop", seq=8, client_id="c"), Entry("lease", b"", b"\x01", timestamp_ms=9)],
    ]
    decoded = decode_item(encode_item([encode_batch(r) for r in reqs]), 10, 3)
    assert decoded == [[e.at(10 + i, 3) for e in r] for i, r in enumerate(reqs)]
    assert decoded[1][1].timestamp_ms == 9 and hash(decoded[0][0]) == hash(reqs[0][0].at(10, 3))


# ------------------------------------------------------------------ leader encoding
@pytest.mark.parametrize("value_size", [0, 1, 100, 200, 20_000, 3_000_000])
def test_framing_an_encoded_request_equals_encoding_the_wrapping_operation(
    value_size: int,
) -> None:
    put_req = rpc_pb2.PutRequest(key=b"k", value=b"v" * value_size, prev_kv=True, lease=7)
    delete_req = rpc_pb2.DeleteRangeRequest(key=b"a" * (value_size // 100 + 1), range_end=b"z")
    txn_req = rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(request_put=put_req)])
    assert length_delimited(
        records_pb2.KvOperation.PUT_FIELD_NUMBER, put_req.SerializeToString()
    ) == (records_pb2.KvOperation(put=put_req).SerializeToString())
    assert length_delimited(
        records_pb2.KvOperation.DELETE_RANGE_FIELD_NUMBER, delete_req.SerializeToString()
    ) == (records_pb2.KvOperation(delete_range=delete_req).SerializeToString())
    assert length_delimited(
        records_pb2.TxnOperation.TXN_FIELD_NUMBER, txn_req.SerializeToString()
    ) == (records_pb2.TxnOperation(txn=txn_req).SerializeToString())


def test_encode_request_stamps_every_entry_like_replace_then_encode_batch() -> None:
    entries = [Entry("kv", b"k", b"v", client_id="x", seq=1), Entry("noop"), Entry("lease")]
    stamped = [
        replace(e, client_id="c/1", seq=2**40, timestamp_ms=1_763_800_000_123) for e in entries
    ]
    assert encode_request(entries, "c/1", 2**40, 1_763_800_000_123) == encode_batch(stamped)
    with pytest.raises(ValueError, match="entries"):
        encode_request([], "c", 1, 1)


@pytest.mark.parametrize(
    "n", [1, 127, 128, 255, 300, 16_383, 16_384, 2_097_151, 2_097_152, 2**35, 2**64 - 1]
)
def test_varint_is_protobufs(n: int) -> None:
    # field 8 (seq, uint64) of records.Entry: tag 0x40, then the varint (0 is not encoded)
    assert records_pb2.Entry(seq=n).SerializeToString() == b"\x40" + varint(n)
