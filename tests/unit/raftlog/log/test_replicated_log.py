"""raftlog.ReplicatedLog over the in-memory engine: propose-and-wait, de-duplication,
read barriers, offsets and replay into the change-log segments."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from raftlog import (
    Applied,
    ApplyFailure,
    Effect,
    Entry,
    InMemoryEngine,
    ReplicatedLog,
    SegmentConfig,
    SegmentLog,
    decode_batch,
    encode_batch,
)


class DictMachine:
    """A tiny state machine: `set` entries put key=value; `boom` raises."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.pending: dict[bytes, bytes] = {}
        self._last = 0

    @property
    def last_offset(self) -> int:
        return self._last

    def apply(self, offset: int, term: int, entries: Sequence[Entry]) -> tuple[list[Effect], Any]:
        effects = []
        for e in entries:
            if e.type == "boom":
                raise ValueError("boom")
            if e.type == "set":
                self.pending[e.key] = e.value
                effects.append(Effect("kv", e.key, e.value))
        self._last = offset
        return effects, len(effects)

    def publish(self) -> None:
        self.data.update(self.pending)
        self.pending.clear()


def make_log(tmp_path: Path) -> tuple[ReplicatedLog, DictMachine, InMemoryEngine]:
    sm = DictMachine()
    engine = InMemoryEngine()
    segments = SegmentLog.open(tmp_path / "log", SegmentConfig(fsync_policy="never"))
    rlog = ReplicatedLog(engine, sm, segments, "n0")
    rlog.start()
    return rlog, sm, engine


def test_entry_batch_round_trip() -> None:
    entries = [Entry("kv", b"k", b"v", timestamp_ms=5, client_id="c", seq=7), Entry("noop")]
    decoded = decode_batch(encode_batch(entries), offset=9, term=2)
    assert decoded == [e.at(9, 2) for e in entries]
    with pytest.raises(ValueError, match="entries"):
        encode_batch([])


def test_effect_round_trip() -> None:
    for eff in (Effect("kv", b"k", b"v"), Effect("kv", b"k", delete=True)):
        assert Effect.decode(eff.encode(term=3, timestamp_ms=4)) == eff


def test_propose_waits_for_apply_and_writes_effects(tmp_path: Path) -> None:
    rlog, sm, _ = make_log(tmp_path)

    async def main() -> Applied:
        return await rlog.propose([Entry("set", b"a", b"1"), Entry("set", b"b", b"2")], 5)

    try:
        applied = asyncio.run(main())
        assert applied.offset == 1 and applied.result == 2 and not applied.duplicate
        assert sm.data == {b"a": b"1", b"b": b"2"}  # published before the proposer returned
        off = rlog.offsets()
        assert off.apply_offset <= off.commit_offset <= off.end_offset
        records = list(rlog.segments.read_from(0))
        assert [(r.offset, r.sub) for r in records] == [(1, 0), (1, 1)]
        assert Effect.decode(records[1].payload) == Effect("kv", b"b", b"2")
    finally:
        rlog.stop()


def test_retried_request_is_applied_once(tmp_path: Path) -> None:
    rlog, sm, _ = make_log(tmp_path)

    async def main() -> tuple[Applied, Applied]:
        first = await rlog.propose([Entry("set", b"a", b"1")], 5, client_id="c1", seq=1)
        again = await rlog.propose([Entry("set", b"a", b"2")], 5, client_id="c1", seq=1)
        return first, again

    try:
        first, again = asyncio.run(main())
        assert again.duplicate and again.offset == first.offset
        assert sm.data == {b"a": b"1"}
    finally:
        rlog.stop()


def test_a_rejected_entry_is_a_no_op_with_a_failure_result(tmp_path: Path) -> None:
    rlog, sm, _ = make_log(tmp_path)

    async def main() -> tuple[Applied, Applied]:
        bad = await rlog.propose([Entry("boom")], 5)
        good = await rlog.propose([Entry("set", b"a", b"1")], 5)
        return bad, good

    try:
        bad, good = asyncio.run(main())
        assert isinstance(bad.result, ApplyFailure) and "boom" in str(bad.result.error)
        assert good.offset == bad.offset + 1 and sm.data == {b"a": b"1"}
    finally:
        rlog.stop()


