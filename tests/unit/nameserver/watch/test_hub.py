"""The watch hub (nameserver/watch/hub.py) with a fake event feed: a real state machine applies
kv operations, the hub gets what the apply thread would hand it, and a fake history stands in
for the change-log segments."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from nameserver.kinds import REGISTRY
from nameserver.kv.records import KeyValue
from nameserver.state.image import MetadataImage
from nameserver.state.machine import MetadataStateMachine
from nameserver.watch.events import (
    ERR_COMPACTED,
    ERR_DUPLICATE_ID,
    ERR_EMPTY_RANGE,
    FLOOR_FILE,
    Compacted,
    HubEvent,
    normalize_range,
)
from nameserver.watch.history import SegmentHistory
from nameserver.watch.hub import Watcher, WatchHub
from nameserver.watch.service import WatchStream
from protos import records_pb2
from protos.etcdserverpb import kv_pb2, rpc_pb2
from raftlog import Change, Effect, Entry, SegmentConfig, SegmentLog
from snapshots import FileSnapshotStore, SnapshotMeta

PUT, DELETE = kv_pb2.Event.PUT, kv_pb2.Event.DELETE


class FakeHistory:
    def __init__(self) -> None:
        self.records: list[tuple[int, Effect]] = []
        self.floor_value = 1
        self.gate: threading.Event | None = None  # set: changes() waits for it

    def floor(self, delivered: int) -> int:
        return self.floor_value

    def changes(self, start: int, upto: int) -> Iterator[tuple[int, Effect]]:
        if self.gate is not None:
            self.gate.wait(10)
        if start < self.floor_value:
            raise Compacted(self.floor_value)
        return iter([(o, e) for o, e in self.records if start <= o <= upto])

    def base(
        self, before: int, type_: str, key: bytes, end: bytes | None
    ) -> tuple[int, dict[bytes, KeyValue]]:
        return 0, {}


class Feed:
    """Applies requests like the apply thread, feeding the hub as the observer would."""

    def __init__(self, hub_history: FakeHistory) -> None:
        self.sm = MetadataStateMachine.empty(REGISTRY)
        self.history = hub_history
        self.offset = 0

    def group(self, hub: WatchHub, *ops: tuple[str, bytes, bytes]) -> None:
        """One apply group: each op ("put"/"del", key, value) at its own offset."""
        before = self.sm.capture()
        changes = []
        for kind, key, value in ops:
            self.offset += 1
            if kind == "put":
                op = records_pb2.KvOperation(put=rpc_pb2.PutRequest(key=key, value=value))
            else:
                op = records_pb2.KvOperation(
                    delete_range=rpc_pb2.DeleteRangeRequest(key=key, range_end=value)
                )
            entry = Entry(type="kv", key=key, value=op.SerializeToString(), timestamp_ms=1)
            effects, _ = self.sm.apply(self.offset, 1, [entry])
            self.history.records.extend((self.offset, e) for e in effects)
            changes.append(Change(self.offset, 1, 1, effects))
        self.sm.publish()
        hub._deliver(before, self.offset, changes)


class Sink:
    def __init__(self, hub: WatchHub) -> None:
        self.hub = hub
        self.responses: list[rpc_pb2.WatchResponse] = []

    def send(self, response: rpc_pb2.WatchResponse) -> None:
        self.responses.append(response)

    def send_events(self, w: Watcher, events: list[HubEvent], header_revision: int) -> None:
        self.responses.extend(
            rpc_pb2.WatchResponse.FromString(r)
            for r in self.hub.responses(w, events, header_revision)
        )


def make_hub(history: FakeHistory, feed: Feed, max_bytes: int = 1 << 20) -> WatchHub:
    return WatchHub(
        history,
        lambda: feed.sm.image,
        feed.offset,
        lambda rev: rpc_pb2.ResponseHeader(revision=rev),
        max_bytes,
    )


def events(
    stream: WatchStream | Sink, watch_id: int | None = None
) -> list[tuple[int, bytes, bytes, int]]:
    responses = stream.responses if isinstance(stream, Sink) else drain(stream)
    return [
        (ev.type, ev.kv.key, ev.kv.value, ev.kv.mod_revision)
        for r in responses
        if watch_id is None or r.watch_id == watch_id
        for ev in r.events
    ]


def drain(stream: WatchStream) -> list[rpc_pb2.WatchResponse]:
    out = []
    while not stream.out.empty():
        r = stream.out.get_nowait()
        assert r is not None
        out.extend(
            x if isinstance(x, rpc_pb2.WatchResponse) else rpc_pb2.WatchResponse.FromString(x)
            for x in stream.expand(r)
        )
    return out


async def replayed(s: WatchStream, timeout: float = 10.0) -> None:
    """Wait until no watcher of ``s`` is still replaying history (replays run in a thread)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while any(w.backlog is not None or w.replay is not None for w in s.watchers.values()):
        assert loop.time() < deadline, "a replay did not finish"
        await asyncio.sleep(0.01)


