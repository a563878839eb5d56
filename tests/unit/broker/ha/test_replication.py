"""HAMaster + HAClient over real localhost sockets, two MessageStores (research/broker.md §6.3).

Every test ends with the slave's commit log byte-identical to the master's.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path

from broker.ha.epochs import EpochEntry, EpochFile
from broker.ha.master import HAMaster, SlaveState, _Conn
from broker.ha.protocol import MasterHandshake
from broker.ha.slave import HAClient
from broker.store import FlushMode, MessageStore, StoreConfig

from .conftest import HB, IDLE, SEG, files, put, run, same, slave_of, store_at, until


def test_slave_log_ends_byte_identical(tmp_path: Path) -> None:
    async def main() -> None:
        ms, ss = store_at(tmp_path / "m"), store_at(tmp_path / "s")
        mep, sep = EpochFile(str(tmp_path / "m.ep")), EpochFile(str(tmp_path / "s.ep"))
        mep.append(1, 0)
        put(ms, 40)  # before the slave connects
        x = ms.log.end_offset
        assert x % 1000 and x % SEG  # mid-batch and mid-segment: frames must stop there
        mep.append(2, x)  # a later epoch of this master
        master = HAMaster(
            ms, "127.0.0.1", 0, mep, batch_bytes=1000, heartbeat_interval=HB, idle_timeout=IDLE
        )
        await master.start()
        slave = HAClient(
            ss, sep, 2, ("127.0.0.1", master.port), heartbeat_interval=HB, idle_timeout=IDLE
        )
        await slave.start()
        try:
            put(ms, 60, "b", master)  # while it copies
            await until(lambda: ss.log.end_offset == ms.log.end_offset, what="catch-up")
            await until(lambda: master.slaves()[2].acked == ms.log.end_offset, what="ack")
            assert ms.log.end_offset > 3 * SEG  # several segments, closed ones included
            state = master.slaves()[2]
            assert state.connected and state.caught_up_at > 0
            assert sep.entries == (EpochEntry(1, 0), EpochEntry(2, x))
            assert slave.confirm_offset == ss.log.end_offset  # no SyncStateSet: all confirmed
            assert ss.dispatched_offset == ss.log.end_offset
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()
        same(tmp_path / "m", tmp_path / "s")

    run(main())


def test_stopped_slave_catches_up_from_its_own_offset(tmp_path: Path) -> None:
    async def main() -> None:
        ms = store_at(tmp_path / "m")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=HB, idle_timeout=IDLE)
        await master.start()
        ss = store_at(tmp_path / "s")
        slave = HAClient(
            ss,
            EpochFile(str(tmp_path / "s.ep")),
            2,
            ("127.0.0.1", master.port),
            heartbeat_interval=HB,
            idle_timeout=IDLE,
        )
        await slave.start()
        put(ms, 30, "a", master)
        await until(lambda: ss.log.end_offset == ms.log.end_offset, what="first copy")
        await slave.stop()
        ss.close()
        await until(lambda: not master.slaves()[2].connected, what="disconnect seen")
        stopped_at = ms.log.end_offset
        put(ms, 50, "c", master)  # written while the slave is down

        ss = store_at(tmp_path / "s")
        assert ss.log.end_offset == stopped_at
        appended: list[int] = []
        original = ss.append_replicated

        def spy(offset: int, data: bytes) -> int:
            appended.append(offset)
            return original(offset, data)

        ss.append_replicated = spy  # type: ignore[method-assign]
        slave = HAClient(
            ss,
            EpochFile(str(tmp_path / "s.ep")),
            2,
            ("127.0.0.1", master.port),
            heartbeat_interval=HB,
            idle_timeout=IDLE,
        )
        await slave.start()
        try:
            await until(lambda: ss.log.end_offset == ms.log.end_offset, what="catch-up")
            assert appended[0] == stopped_at  # nothing copied twice
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()
        same(tmp_path / "m", tmp_path / "s")

    run(main())


def test_divergent_tail_is_cut_at_the_new_masters_epoch_boundary(tmp_path: Path) -> None:
    async def main() -> None:
        base = store_at(tmp_path / "base")
        put(base, 25)  # epoch 1, which both replicas hold
        x = base.log.end_offset
        base.close()
        shutil.copytree(tmp_path / "base", tmp_path / "old")
        shutil.copytree(tmp_path / "base", tmp_path / "new")
        old, new = store_at(tmp_path / "old"), store_at(tmp_path / "new")
        old_ep, new_ep = EpochFile(str(tmp_path / "old.ep")), EpochFile(str(tmp_path / "new.ep"))
        old_ep.append(1, 0)
        old_ep.append(2, x)
        put(old, 12, "stale")  # the old master's tail nobody else has
        new_ep.append(1, 0)
        new_ep.append(3, x)
        put(new, 20, "fresh")
        assert old.log.end_offset != new.log.end_offset or files(
            tmp_path / "old", "commitlog"
        ) != files(tmp_path / "new", "commitlog")

        master = HAMaster(new, "127.0.0.1", 0, new_ep, heartbeat_interval=HB, idle_timeout=IDLE)
        await master.start()
        slave = HAClient(
            old, old_ep, 1, ("127.0.0.1", master.port), heartbeat_interval=HB, idle_timeout=IDLE
        )
        await slave.start()
        try:
            await until(lambda: old.log.end_offset == new.log.end_offset, what="catch-up")
            assert old_ep.entries == (EpochEntry(1, 0), EpochEntry(3, x))
            assert master.slaves()[1].acked <= new.log.end_offset
            got = old.get("T0", 0, 0, 100).messages
            assert got == new.get("T0", 0, 0, 100).messages
            assert not any(b"stale" in m for m in got)
        finally:
            await slave.stop()
            await master.stop()
        old.close()
        new.close()
        same(tmp_path / "new", tmp_path / "old")

    run(main())


def test_no_consistent_point_refuses_to_copy(tmp_path: Path) -> None:
    async def main() -> None:
        ms, ss = store_at(tmp_path / "m"), store_at(tmp_path / "s")
        mep, sep = EpochFile(str(tmp_path / "m.ep")), EpochFile(str(tmp_path / "s.ep"))
        mep.append(1, 0)
        put(ms, 5)
        sep.append(2, 0)
        put(ss, 3, "other")
        before = files(tmp_path / "s", "commitlog")
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=HB, idle_timeout=IDLE)
        await master.start()
        slave = HAClient(
            ss,
            sep,
            2,
            ("127.0.0.1", master.port),
            backoff_initial_s=0.05,
            heartbeat_interval=HB,
            idle_timeout=IDLE,
        )
        await slave.start()
        try:
            await until(lambda: slave.last_error is not None, what="refusal")
            assert "NoConsistentPoint" in (slave.last_error or "")
            assert not slave.connected and files(tmp_path / "s", "commitlog") == before
        finally:
            await slave.stop()
            await master.stop()

    run(main())


def test_wait_for_counts_acks_and_times_out(tmp_path: Path) -> None:
    async def main() -> None:
        ms = store_at(tmp_path / "m")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=HB, idle_timeout=IDLE)
        await master.start()
        stores = {i: store_at(tmp_path / f"s{i}") for i in (1, 2)}
        slaves = {
            i: HAClient(
                s,
                EpochFile(str(tmp_path / f"s{i}.ep")),
                i,
                ("127.0.0.1", master.port),
                heartbeat_interval=HB,
                idle_timeout=IDLE,
            )
            for i, s in stores.items()
        }
        await slaves[1].start()
        try:
            await until(lambda: 1 in master.slaves(), what="slave 1 connected")
            assert await master.wait_for(ms.log.end_offset, 0, 0.01)
            # a waiter registered before the append resolves when the ack comes back
            pending = asyncio.create_task(master.wait_for(1, 1, 5.0))
            await asyncio.sleep(0)
            assert not pending.done()
            put(ms, 10, "a", master)
            target = ms.log.end_offset
            assert await pending
            assert await master.wait_for(target, 1, 5.0)
            assert master.slaves()[1].acked >= target

            t0 = time.monotonic()
            assert not await master.wait_for(target, 2, 0.3)  # only one slave
            assert 0.25 <= time.monotonic() - t0 < 2.0
            assert not await master.wait_for(target, 1, 0.2, among={2})
            assert await master.wait_for(target, 1, 0.2, among={1, 2})

            two = asyncio.create_task(master.wait_for(target, 2, 10.0))
            await slaves[2].start()
            assert await two  # resolved by slave 2's catch-up, well before the deadline
            assert master._waiters == {}

            # confirm offset: the minimum over the SyncStateSet members, never lowered
            master.sync_state_set = frozenset({1, 2})
            assert master.confirm_offset == target
            await slaves[2].stop()
            await until(lambda: not master.slaves()[2].connected, what="slave 2 gone")
            put(ms, 3, "b", master)
            await until(lambda: master.slaves()[1].acked == ms.log.end_offset, what="slave 1 ack")
            assert master.confirm_offset == target  # unchanged while a member is away
            master.sync_state_set = frozenset({1})
            assert master.confirm_offset == ms.log.end_offset
            await until(lambda: slaves[1].confirm_offset == ms.log.end_offset, what="slave confirm")
        finally:
            for client in slaves.values():
                await client.stop()
            await master.stop()
        for store in stores.values():
            store.close()
        ms.close()

    run(main())


def test_appends_from_another_thread_wake_the_stream(tmp_path: Path) -> None:
    async def main() -> None:
        ms, ss = store_at(tmp_path / "m"), store_at(tmp_path / "s")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        # heartbeats far apart: only notify_appended can make the master send promptly
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=30.0, idle_timeout=60.0)
        await master.start()
        slave = HAClient(ss, EpochFile(str(tmp_path / "s.ep")), 2, ("127.0.0.1", master.port))
        await slave.start()
        try:
            await until(lambda: 2 in master.slaves(), what="connect")
            await asyncio.to_thread(put, ms, 20, "t", master)
            await until(lambda: ss.log.end_offset == ms.log.end_offset, timeout=5.0, what="copy")
            assert await master.wait_for(ms.log.end_offset, 1, 5.0)
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()
        same(tmp_path / "m", tmp_path / "s")

    run(main())


def test_master_stops_quietly_with_slaves_connected(tmp_path: Path) -> None:
    """stop() cancels the connection handlers: nothing reaches the loop's exception handler
    (Python 3.11's start_server callback calls ``task.exception()`` on a cancelled handler
    and logged the CancelledError as an error at every clean stop of a master)."""

    async def main() -> None:
        errors: list[dict[str, object]] = []
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
        ms, ss = store_at(tmp_path / "m"), store_at(tmp_path / "s")
        mep, sep = EpochFile(str(tmp_path / "m.ep")), EpochFile(str(tmp_path / "s.ep"))
        mep.append(1, 0)
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=HB, idle_timeout=IDLE)
        await master.start()
        slave = HAClient(
            ss, sep, 2, ("127.0.0.1", master.port), heartbeat_interval=HB, idle_timeout=IDLE
        )
        await slave.start()
        try:
            put(ms, 5, master=master)
            await until(lambda: ss.log.end_offset == ms.log.end_offset, what="catch-up")
            await master.stop()
            for _ in range(5):
                await asyncio.sleep(0.01)
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()
        assert errors == []

    run(main())


def test_an_ack_resolves_exactly_the_waiters_it_satisfies(tmp_path: Path) -> None:
    """Waiters in a heap per (count, among): an ack resolves those at or below what
    ``count`` slaves hold, whatever order they came in; the rest keep waiting."""

    async def main() -> None:
        ms = store_at(tmp_path / "m")
        master = HAMaster(ms, "127.0.0.1", 0, EpochFile(str(tmp_path / "m.ep")))
        await master.start()
        try:
            for i in (1, 2):
                master._slaves[i] = SlaveState(i, acked=0, connected=True)
            conn1, conn2 = (_Conn(i, None, 0) for i in (1, 2))  # type: ignore[arg-type]
            one = {o: asyncio.create_task(master.wait_for(o, 1, 5.0)) for o in (300, 100, 200)}
            both = asyncio.create_task(master.wait_for(150, 2, 5.0))
            only2 = asyncio.create_task(master.wait_for(100, 1, 5.0, among={2}))
            await asyncio.sleep(0)
            master._on_ack(conn1, 200)
            await asyncio.sleep(0)
            assert [o for o, t in one.items() if t.done()] == [100, 200]
            assert not both.done() and not only2.done()
            master._on_ack(conn2, 150)
            await asyncio.sleep(0)
            assert both.done() and only2.done() and not one[300].done()
            master._on_ack(conn2, 300)
            assert await one[300] and await both and await only2
            assert master._waiters == {}
            late = asyncio.create_task(master.wait_for(400, 1, 0.05))
            assert not await late  # timed out: forgotten
            assert master._waiters == {}
            # one timer for all deadlines: a shorter timeout after a longer one still counts
            long = asyncio.create_task(master.wait_for(500, 1, 10.0))
            t0 = time.monotonic()
            assert not await master.wait_for(600, 1, 0.05)
            assert time.monotonic() - t0 < 2.0 and not long.done()
            master._on_ack(conn1, 500)
            assert await long
        finally:
            await master.stop()

    run(main())


def test_the_slaves_streams_share_a_frame_until_the_log_is_cut(tmp_path: Path) -> None:
    ms = store_at(tmp_path / "m")
    put(ms, 5, "a")
    master = HAMaster(ms, "127.0.0.1", 0, EpochFile(str(tmp_path / "m.ep")))
    entry = EpochEntry(1, 0)
    n = ms.log.end_offset
    first, size = master._frame(0, n, entry)
    again, _ = master._frame(0, n, entry)
    assert again is first and size == n  # the second slave's stream: no read, no encode
    ms.truncate(0)  # a cut, then other bytes at the same offsets
    put(ms, 5, "b")
    fresh, size = master._frame(0, n, entry)
    assert fresh != first and size == n
    assert fresh[-n:] == ms.read_log(0, n)
    ms.close()


def test_a_sync_flush_slave_acks_only_what_it_fsynced(tmp_path: Path) -> None:
    """Under SYNC_FLUSH the slave's ack (and so the master's quorum count) stops at its last
    fdatasync: bytes written but not synced are not acknowledged; under ASYNC_FLUSH it acks on
    write and never syncs on the ack's account."""

    async def main(mode: FlushMode) -> None:
        root = tmp_path / mode.value
        ms = store_at(root / "m")
        cfg = StoreConfig(
            segment_size=SEG, cq_units_per_file=16, flush_mode=mode, flush_interval_ms=60_000
        )
        ss = MessageStore(str(root / "s"), cfg)
        gate, synced = threading.Event(), []

        def fdatasync(fd: int) -> None:
            gate.wait(10)
            synced.append(ss.log.end_offset)

        ss.log.fdatasync = fdatasync
        mep = EpochFile(str(root / "m.ep"))
        mep.append(1, 0)
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=HB, idle_timeout=IDLE)
        await master.start()
        slave = slave_of(ss, root / "s.ep", 2, master)
        await slave.start()
        try:
            await until(lambda: 2 in master.slaves(), what="slave connected")
            put(ms, 10, "a", master)
            end = ms.log.end_offset
            await until(lambda: ss.log.end_offset == end, what="written on the slave")
            if mode is FlushMode.SYNC_FLUSH:
                await asyncio.sleep(5 * HB)  # heartbeats come and go: still nothing acked
                assert master.slaves()[2].acked == 0 and not synced
                gate.set()
                await until(lambda: master.slaves()[2].acked == end, what="ack after sync")
                assert synced and synced[-1] == end and slave.acked_offset == end
            else:
                await until(lambda: master.slaves()[2].acked == end, what="ack on write")
                assert not synced
        finally:
            gate.set()
            await slave.stop()
            await master.stop()
        ss.close()
        ms.close()

    run(main(FlushMode.SYNC_FLUSH))
    run(main(FlushMode.ASYNC_FLUSH))