def test_concurrent_reads_share_read_barriers(tmp_path: Path) -> None:
    rlog, _, engine = make_log(tmp_path)

    async def main() -> list[int]:
        await rlog.propose([Entry("set", b"a", b"1")], 5)
        return list(await asyncio.gather(*(rlog.read_barrier(5) for _ in range(50))))

    try:
        indexes = asyncio.run(main())
        assert all(i >= 2 for i in indexes)
        # 50 concurrent reads needed at most two barrier entries, not 50
        assert engine.status().end_offset <= 3
    finally:
        rlog.stop()


def test_replay_skips_offsets_already_in_the_segments(tmp_path: Path) -> None:
    rlog, _, _ = make_log(tmp_path)

    async def main() -> None:
        for i in range(3):
            await rlog.propose([Entry("set", b"k%d" % i, b"v")], 5)

    asyncio.run(main())
    rlog.stop()
    # a second life: same segments, the engine replays offsets 1..3 again
    sm = DictMachine()
    segments = SegmentLog.open(tmp_path / "log", SegmentConfig(fsync_policy="never"))
    engine = InMemoryEngine()
    rlog2 = ReplicatedLog(engine, sm, segments, "n0")
    rlog2.start()

    async def replay() -> None:
        for i in range(3):
            await rlog2.propose([Entry("set", b"k%d" % i, b"v")], 5)
        await rlog2.propose([Entry("set", b"new", b"v")], 5)

    try:
        asyncio.run(replay())
        offsets = [r.offset for r in rlog2.segments.read_from(0)]
        assert offsets == [1, 2, 3, 4]
    finally:
        rlog2.stop()


async def until(cond: Any) -> None:
    async with asyncio.timeout(5):
        while not cond():
            await asyncio.sleep(0.005)