def create(stream: WatchStream, key: bytes, range_end: bytes = b"", **kw: Any) -> None:
    stream.handle(
        rpc_pb2.WatchRequest(
            create_request=rpc_pb2.WatchCreateRequest(key=key, range_end=range_end, **kw)
        )
    )


Setup = tuple[FakeHistory, Feed, WatchHub]


@pytest.fixture
def setup() -> Setup:
    history = FakeHistory()
    feed = Feed(history)
    return history, feed, make_hub(history, feed)


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def test_normalize_range_follows_etcd() -> None:
    assert normalize_range(b"a", b"") == (b"a", None)
    assert normalize_range(b"a", b"\x00") == (b"a", b"\x00")
    assert normalize_range(b"a", b"b") == (b"a", b"b")
    for end in (b"a", b"0"):
        with pytest.raises(ValueError, match=ERR_EMPTY_RANGE):
            normalize_range(b"a", end)
    with pytest.raises(ValueError, match="key is not provided"):
        normalize_range(b"", b"")


def test_matching_exact_prefix_and_from_key_one_response_per_group(setup: Setup) -> None:
    _history, feed, hub = setup

    async def main() -> None:
        s = WatchStream(hub, 3600)
        create(s, b"k")  # id 0: exactly k
        create(s, b"p/", b"p0")  # id 1: prefix p/
        create(s, b"p/m", b"\x00")  # id 2: every key >= p/m
        create(s, b"p/", b"p0")  # id 3: same range as 1 (one group)
        created = drain(s)
        assert [(r.watch_id, r.created) for r in created] == [(i, True) for i in range(4)]
        feed.group(hub, ("put", b"k", b"1"), ("put", b"p/a", b"2"), ("put", b"p/z", b"3"))
        responses = drain(s)  # the stream writes between the two groups
        feed.group(hub, ("put", b"kk", b"4"), ("put", b"q", b"5"), ("del", b"k", b""))
        responses += drain(s)
        by_id: dict[int, list[rpc_pb2.WatchResponse]] = {}
        for r in responses:
            by_id.setdefault(r.watch_id, []).append(r)
        assert [len(r.events) for r in by_id[0]] == [1, 1]  # batched per apply group
        assert [(e.type, e.kv.key) for r in by_id[0] for e in r.events] == [
            (PUT, b"k"),
            (DELETE, b"k"),
        ]
        assert [e.kv.key for r in by_id[1] for e in r.events] == [b"p/a", b"p/z"]
        assert [e.kv.key for r in by_id[3] for e in r.events] == [b"p/a", b"p/z"]
        assert [e.kv.key for r in by_id[2] for e in r.events] == [b"p/z", b"q"]
        delete = by_id[0][1].events[0]
        assert delete.kv.mod_revision == 6 and delete.kv.value == b"" and delete.kv.version == 0
        assert by_id[0][1].header.revision == 6
        assert len(hub._index["kv"]) == 3  # four watchers, three distinct ranges

    run(main)


def test_events_queued_but_not_yet_written_are_merged(setup: Setup) -> None:
    """A stream that falls behind sends one response per watcher with everything that
    accumulated (header revision: the newest), not one per apply group; a non-event response
    for the watcher ends the merging so that order is kept."""
    _history, feed, hub = setup

    async def main() -> None:
        s = WatchStream(hub, 3600)
        create(s, b"p/", b"p0")
        create(s, b"k")
        drain(s)
        for i in range(5):
            feed.group(hub, ("put", b"p/%d" % i, b"v"))
        feed.group(hub, ("put", b"k", b"v"))
        assert s.out.qsize() == 2  # one pending batch per watcher
        rs = drain(s)
        assert [(r.watch_id, len(r.events), r.header.revision) for r in rs] == [
            (0, 5, 5),
            (1, 1, 6),
        ]
        feed.group(hub, ("put", b"p/a", b"v"))
        s.handle(rpc_pb2.WatchRequest(cancel_request=rpc_pb2.WatchCancelRequest(watch_id=0)))
        feed.group(hub, ("put", b"p/b", b"v"))  # canceled: not delivered
        rs = drain(s)
        assert [(r.watch_id, len(r.events), r.canceled) for r in rs] == [
            (0, 1, False),
            (0, 0, True),
        ]

    run(main)


