"""HAMaster + HAClient over real localhost sockets, two MessageStores (research/broker.md §6.3).

Every test ends with the slave's commit log byte-identical to the master's.
"""

from __future__ import annotations

import asyncio
import errno
import shutil
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from broker.ha.epochs import EpochEntry, EpochFile
from broker.ha.master import HAMaster
from broker.ha.protocol import SlaveHandshake, encode_ack, encode_slave_handshake
from broker.ha.slave import HAClient
from broker.store import FlushMode, MessageStore, StoreConfig, StoredMessage

SEG = 4096
HB, IDLE = 0.1, 2.0  # heartbeats every 100 ms, a silent peer dropped after 2 s


def _store(root: Path) -> MessageStore:
    cfg = StoreConfig(
        segment_size=SEG,
        cq_units_per_file=16,
        flush_mode=FlushMode.ASYNC_FLUSH,
        flush_interval_ms=60_000,
    )
    return MessageStore(str(root), cfg)


def _put(store: MessageStore, n: int, tag: str = "a", master: HAMaster | None = None) -> None:
    for i in range(n):
        m = StoredMessage(
            topic=f"T{i % 2}",
            body=f"{tag}{i}".encode() * (5 + i % 40),
            queue_id=i % 3,
            properties={"TAGS": tag},
        )
        assert store.put(m).status == "PUT_OK"
        if master is not None:
            master.notify_appended(store.log.end_offset)


def _files(root: Path, sub: str) -> dict[str, bytes]:
    base = root / sub
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


async def _until(cond: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await asyncio.sleep(0.01)


def _run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))


def _same(master_root: Path, slave_root: Path) -> None:
    assert _files(slave_root, "commitlog") == _files(master_root, "commitlog")
    assert _files(slave_root, "consumequeue") == _files(master_root, "consumequeue")


def test_slave_log_ends_byte_identical(tmp_path: Path) -> None:
    async def main() -> None:
        ms, ss = _store(tmp_path / "m"), _store(tmp_path / "s")
        mep, sep = EpochFile(str(tmp_path / "m.ep")), EpochFile(str(tmp_path / "s.ep"))
        mep.append(1, 0)
        _put(ms, 40)  # before the slave connects
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
            _put(ms, 60, "b", master)  # while it copies
            await _until(lambda: ss.log.end_offset == ms.log.end_offset, what="catch-up")
            await _until(lambda: master.slaves()[2].acked == ms.log.end_offset, what="ack")
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
        _same(tmp_path / "m", tmp_path / "s")

    _run(main())


def test_stopped_slave_catches_up_from_its_own_offset(tmp_path: Path) -> None:
    async def main() -> None:
        ms = _store(tmp_path / "m")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=HB, idle_timeout=IDLE)
        await master.start()
        ss = _store(tmp_path / "s")
        slave = HAClient(
            ss,
            EpochFile(str(tmp_path / "s.ep")),
            2,
            ("127.0.0.1", master.port),
            heartbeat_interval=HB,
            idle_timeout=IDLE,
        )
        await slave.start()
        _put(ms, 30, "a", master)
        await _until(lambda: ss.log.end_offset == ms.log.end_offset, what="first copy")
        await slave.stop()
        ss.close()
        await _until(lambda: not master.slaves()[2].connected, what="disconnect seen")
        stopped_at = ms.log.end_offset
        _put(ms, 50, "c", master)  # written while the slave is down

        ss = _store(tmp_path / "s")
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
            await _until(lambda: ss.log.end_offset == ms.log.end_offset, what="catch-up")
            assert appended[0] == stopped_at  # nothing copied twice
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()
        _same(tmp_path / "m", tmp_path / "s")

    _run(main())


def test_divergent_tail_is_cut_at_the_new_masters_epoch_boundary(tmp_path: Path) -> None:
    async def main() -> None:
        base = _store(tmp_path / "base")
        _put(base, 25)  # epoch 1, which both replicas hold
        x = base.log.end_offset
        base.close()
        shutil.copytree(tmp_path / "base", tmp_path / "old")
        shutil.copytree(tmp_path / "base", tmp_path / "new")
        old, new = _store(tmp_path / "old"), _store(tmp_path / "new")
        old_ep, new_ep = EpochFile(str(tmp_path / "old.ep")), EpochFile(str(tmp_path / "new.ep"))
        old_ep.append(1, 0)
        old_ep.append(2, x)
        _put(old, 12, "stale")  # the old master's tail nobody else has
        new_ep.append(1, 0)
        new_ep.append(3, x)
        _put(new, 20, "fresh")
        assert old.log.end_offset != new.log.end_offset or _files(
            tmp_path / "old", "commitlog"
        ) != _files(tmp_path / "new", "commitlog")

        master = HAMaster(new, "127.0.0.1", 0, new_ep, heartbeat_interval=HB, idle_timeout=IDLE)
        await master.start()
        slave = HAClient(
            old, old_ep, 1, ("127.0.0.1", master.port), heartbeat_interval=HB, idle_timeout=IDLE
        )
        await slave.start()
        try:
            await _until(lambda: old.log.end_offset == new.log.end_offset, what="catch-up")
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
        _same(tmp_path / "new", tmp_path / "old")

    _run(main())