def test_the_master_tells_of_each_slave_connection_once_it_is_set_up(tmp_path: Path) -> None:
    """The in-sync set keeper checks at once when a slave connects (a new master admits no
    send until one is back in its set), not at its next interval."""

    async def main() -> None:
        ms, ss = store_at(tmp_path / "m"), store_at(tmp_path / "s")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        connected: list[int] = []
        master = HAMaster(
            ms, "127.0.0.1", 0, mep, heartbeat_interval=HB, idle_timeout=IDLE,
            on_connect=connected.append,
        )  # fmt: skip
        await master.start()
        slave = slave_of(ss, tmp_path / "s.ep", 2, master)
        await slave.start()
        try:
            await until(lambda: connected == [2], what="the connection told")
            assert master.slaves()[2].connected
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()

    run(main())


class _ClosedWriter:
    """A transport the other side closed, as uvloop's: a write raises RuntimeError."""

    def is_closing(self) -> bool:
        return True

    def write(self, data: bytes) -> None:
        raise RuntimeError("unable to perform operation on <TCPTransport closed=True>")

    async def drain(self) -> None:
        return None


def test_a_write_to_a_closed_slave_connection_ends_it_as_closed_not_as_a_bug(
    tmp_path: Path,
) -> None:
    """Under a partition the network fault harness logged the stream's RuntimeError as a
    failed HA connection (the path kept for bugs); a closed connection is an OSError."""

    async def main() -> None:
        ms = store_at(tmp_path / "m")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        put(ms, 3)
        master = HAMaster(ms, "127.0.0.1", 0, mep)
        master._slaves[2] = SlaveState(2)
        conn = _Conn(2, _ClosedWriter(), ms.log.end_offset)  # type: ignore[arg-type]
        try:
            await master._stream(conn, 0)
        except ConnectionResetError as exc:
            assert "slave 2" in str(exc)
        else:
            raise AssertionError("the stream went on writing to a closed connection")
        ms.close()

    run(main())