def test_filters_and_prev_kv_within_and_across_groups(setup: Setup) -> None:
    _history, feed, hub = setup
    feed.group(hub, ("put", b"k", b"v1"))

    async def main() -> None:
        s = WatchStream(hub, 3600)
        create(s, b"k", prev_kv=True)  # 0
        create(s, b"k", filters=[rpc_pb2.WatchCreateRequest.NOPUT])  # 1
        create(s, b"k", filters=[rpc_pb2.WatchCreateRequest.NODELETE])  # 2
        drain(s)
        feed.group(hub, ("put", b"k", b"v2"), ("put", b"k", b"v3"), ("del", b"k", b""))
        responses = drain(s)
        prevs = [
            (e.type, e.kv.value, e.prev_kv.value)
            for r in responses
            if r.watch_id == 0
            for e in r.events
        ]
        assert prevs == [(PUT, b"v2", b"v1"), (PUT, b"v3", b"v2"), (DELETE, b"", b"v3")]
        assert [e.type for r in responses if r.watch_id == 1 for e in r.events] == [DELETE]
        assert [e.kv.value for r in responses if r.watch_id == 2 for e in r.events] == [
            b"v2",
            b"v3",
        ]
        assert all(
            not e.HasField("prev_kv") for r in responses if r.watch_id == 2 for e in r.events
        )

    run(main)


def test_replay_then_live_has_no_gap_and_no_duplicate(setup: Setup) -> None:
    history, feed, hub = setup
    for i in range(5):
        feed.group(hub, ("put", b"r/%d" % i, b"%d" % i))
    gate = history.gate = threading.Event()  # hold the replay until live groups arrived

    async def main() -> None:
        s = WatchStream(hub, 3600)
        create(s, b"r/", b"r0", start_revision=2)
        assert [r.created for r in drain(s)] == [True]
        feed.group(hub, ("put", b"r/5", b"5"), ("put", b"r/6", b"6"))  # live, during replay
        await asyncio.sleep(0)
        assert drain(s) == []  # held back: the replay goes first
        gate.set()
        for _ in range(200):
            await asyncio.sleep(0.01)
            if (
                not s.out.empty()
                and hub.watchers
                and all(w.backlog is None for w in s.watchers.values())
            ):
                break
        feed.group(hub, ("put", b"r/7", b"7"))
        revs = [ev[3] for ev in events(s)]
        assert revs == [2, 3, 4, 5, 6, 7, 8]

    run(main)


def test_compacted_start_gets_etcds_response(setup: Setup) -> None:
    history, feed, hub = setup
    for i in range(5):
        feed.group(hub, ("put", b"c", b"%d" % i))
    history.floor_value = 4

    async def main() -> None:
        s = WatchStream(hub, 3600)
        create(s, b"c", start_revision=2)
        created, compacted = drain(s)
        assert created.created and not created.canceled
        assert compacted.canceled and compacted.compact_revision == 4
        assert compacted.cancel_reason == ERR_COMPACTED
        assert hub.watchers == 0 and s.watchers == {}
        create(s, b"c", start_revision=4)  # at the floor: replayed
        await replayed(s)
        assert [ev[2] for ev in events(s)] == [b"3", b"4"]

    run(main)


def test_snapshot_if_compacted_sends_state_then_live(setup: Setup) -> None:
    history, feed, hub = setup
    feed.group(hub, ("put", b"s/a", b"1"), ("put", b"s/b", b"2"), ("put", b"t", b"x"))
    feed.group(hub, ("del", b"s/a", b""), ("put", b"s/c", b"3"))
    history.floor_value = 4
    hub.max_response_bytes = 100  # several snapshot fragments

    async def main() -> None:
        s = WatchStream(hub, 3600)
        create(s, b"s/", b"s0", start_revision=1, snapshot_if_compacted=True)
        responses = drain(s)[1:]
        assert all(r.snapshot_revision == 5 and not r.canceled for r in responses)
        assert [r.fragment for r in responses] == [True] * (len(responses) - 1) + [False]
        state = {e.kv.key: e.kv.value for r in responses for e in r.events}
        assert state == {b"s/b": b"2", b"s/c": b"3"}
        feed.group(hub, ("put", b"s/d", b"4"))
        assert events(s) == [(PUT, b"s/d", b"4", 6)]

    run(main)