def test_no_consistent_point_refuses_to_copy(tmp_path: Path) -> None:
    async def main() -> None:
        ms, ss = _store(tmp_path / "m"), _store(tmp_path / "s")
        mep, sep = EpochFile(str(tmp_path / "m.ep")), EpochFile(str(tmp_path / "s.ep"))
        mep.append(1, 0)
        _put(ms, 5)
        sep.append(2, 0)
        _put(ss, 3, "other")
        before = _files(tmp_path / "s", "commitlog")
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
            await _until(lambda: slave.last_error is not None, what="refusal")
            assert "NoConsistentPoint" in (slave.last_error or "")
            assert not slave.connected and _files(tmp_path / "s", "commitlog") == before
        finally:
            await slave.stop()
            await master.stop()

    _run(main())


def test_wait_for_counts_acks_and_times_out(tmp_path: Path) -> None:
    async def main() -> None:
        ms = _store(tmp_path / "m")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=HB, idle_timeout=IDLE)
        await master.start()
        stores = {i: _store(tmp_path / f"s{i}") for i in (1, 2)}
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
            await _until(lambda: 1 in master.slaves(), what="slave 1 connected")
            assert await master.wait_for(ms.log.end_offset, 0, 0.01)
            # a waiter registered before the append resolves when the ack comes back
            pending = asyncio.create_task(master.wait_for(1, 1, 5.0))
            await asyncio.sleep(0)
            assert not pending.done()
            _put(ms, 10, "a", master)
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
            assert master._waiters == []

            # confirm offset: the minimum over the SyncStateSet members, never lowered
            master.sync_state_set = frozenset({1, 2})
            assert master.confirm_offset == target
            await slaves[2].stop()
            await _until(lambda: not master.slaves()[2].connected, what="slave 2 gone")
            _put(ms, 3, "b", master)
            await _until(lambda: master.slaves()[1].acked == ms.log.end_offset, what="slave 1 ack")
            assert master.confirm_offset == target  # unchanged while a member is away
            master.sync_state_set = frozenset({1})
            assert master.confirm_offset == ms.log.end_offset
            await _until(
                lambda: slaves[1].confirm_offset == ms.log.end_offset, what="slave confirm"
            )
        finally:
            for client in slaves.values():
                await client.stop()
            await master.stop()
        for store in stores.values():
            store.close()
        ms.close()

    _run(main())


def test_bad_bytes_close_one_connection_only(tmp_path: Path) -> None:
    async def main() -> None:
        ms = _store(tmp_path / "m")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        _put(ms, 5)
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=HB, idle_timeout=IDLE)
        await master.start()
        try:
            for bad in (
                b"\xff" * 40,  # not a handshake
                encode_slave_handshake(SlaveHandshake(9)) + encode_ack(10**12),  # past the end
            ):
                r, w = await asyncio.open_connection("127.0.0.1", master.port)
                w.write(bad)
                await w.drain()
                rest = await asyncio.wait_for(r.read(), 5.0)  # the master closes it
                assert len(rest) < 1000
                w.close()
            ss = _store(tmp_path / "s")
            slave = HAClient(
                ss,
                EpochFile(str(tmp_path / "s.ep")),
                2,
                ("127.0.0.1", master.port),
                heartbeat_interval=HB,
                idle_timeout=IDLE,
            )
            await slave.start()
            await _until(
                lambda: ss.log.end_offset == ms.log.end_offset, what="a good slave still served"
            )
            await slave.stop()
            ss.close()
            assert 9 not in master.slaves()  # refused before it counted as a slave
        finally:
            await master.stop()
        ms.close()

    _run(main())


def test_idle_slave_connection_is_closed(tmp_path: Path) -> None:
    async def main() -> None:
        ms = _store(tmp_path / "m")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=0.05, idle_timeout=0.3)
        await master.start()
        try:
            _r, w = await asyncio.open_connection("127.0.0.1", master.port)
            w.write(encode_slave_handshake(SlaveHandshake(4)) + encode_ack(0))
            await w.drain()
            await _until(lambda: 4 in master.slaves() and master.slaves()[4].connected, what="conn")
            await _until(lambda: not master.slaves()[4].connected, timeout=5.0, what="idle close")
            w.close()
        finally:
            await master.stop()
        ms.close()

    _run(main())