def test_the_confirm_offset_counts_the_in_sync_slaves_the_group_has_now(tmp_path: Path) -> None:
    """The confirm offset goes to the slaves, who serve consumers up to it: with ``in_sync``
    a slave that just joined counts at once (an attribute set later would let the offset run
    past what it holds, and the offset never comes back)."""
    ms = store_at(tmp_path / "m")
    mep = EpochFile(str(tmp_path / "m.ep"))
    mep.append(1, 0)
    members: list[int] = [1]
    master = HAMaster(ms, "127.0.0.1", 0, mep, in_sync=lambda: members)
    put(ms, 10)
    held = ms.log.end_offset
    master._slaves[1] = SlaveState(1, acked=held, connected=True)
    master._slaves[2] = SlaveState(2, acked=held // 2, connected=True)
    assert master.confirm_offset == held
    members.append(2)  # joined; the old attribute still says {1}
    put(ms, 5)
    master._slaves[1].acked = ms.log.end_offset
    assert master.sync_state_set == frozenset()
    assert master.confirm_offset == held  # 2 holds less: not past what it held at the join
    ms.close()


def test_a_slave_cut_back_by_a_new_master_no_longer_confirms_the_cut_tail(
    tmp_path: Path,
) -> None:
    """The confirm offset a slave serves consumers up to: its handshake with a new master
    cuts the log at the consistent point, and the old master's confirm offset past it goes
    (the bytes copied anew there are confirmed only by the frames that bring them)."""
    store = store_at(tmp_path / "s")
    epochs = EpochFile(str(tmp_path / "s.ep"))
    epochs.append(1, 0)
    put(store, 25)
    x = store.log.end_offset
    epochs.append(2, x)
    put(store, 12, "stale")
    client = HAClient(store, epochs, 2, ("127.0.0.1", 9))
    client.confirm_offset = store.log.end_offset  # the old master confirmed its whole tail
    hello = MasterHandshake(x + 5000, 3, (EpochEntry(1, 0), EpochEntry(3, x)))
    assert client._truncate_to(hello) == x
    assert store.log.end_offset == x
    assert client.confirm_offset == x
    store.close()