def test_installed_snapshot_compacts_live_watchers(setup: Setup) -> None:
    _history, _feed, hub = setup

    async def main() -> None:
        s = WatchStream(hub, 3600)
        create(s, b"i")  # live from 1
        create(s, b"j", start_revision=100)  # waiting for a future revision: unaffected
        drain(s)
        hub._installed(50)
        (r,) = drain(s)
        assert r.watch_id == 0 and r.canceled and r.compact_revision == 51
        assert list(s.watchers) == [1]

    run(main)


def test_stream_ids_duplicates_cancel_and_progress(setup: Setup) -> None:
    _history, feed, hub = setup
    feed.group(hub, ("put", b"x", b"1"))

    async def main() -> None:
        s = WatchStream(hub, 3600)
        create(s, b"a", watch_id=1)
        create(s, b"a")  # auto: 0
        create(s, b"a")  # auto: 1 is taken, so 2
        create(s, b"a", watch_id=2)  # duplicate
        create(s, b"b", b"a")  # range end before key
        rs = drain(s)
        assert [(r.watch_id, r.created, r.canceled) for r in rs] == [
            (1, True, False),
            (0, True, False),
            (2, True, False),
            (-1, True, True),
            (-1, True, True),
        ]
        assert rs[3].cancel_reason == ERR_DUPLICATE_ID
        assert rs[4].cancel_reason == ERR_EMPTY_RANGE
        s.handle(rpc_pb2.WatchRequest(cancel_request=rpc_pb2.WatchCancelRequest(watch_id=7)))
        assert drain(s) == []  # unknown id: ignored, as etcd does
        s.handle(rpc_pb2.WatchRequest(cancel_request=rpc_pb2.WatchCancelRequest(watch_id=2)))
        (c,) = drain(s)
        assert c.watch_id == 2 and c.canceled and hub.watchers == 2
        s.handle(rpc_pb2.WatchRequest(progress_request=rpc_pb2.WatchProgressRequest()))
        (p,) = drain(s)
        assert p.watch_id == -1 and p.header.revision == 1 and not p.events
        s.close()
        assert hub.watchers == 0

    run(main)


def test_progress_notify_only_to_idle_watchers(setup: Setup) -> None:
    _history, feed, hub = setup

    async def main() -> None:
        s = WatchStream(hub, 3600)
        create(s, b"busy", progress_notify=True)
        create(s, b"idle", progress_notify=True)
        create(s, b"quiet")  # did not ask
        drain(s)
        feed.group(hub, ("put", b"busy", b"1"))
        s.notify_progress()  # one tick
        rs = drain(s)
        progress = [r.watch_id for r in rs if not r.events]
        assert progress == [1]
        assert [r.header.revision for r in rs if not r.events] == [1]

    run(main)


def test_large_batches_split_at_revisions_or_fragment(setup: Setup) -> None:
    _history, feed, hub = setup
    hub.max_response_bytes = 200

    async def main() -> None:
        s = WatchStream(hub, 3600)
        create(s, b"f/", b"f0", prev_kv=True)  # 0: no fragment
        create(s, b"f/", b"f0", prev_kv=True, fragment=True)  # 1
        drain(s)
        # one revision deleting 6 keys (prev_kv: 40-byte values), after 6 puts in one group
        feed.group(hub, *[("put", b"f/%d" % i, b"v" * 40) for i in range(6)])
        feed.group(hub, ("del", b"f/", b"f0"))
        rs = drain(s)
        plain = [r for r in rs if r.watch_id == 0]
        frag = [r for r in rs if r.watch_id == 1]
        # never a revision split without fragment, every response within the limit otherwise
        assert not any(r.fragment for r in plain)
        revs = [[e.kv.mod_revision for e in r.events] for r in plain]
        assert [e for r in revs for e in r] == [1, 2, 3, 4, 5, 6, 7, 7, 7, 7, 7, 7]
        assert [7] * 6 in revs  # the big revision went out whole
        last = [r for r in frag if any(e.kv.mod_revision == 7 for e in r.events)]
        assert len(last) > 1
        assert [r.fragment for r in last] == [True] * (len(last) - 1) + [False]
        assert all(r.ByteSize() <= 200 + 64 for r in frag)

    run(main)


# --------------------------------------------------------------------------- SegmentHistory
def _kv_effect(key: bytes, value: bytes, offset: int, version: int) -> Effect:
    return Effect(
        "kv", key, KeyValue(key, value, offset - version + 1, offset, version).to_record()
    )