class HeldEngine(InMemoryEngine):
    """Holds every proposal until the test releases it (an item in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[tuple[bytes, Any]] = []

    def propose(self, data: bytes, callback: Any) -> None:
        self.held.append((data, callback))

    def release(self, count: int | None = None) -> int:
        """Let the first ``count`` held items (all by default) commit."""
        n = len(self.held) if count is None else count
        held, self.held = self.held[:n], self.held[n:]
        for data, callback in held:
            super().propose(data, callback)
        return len(held)


def held_log(tmp_path: Path, **options: Any) -> tuple[ReplicatedLog, HeldEngine]:
    engine = HeldEngine()
    segments = SegmentLog.open(tmp_path / "log", SegmentConfig(fsync_policy="never"))
    rlog = ReplicatedLog(engine, DictMachine(), segments, "n0", **options)
    rlog.start()
    return rlog, engine


Put = Callable[[bytes], "asyncio.Task[Applied]"]


def drive(rlog: ReplicatedLog, scenario: Callable[[Put], Awaitable[None]]) -> None:
    """Run ``scenario(put)`` on a fresh loop, then stop the log."""

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def put(key: bytes) -> asyncio.Task[Applied]:
            return loop.create_task(rlog.propose([Entry("set", key, b"v")], 5.0))

        await scenario(put)

    try:
        asyncio.run(main())
    finally:
        rlog.stop()


def test_group_commit_waits_a_window_only_under_load(tmp_path: Path) -> None:
    from raftlog.entry import item_count

    rlog, engine = held_log(tmp_path, batch_window_s=1.0, window_per_request_s=1.0)
    commit = rlog._group_commit  # its pending items, window, in-flight set

    async def scenario(put: Put) -> None:
        a = put(b"a")  # a lone writer goes at once
        await until(lambda: len(engine.held) == 1)
        b, c = put(b"b"), put(b"c")  # wait behind a's item
        await asyncio.sleep(0)
        assert len(engine.held) == 1
        engine.release()
        await a
        # under load: the next item gathers for the window instead of leaving at once
        d = put(b"d")
        await until(lambda: len(commit._pending) == 3)
        assert commit._window_timer is not None and engine.held == []  # gathering, not sent
        await until(lambda: len(engine.held) == 1)
        assert item_count(engine.held[0][0]) == 3  # b, c and d in one item
        engine.release()
        await asyncio.gather(b, c, d)
        # the load is gone: after the last item drained, a lone write goes at once
        await until(lambda: not commit._outstanding)
        e = put(b"e")
        await until(lambda: len(engine.held) == 1)
        assert item_count(engine.held[0][0]) == 1
        engine.release()
        await e

    drive(rlog, scenario)


def test_pipelined_items_leave_a_window_apart_up_to_max_in_flight(tmp_path: Path) -> None:
    from raftlog.entry import item_count

    rlog, engine = held_log(tmp_path, batch_window_s=0.05, max_in_flight=2)
    commit = rlog._group_commit  # its pending items, window, in-flight set

    async def scenario(put: Put) -> None:
        a = put(b"a")
        await until(lambda: len(engine.held) == 1)
        b, c = put(b"b"), put(b"c")  # a is out: these gather for one window, then go
        await until(lambda: len(engine.held) == 2)
        assert item_count(engine.held[1][0]) == 2
        d = put(b"d")  # two items out: d waits for an answer (then one more window)
        await until(lambda: len(commit._pending) == 1)
        assert len(engine.held) == 2 and commit._window_timer is None  # no slot, no window
        engine.release()
        await until(lambda: len(engine.held) == 1)
        assert item_count(engine.held[0][0]) == 1
        engine.release()
        await asyncio.gather(a, b, c, d)

    drive(rlog, scenario)


def test_a_busy_proposer_keeps_one_item_in_flight(tmp_path: Path) -> None:
    from raftlog.entry import item_count

    rlog, engine = held_log(tmp_path, batch_window_s=0.05, max_in_flight=2, busy_item_requests=2)
    commit = rlog._group_commit  # its pending items, window, in-flight set

    async def scenario(put: Put) -> None:
        a = put(b"a")
        await until(lambda: len(engine.held) == 1)
        b, c = put(b"b"), put(b"c")  # one item out, not busy: b and c pipeline behind a
        await until(lambda: len(engine.held) == 2)
        assert item_count(engine.held[1][0]) == 2  # a full item: the proposer is busy now
        engine.release(1)
        await a
        await until(lambda: len(commit._outstanding) == 1)
        d = put(b"d")  # one slot is free, but a busy proposer waits for the item out
        await until(lambda: len(commit._pending) == 1)
        assert commit._window_timer is None and len(engine.held) == 1
        engine.release()
        await asyncio.gather(b, c)
        await until(lambda: len(engine.held) == 1)  # d leaves after b+c committed
        assert item_count(engine.held[0][0]) == 1
        assert commit._in_flight_limit() == 2  # a one-request item: pipelining again
        engine.release()
        await d

    drive(rlog, scenario)


class ThreadNotingMachine(DictMachine):
    """DictMachine that notes which thread applied each key and can install a 'snapshot'
    (``load``), which blocks until the test opens ``gate``."""

    def __init__(self) -> None:
        super().__init__()
        self.applied_on: dict[bytes, int] = {}
        self.order: list[bytes] = []
        self.gate = threading.Event()
        self.loading = threading.Event()
        self.publishes = 0

    def publish(self) -> None:
        self.publishes += 1
        super().publish()

    def apply(self, offset: int, term: int, entries: Sequence[Entry]) -> tuple[list[Effect], Any]:
        for e in entries:
            self.applied_on[e.key] = threading.get_ident()
            self.order.append(e.key)
        return super().apply(offset, term, entries)

    def load(self, last_offset: int, last_term: int, records: Any) -> list[Effect]:
        self.loading.set()
        assert self.gate.wait(5)
        self.order.append(b"<snapshot>")
        self._last = last_offset
        return []

    def capture(self) -> Any:
        return None


class GatedSink:
    """The parts of a SnapshotSink that installing a snapshot from the leader uses."""

    def __init__(self, last_offset: int) -> None:
        self.last_offset = last_offset

    def adopt(self, path: str) -> str:
        return path

    def header(self, path: str) -> tuple[int, bytes]:
        return self.last_offset, b"{}"

    def read(self, path: str) -> tuple[int, int, bytes, list[Any]]:
        return self.last_offset, 1, b"{}", []


def test_apply_on_loop_applies_inline_and_queues_behind_an_install(tmp_path: Path) -> None:
    """With ``apply_on_loop``, commits reported on the log's loop are applied right there;
    while a snapshot install runs on the apply thread, later commits queue behind it (in
    order) and the loop applies inline again once that backlog is done."""
    sm = ThreadNotingMachine()
    engine = InMemoryEngine()
    segments = SegmentLog.open(tmp_path / "log", SegmentConfig(fsync_policy="never"))
    rlog = ReplicatedLog(engine, sm, segments, "n0", apply_on_loop=True)
    rlog.enable_snapshots(GatedSink(last_offset=10), 0)  # type: ignore[arg-type]

    async def main() -> None:
        rlog.start()  # on the loop: commits arriving on this thread are applied here
        here = threading.get_ident()
        await rlog.propose([Entry("set", b"a", b"1")], 5.0)
        assert sm.applied_on[b"a"] == here

        # a snapshot arrives from the leader (engine thread == this loop): the install
        # goes to the apply thread, and what commits meanwhile queues behind it
        rlog._snapshots.load("snap")  # type: ignore[union-attr]
        assert await asyncio.to_thread(sm.loading.wait, 5)
        b = asyncio.ensure_future(rlog.propose([Entry("set", b"b", b"2")], 5.0))
        await until(lambda: rlog._apply._backlog == 2)  # the install and b's item
        assert b"b" not in sm.applied_on and not b.done()
        sm.gate.set()
        applied_b = await b
        assert sm.applied_on[b"b"] != here  # the apply thread took it, after the install
        assert applied_b.offset == 11  # numbered after the snapshot's last offset
        await until(lambda: rlog._apply._backlog == 0)

        await rlog.propose([Entry("set", b"c", b"3")], 5.0)
        assert sm.applied_on[b"c"] == here  # backlog done: inline again
        assert sm.order == [b"a", b"<snapshot>", b"b", b"c"]
        assert rlog.apply_offset == 12

    try:
        asyncio.run(main())
    finally:
        rlog.stop()


def test_busier_proposers_gather_longer(tmp_path: Path) -> None:
    """The batch window grows with the most requests waiting at once: the floor for a
    few clients, up to ``batch_window_s`` for many."""
    from raftlog.log.group_commit import WINDOW_FLOOR_S, WINDOW_PER_REQUEST_S

    rlog, engine = held_log(tmp_path, batch_window_s=0.006)
    commit = rlog._group_commit  # its pending items, window, in-flight set

    async def scenario(put: Put) -> None:
        first = put(b"a")
        await until(lambda: len(engine.held) == 1)
        assert commit._window_s() == WINDOW_FLOOR_S  # one request waiting: the floor
        few = [put(b"k%d" % i) for i in range(int(WINDOW_FLOOR_S / WINDOW_PER_REQUEST_S) + 10)]
        await until(lambda: len(commit._pending) == len(few))
        expected = min(0.006, WINDOW_PER_REQUEST_S * (len(few) + 1))
        assert commit._window_s() == pytest.approx(expected)
        many = [put(b"m%d" % i) for i in range(100)]
        await until(lambda: len(commit._pending) == len(few) + len(many))
        assert commit._window_s() == 0.006  # capped
        async with asyncio.timeout(5):
            while engine.held or commit._pending:
                engine.release()
                await asyncio.sleep(0.001)
            await asyncio.gather(first, *few, *many)

    drive(rlog, scenario)


def test_items_committed_in_one_engine_pass_are_applied_as_one_group(tmp_path: Path) -> None:
    """A follower catching up gets many items in one pass of its engine: on the loop they
    are applied by one callback after it, published once."""
    from raftlog.entry import encode_item, encode_request

    sm = ThreadNotingMachine()
    engine = InMemoryEngine()
    segments = SegmentLog.open(tmp_path / "log", SegmentConfig(fsync_policy="never"))
    rlog = ReplicatedLog(engine, sm, segments, "n0", apply_on_loop=True)

    async def main() -> None:
        rlog.start()
        items = [
            encode_item([encode_request([Entry("set", b"k%d" % i, b"v")], "c", i + 1, 0)])
            for i in range(5)
        ]
        for index, data in enumerate(items, 1):
            rlog._apply.on_commit(index, 1, data)  # what the engine does in one pass
        assert sm.order == []  # not yet: after the pass
        await until(lambda: rlog.apply_offset == 5)
        assert sm.order == [b"k%d" % i for i in range(5)] and sm.publishes == 1
        groups, requests = rlog.groups_applied, rlog.requests_applied
        rlog._apply.on_commit(6, 1, encode_item([encode_request([Entry("set", b"k")], "c", 6, 0)]))
        await until(lambda: rlog.apply_offset == 6)
        # the counters behind metaledger_apply_groups_total and requests_applied_total
        assert (rlog.groups_applied - groups, rlog.requests_applied - requests) == (1, 1)
        assert groups >= 1 and requests >= 5

    try:
        asyncio.run(main())
    finally:
        rlog.stop()