def test_garbage_from_the_master_closes_and_the_slave_reconnects(tmp_path: Path) -> None:
    async def main() -> None:
        accepted = 0

        async def liar(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            await r.readexactly(16)
            w.write(b"\x00\x00\x00\x01" + b"\xff" * 60)  # a handshake with a negative size
            await w.drain()
            w.close()

        server = await asyncio.start_server(liar, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        ss = _store(tmp_path / "s")
        slave = HAClient(
            ss,
            EpochFile(str(tmp_path / "s.ep")),
            2,
            ("127.0.0.1", port),
            heartbeat_interval=HB,
            idle_timeout=IDLE,
            backoff_initial_s=0.02,
            backoff_max_s=0.05,
        )
        await slave.start()
        try:
            await _until(lambda: accepted >= 3, what="reconnects")
            assert "HAProtocolError" in (slave.last_error or "")
            assert not slave.connected and ss.log.end_offset == 0
        finally:
            await slave.stop()
            server.close()
            await server.wait_closed()
        ss.close()

    _run(main())


def test_an_idle_slave_keeps_its_connection_with_acks(tmp_path: Path) -> None:
    async def main() -> None:
        ms, ss = _store(tmp_path / "m"), _store(tmp_path / "s")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        _put(ms, 5)
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=0.05, idle_timeout=0.8)
        await master.start()
        slave = HAClient(
            ss,
            EpochFile(str(tmp_path / "s.ep")),
            2,
            ("127.0.0.1", master.port),
            heartbeat_interval=0.05,
            idle_timeout=0.8,
        )
        await slave.start()
        try:
            await _until(lambda: ss.log.end_offset == ms.log.end_offset, what="copy")
            await asyncio.sleep(2.0)  # over two idle timeouts with nothing new to copy
            assert slave.connected and slave.sessions == 1 and master.slaves()[2].connected
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()

    _run(main())


def test_appends_from_another_thread_wake_the_stream(tmp_path: Path) -> None:
    async def main() -> None:
        ms, ss = _store(tmp_path / "m"), _store(tmp_path / "s")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        # heartbeats far apart: only notify_appended can make the master send promptly
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=30.0, idle_timeout=60.0)
        await master.start()
        slave = HAClient(ss, EpochFile(str(tmp_path / "s.ep")), 2, ("127.0.0.1", master.port))
        await slave.start()
        try:
            await _until(lambda: 2 in master.slaves(), what="connect")
            await asyncio.to_thread(_put, ms, 20, "t", master)
            await _until(lambda: ss.log.end_offset == ms.log.end_offset, timeout=5.0, what="copy")
            assert await master.wait_for(ms.log.end_offset, 1, 5.0)
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()
        _same(tmp_path / "m", tmp_path / "s")

    _run(main())


def test_a_failed_write_on_the_slave_heals_by_itself(tmp_path: Path) -> None:
    """ENOSPC half way through a frame: the slave cuts the write back, drops the connection,
    reconnects from its own end and finishes byte-identical."""

    async def main() -> None:
        ms, ss = _store(tmp_path / "m"), _store(tmp_path / "s")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        _put(ms, 60)
        real_pwrite = ss.log.pwrite
        calls = 0

        def flaky(fd: int, data: bytes, at: int) -> int:
            nonlocal calls
            calls += 1
            if calls in (3, 4, 9):
                real_pwrite(fd, data[: len(data) // 2], at)  # half written, then the disk is full
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_pwrite(fd, data, at)

        ss.log.pwrite = flaky
        master = HAMaster(
            ms, "127.0.0.1", 0, mep, batch_bytes=700, heartbeat_interval=HB, idle_timeout=IDLE
        )
        await master.start()
        slave = HAClient(
            ss,
            EpochFile(str(tmp_path / "s.ep")),
            2,
            ("127.0.0.1", master.port),
            heartbeat_interval=HB,
            idle_timeout=IDLE,
            backoff_initial_s=0.02,
            backoff_max_s=0.05,
        )
        await slave.start()
        try:
            await _until(lambda: ss.log.end_offset == ms.log.end_offset, what="healed copy")
            assert "DiskFullError" in (slave.last_error or "") and slave.sessions >= 3
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()
        _same(tmp_path / "m", tmp_path / "s")

    _run(main())


def test_the_slave_follows_a_restarted_master(tmp_path: Path) -> None:
    async def main() -> None:
        ms, ss = _store(tmp_path / "m"), _store(tmp_path / "s")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        _put(ms, 10)
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=HB, idle_timeout=IDLE)
        await master.start()
        port = master.port
        slave = HAClient(
            ss,
            EpochFile(str(tmp_path / "s.ep")),
            2,
            ("127.0.0.1", port),
            heartbeat_interval=HB,
            idle_timeout=IDLE,
            backoff_initial_s=0.02,
            backoff_max_s=0.1,
        )
        await slave.start()
        try:
            await _until(lambda: ss.log.end_offset == ms.log.end_offset, what="copy")
            await master.stop()
            await _until(lambda: not slave.connected, what="slave sees the loss")
            _put(ms, 10, "again")
            master = HAMaster(ms, "127.0.0.1", port, mep, heartbeat_interval=HB, idle_timeout=IDLE)
            await master.start()
            await _until(lambda: ss.log.end_offset == ms.log.end_offset, what="copy after restart")
            assert slave.sessions == 2
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()
        _same(tmp_path / "m", tmp_path / "s")

    _run(main())