def test_segment_history_floor_replay_and_snapshot_base(tmp_path: Path) -> None:
    segments = SegmentLog.open(
        tmp_path / "log", SegmentConfig(segment_max_bytes=200, fsync_policy="never")
    )
    store = FileSnapshotStore(tmp_path / "snap", keep=2)
    floor_path = str(tmp_path / FLOOR_FILE)
    history = SegmentHistory(segments, store, floor_path)
    try:
        for offset in range(1, 21):
            eff = _kv_effect(b"k", b"v%d" % offset, offset, offset)
            segments.append(offset, 0, eff.encode(1, 1, 1))
        assert history.floor(20) == 1  # never snapshotted: the whole history is there
        assert [o for o, _ in history.changes(18, 19)] == [18, 19]

        at10 = KeyValue(b"k", b"v10", 1, 10, 10)
        store.save(
            SnapshotMeta(cluster_id="c", last_offset=10, last_term=1),
            [("kv", b"k", at10.to_record()), ("kv", b"other", at10.to_record())],
        )
        assert history.base(12, "kv", b"k", None) == (10, {b"k": at10})
        assert history.base(10, "kv", b"k", None) == (0, {})  # no snapshot below 10
        removed = segments.delete_before(11)
        assert removed > 0
        floor = history.floor(20)
        assert 1 < floor <= 11 and floor == segments.first_offset
        with pytest.raises(Compacted) as info:
            list(history.changes(floor - 1, 20))
        assert info.value.floor == floor

        # a snapshot installed from the leader at 15: the floor moves above it, for good
        hub = WatchHub(
            history,
            MetadataImage.empty,
            20,
            lambda rev: rpc_pb2.ResponseHeader(revision=rev),
            1 << 20,
            floor_path,
        )
        hub.on_installed(15)
        assert history.floor(20) == 16
        assert SegmentHistory(segments, store, floor_path).floor(20) == 16
    finally:
        segments.close()


def test_replayed_prev_kv_comes_from_the_segments_and_the_snapshot_below(
    tmp_path: Path,
) -> None:
    segments = SegmentLog.open(
        tmp_path / "log", SegmentConfig(segment_max_bytes=200, fsync_policy="never")
    )
    store = FileSnapshotStore(tmp_path / "snap", keep=2)
    history = SegmentHistory(segments, store, str(tmp_path / FLOOR_FILE))
    try:
        j = KeyValue(b"j", b"old", 1, 1, 1)
        segments.append(1, 0, Effect("kv", b"j", j.to_record()).encode(1, 1, 1))
        for offset in range(2, 11):
            eff = _kv_effect(b"k", b"v%d" % offset, offset, offset - 1)
            segments.append(offset, 0, eff.encode(1, 1, 1))
        segments.append(11, 0, Effect("kv", b"j", delete=True).encode(1, 1, 1))
        store.save(
            SnapshotMeta(cluster_id="c", last_offset=5, last_term=1),
            [("kv", b"j", j.to_record()), ("kv", b"k", KeyValue(b"k", b"v5", 2, 5, 4).to_record())],
        )
        assert segments.delete_before(6) > 0  # j's put is gone from the segments
        feed = Feed(FakeHistory())
        hub = make_hub(history, feed)  # type: ignore[arg-type]
        hub.delivered = 11

        async def main() -> None:
            s = WatchStream(hub, 3600)
            create(s, b"k", start_revision=8, prev_kv=True)
            create(s, b"j", start_revision=11, prev_kv=True)
            for _ in range(200):
                await asyncio.sleep(0.01)
                if len(s.watchers) == 2 and all(w.backlog is None for w in s.watchers.values()):
                    break
            rs = drain(s)
            got = [(e.kv.value, e.prev_kv.value) for r in rs if r.watch_id == 0 for e in r.events]
            assert got == [(b"v8", b"v7"), (b"v9", b"v8"), (b"v10", b"v9")]
            (delete,) = [e for r in rs if r.watch_id == 1 for e in r.events]
            assert delete.type == DELETE and delete.prev_kv.value == b"old"  # from the snapshot

        run(main)
    finally:
        segments.close()


# ------------------------------------------------------------------ other record types
def apply_entries(feed: Feed, hub: WatchHub, *entries: Entry) -> None:
    """One apply group of arbitrary entries (one offset each), as the apply thread would."""
    before = feed.sm.capture()
    changes = []
    for entry in entries:
        feed.offset += 1
        effects, _ = feed.sm.apply(feed.offset, 1, [entry])
        feed.history.records.extend((feed.offset, e) for e in effects)
        changes.append(Change(feed.offset, 1, 1, effects))
    feed.sm.publish()
    hub._deliver(before, feed.offset, changes)


