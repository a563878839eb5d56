"""HA faults over real localhost sockets: bad bytes, idle peers, full disks, restarts.

A fault costs one connection; the slave reconnects by itself and still ends byte-identical.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

from broker.ha.epochs import EpochFile
from broker.ha.master import HAMaster
from broker.ha.protocol import SlaveHandshake, encode_ack, encode_slave_handshake
from broker.ha.slave import HAClient

from .conftest import HB, IDLE, put, run, same, store_at, until


def test_bad_bytes_close_one_connection_only(tmp_path: Path) -> None:
    async def main() -> None:
        ms = store_at(tmp_path / "m")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        put(ms, 5)
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
            await until(
                lambda: ss.log.end_offset == ms.log.end_offset, what="a good slave still served"
            )
            await slave.stop()
            ss.close()
            assert 9 not in master.slaves()  # refused before it counted as a slave
        finally:
            await master.stop()
        ms.close()

    run(main())


def test_idle_slave_connection_is_closed(tmp_path: Path) -> None:
    async def main() -> None:
        ms = store_at(tmp_path / "m")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        master = HAMaster(ms, "127.0.0.1", 0, mep, heartbeat_interval=0.05, idle_timeout=0.3)
        await master.start()
        try:
            _r, w = await asyncio.open_connection("127.0.0.1", master.port)
            w.write(encode_slave_handshake(SlaveHandshake(4)) + encode_ack(0))
            await w.drain()
            await until(lambda: 4 in master.slaves() and master.slaves()[4].connected, what="conn")
            await until(lambda: not master.slaves()[4].connected, timeout=5.0, what="idle close")
            w.close()
        finally:
            await master.stop()
        ms.close()

    run(main())


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
        ss = store_at(tmp_path / "s")
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
            await until(lambda: accepted >= 3, what="reconnects")
            assert "HAProtocolError" in (slave.last_error or "")
            assert not slave.connected and ss.log.end_offset == 0
        finally:
            await slave.stop()
            server.close()
            await server.wait_closed()
        ss.close()

    run(main())


def test_an_idle_slave_keeps_its_connection_with_acks(tmp_path: Path) -> None:
    async def main() -> None:
        ms, ss = store_at(tmp_path / "m"), store_at(tmp_path / "s")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        put(ms, 5)
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
            await until(lambda: ss.log.end_offset == ms.log.end_offset, what="copy")
            await asyncio.sleep(2.0)  # over two idle timeouts with nothing new to copy
            assert slave.connected and slave.sessions == 1 and master.slaves()[2].connected
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()

    run(main())


def test_a_failed_write_on_the_slave_heals_by_itself(tmp_path: Path) -> None:
    """ENOSPC half way through a frame: the slave cuts the write back, drops the connection,
    reconnects from its own end and finishes byte-identical."""

    async def main() -> None:
        ms, ss = store_at(tmp_path / "m"), store_at(tmp_path / "s")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        put(ms, 60)
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
            await until(lambda: ss.log.end_offset == ms.log.end_offset, what="healed copy")
            assert "DiskFullError" in (slave.last_error or "") and slave.sessions >= 3
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()
        same(tmp_path / "m", tmp_path / "s")

    run(main())


def test_the_slave_follows_a_restarted_master(tmp_path: Path) -> None:
    async def main() -> None:
        ms, ss = store_at(tmp_path / "m"), store_at(tmp_path / "s")
        mep = EpochFile(str(tmp_path / "m.ep"))
        mep.append(1, 0)
        put(ms, 10)
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
            await until(lambda: ss.log.end_offset == ms.log.end_offset, what="copy")
            await master.stop()
            await until(lambda: not slave.connected, what="slave sees the loss")
            put(ms, 10, "again")
            master = HAMaster(ms, "127.0.0.1", port, mep, heartbeat_interval=HB, idle_timeout=IDLE)
            await master.start()
            await until(lambda: ss.log.end_offset == ms.log.end_offset, what="copy after restart")
            assert slave.sessions == 2
        finally:
            await slave.stop()
            await master.stop()
        ms.close()
        ss.close()
        same(tmp_path / "m", tmp_path / "s")

    run(main())