def register_entry(broker: str, address: str) -> Entry:
    op = records_pb2.ReplicaGroupOperation(
        register=records_pb2.ReplicaRegister(cluster_name="c", broker_name=broker, address=address)
    )
    return Entry(type="replica_group", key=broker.encode(), value=op.SerializeToString())


def quota_entry(max_keys: int) -> Entry:
    q = records_pb2.QuotaRecord(record_type="kv", max_keys=max_keys)
    return Entry(type="quota", key=b"kv", value=q.SerializeToString())


def kv_put(key: bytes) -> Entry:
    op = records_pb2.KvOperation(put=rpc_pb2.PutRequest(key=key, value=b"v"))
    return Entry(type="kv", key=key, value=op.SerializeToString())


def group_of(value: bytes) -> tuple[str, list[int]]:
    rec = records_pb2.ReplicaGroupRecord.FromString(value)
    return rec.broker_name, [r.broker_id for r in rec.replicas]


def test_any_record_type_is_watchable_live_and_replayed(setup: Setup) -> None:
    """record_type = 1001: events of that type only, key = record key, value = the record,
    mod_revision = the offset; replay from the history honours the type; DELETEs too."""
    _history, feed, hub = setup

    async def main() -> None:
        s = WatchStream(hub, 3600)
        create(s, b"b", b"c", record_type="replica_group")  # id 0: groups b...
        create(s, b"b1")  # id 1: the kv key b1
        create(s, b"kv", record_type="quota")  # id 2: the kv quota record
        drain(s)
        apply_entries(
            feed, hub, register_entry("b1", "h:1"), kv_put(b"b1"), register_entry("x", "h:9")
        )
        apply_entries(feed, hub, register_entry("b1", "h:2"), quota_entry(10), quota_entry(0))
        by_id: dict[int, list[kv_pb2.Event]] = {}
        for r in drain(s):
            by_id.setdefault(r.watch_id, []).extend(r.events)
        groups = [(e.type, e.kv.key, e.kv.mod_revision, group_of(e.kv.value)) for e in by_id[0]]
        assert groups == [
            (PUT, b"b1", 1, ("b1", [1])),
            (PUT, b"b1", 4, ("b1", [1, 2])),
        ]
        assert [(e.kv.key, e.kv.mod_revision) for e in by_id[1]] == [(b"b1", 2)]
        quota = [(e.type, e.kv.key, e.kv.mod_revision) for e in by_id[2]]
        assert quota == [(PUT, b"kv", 5), (DELETE, b"kv", 6)]
        assert records_pb2.QuotaRecord.FromString(by_id[2][0].kv.value).max_keys == 10
        assert by_id[2][1].kv.value == b""

        create(s, b"\x00", b"\x00", start_revision=2, record_type="replica_group")  # all
        await replayed(s)
        got = [(e.kv.key, e.kv.mod_revision) for r in drain(s) for e in r.events]
        assert got == [(b"x", 3), (b"b1", 4)]

    run(main)


def test_record_type_errors_and_snapshot_of_another_type(setup: Setup) -> None:
    history, feed, hub = setup
    apply_entries(feed, hub, register_entry("a", "h:1"), register_entry("b", "h:2"))
    apply_entries(feed, hub, kv_put(b"a"))
    history.floor_value = 3

    async def main() -> None:
        s = WatchStream(hub, 3600)
        create(s, b"a", record_type="nope")
        create(s, b"a", record_type="replica_group", prev_kv=True)
        unknown, prev = drain(s)
        assert unknown.canceled and "unknown record_type 'nope'" in unknown.cancel_reason
        assert "replica_group" in unknown.cancel_reason
        assert prev.canceled and "prev_kv is only supported for record_type kv" in (
            prev.cancel_reason
        )
        assert hub.watchers == 0
        create(
            s,
            b"\x00",
            b"\x00",
            start_revision=1,
            snapshot_if_compacted=True,
            record_type="replica_group",
        )
        responses = drain(s)[1:]
        assert all(r.snapshot_revision == 3 for r in responses)
        state = {e.kv.key: group_of(e.kv.value) for r in responses for e in r.events}
        assert state == {b"a": ("a", [1]), b"b": ("b", [1])}

    run(main)
