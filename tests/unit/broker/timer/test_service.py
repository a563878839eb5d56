"""The timer's delivery loop with a fake clock, over a real store: due, restart, failover, roll;
and the delayed delivery's positions across a failover."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.replica import Replica
from broker.replication import PutStatus
from broker.send.schedule import ScheduleService
from broker.state.offsets import InMemoryOffsetStore
from broker.timer.message import TIMER_TOPIC, to_timer
from broker.timer.progress import DeliveryProgress
from broker.timer.service import TimerService, TimerSettings
from broker.topics import SCHEDULE_TOPIC
from rmq.message import StoredMessage, decode

TOPIC = "TopicA"


class Clock:
    def __init__(self) -> None:
        self.ms = (int(time.time()) + 1) * 1000

    def __call__(self) -> int:
        return self.ms


def run(
    tmp_path: Path, scenario: Callable[[BrokerCore], Awaitable[None]], delay_levels: str = ""
) -> None:
    async def main() -> None:
        cfg = BrokerConfig(broker_name="broker-a", data_dir=str(tmp_path / "broker"))
        if delay_levels:
            cfg = replace(cfg, message_delay_levels=delay_levels)
        replica = Replica(cfg)  # not started: its own delivery loops stay idle
        try:
            await scenario(replica.core)
        finally:
            replica.core.close()
            replica.store.close()

    asyncio.run(main())


async def send_at(core: BrokerCore, clock: Clock, body: bytes, at_ms: int) -> None:
    m = StoredMessage(
        topic=TOPIC,
        body=body,
        queue_id=1,
        properties={"TIMER_DELIVER_MS": str(at_ms), "KEYS": body.decode()},
    )
    status, _ = await core.put(to_timer(m, clock(), 3 * 86_400))
    assert status.value == "PUT_OK"


def delivered(core: BrokerCore) -> list[StoredMessage]:
    got = core.store.get(TOPIC, 1, 0, 100)
    return [decode(raw) for raw in got.messages]


def service(
    core: BrokerCore, path: Path, clock: Clock, store: InMemoryOffsetStore, **settings: int
) -> TimerService:
    progress = DeliveryProgress(store, None, "timer")
    return TimerService(core, str(path), progress, TimerSettings(**settings), clock=clock)


def test_delivered_in_its_second_not_before(tmp_path: Path) -> None:
    async def scenario(core: BrokerCore) -> None:
        clock = Clock()
        timer = service(core, tmp_path / "wheel", clock, InMemoryOffsetStore())
        await send_at(core, clock, b"a", clock.ms + 3000)
        await send_at(core, clock, b"past", clock.ms - 5000)  # stored as is: not a timer
        assert await timer.step() == 0
        assert [m.body for m in delivered(core)] == [b"past"]
        clock.ms += 2999
        assert await timer.step() == 0
        clock.ms += 1
        assert await timer.step() == 1
        (_, m) = delivered(core)
        assert (m.body, m.keys, m.queue_id) == (b"a", "a", 1)
        assert "REAL_TOPIC" not in m.properties and m.properties["TIMER_DEQUEUE_MS"]
        clock.ms += 10_000
        assert await timer.step() == 0
        await timer.stop()

    run(tmp_path, scenario)


def test_a_restart_resumes_from_the_wheel_files(tmp_path: Path) -> None:
    async def scenario(core: BrokerCore) -> None:
        clock = Clock()
        kv = InMemoryOffsetStore()
        timer = service(core, tmp_path / "wheel", clock, kv)
        for i in range(6):
            await send_at(core, clock, b"m%d" % i, clock.ms + 1000 * (i + 1))
        clock.ms += 3000
        assert await timer.step() == 3
        await timer.stop()
        await send_at(core, clock, b"while-down", clock.ms + 500)
        timer = service(core, tmp_path / "wheel", clock, kv)
        assert timer.wheel.enqueue_next == 6
        clock.ms += 10_000
        assert await timer.step() == 4
        bodies = sorted(m.body for m in delivered(core))
        assert bodies == sorted([b"m%d" % i for i in range(6)] + [b"while-down"])
        await timer.stop()

    run(tmp_path, scenario)


def test_a_new_master_rebuilds_from_the_timer_queue_and_skips_what_was_delivered(
    tmp_path: Path,
) -> None:
    async def scenario(core: BrokerCore) -> None:
        clock = Clock()
        kv = InMemoryOffsetStore()  # metaledger: both masters' progress
        start = clock.ms
        old = service(core, tmp_path / "old", clock, kv)
        for i, after_s in enumerate((2, 4, 10, 60)):
            await send_at(core, clock, b"m%d" % i, clock.ms + after_s * 1000)
        clock.ms += 5000
        assert await old.step() == 2
        await old.stop()  # the old master is gone; its wheel with it
        clock.ms += 1000
        new = service(core, tmp_path / "new", clock, kv)  # a slave's wheel: nothing in it
        assert await new.step() == 0
        # metaledger's pair: the 4 linked, fired through m1's second (+3 s: on a boundary, one
        # second earlier, as RocketMQ); the idle second after it wrote nothing
        assert new.skips[0] == (4, start + 4000)
        clock.ms += 5000
        assert await new.step() == 1
        clock.ms += 60_000
        assert await new.step() == 1
        assert sorted(m.body for m in delivered(core)) == [b"m0", b"m1", b"m2", b"m3"]
        await new.stop()

    run(tmp_path, scenario)


def test_a_time_beyond_the_window_rolls(tmp_path: Path) -> None:
    async def scenario(core: BrokerCore) -> None:
        clock = Clock()
        timer = service(
            core, tmp_path / "wheel", clock, InMemoryOffsetStore(), slots=60, roll_window_slots=20
        )
        await send_at(core, clock, b"far", clock.ms + 150_000)
        for _ in range(149):
            clock.ms += 1000
            assert await timer.step() == 0
        clock.ms += 1000
        assert await timer.step() == 1
        await timer.stop()

    run(tmp_path, scenario)


def test_a_slave_delivers_nothing(tmp_path: Path) -> None:
    async def scenario(core: BrokerCore) -> None:
        clock = Clock()
        timer = service(core, tmp_path / "wheel", clock, InMemoryOffsetStore())
        await send_at(core, clock, b"a", clock.ms + 1000)
        clock.ms += 2000
        core.replication.writable = lambda: "slave"  # type: ignore[method-assign]
        assert await timer.step() == 0 and timer.wheel.enqueue_next == 0
        await timer.stop()

    run(tmp_path, scenario)


def test_delay_levels_after_a_failover_resume_from_metaledger(tmp_path: Path) -> None:
    async def scenario(core: BrokerCore) -> None:
        kv = InMemoryOffsetStore()
        real = {"DELAY": "1", "REAL_TOPIC": TOPIC, "REAL_QID": "1"}
        for body in (b"d0", b"d1"):
            m = StoredMessage(topic=SCHEDULE_TOPIC, body=body, queue_id=0, properties=real)
            await core.put(m)
        await asyncio.sleep(0.15)
        old = ScheduleService(
            core, str(tmp_path / "a.json"), DeliveryProgress(kv, None, "schedule")
        )
        assert await old.deliver_due() == 2
        # the new master's delayOffset.json is its own (a slave's never moves)
        new = ScheduleService(
            core, str(tmp_path / "b.json"), DeliveryProgress(kv, None, "schedule")
        )
        assert await new.deliver_due() == 0
        assert len(delivered(core)) == 2

    run(tmp_path, scenario, delay_levels="100ms 200ms")


def test_timer_topic_name() -> None:
    assert TIMER_TOPIC == "rmq_sys_wheel_timer"


def test_a_refused_put_is_retried_from_that_message(tmp_path: Path) -> None:
    async def scenario(core: BrokerCore) -> None:
        clock = Clock()
        timer = service(core, tmp_path / "wheel", clock, InMemoryOffsetStore())
        for i in range(3):
            await send_at(core, clock, b"m%d" % i, clock.ms + 1500)
        put = core.put
        calls = 0

        async def refuse_the_second(m: StoredMessage, wait_replicas: bool = True) -> Any:
            nonlocal calls
            calls += 1
            if calls == 2:
                return PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH, None
            return await put(m, wait_replicas)

        core.put = refuse_the_second  # type: ignore[method-assign]
        clock.ms += 2000
        assert await timer.step() == 1
        assert timer.wheel.read_s == clock.ms // 1000 - 1  # the second is not over for it
        assert await timer.step() == 2
        assert [m.body for m in delivered(core)] == [b"m0", b"m1", b"m2"]
        await timer.stop()

    run(tmp_path, scenario)


def test_a_full_disk_while_linking_is_retried_and_delivers_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(core: BrokerCore) -> None:
        clock = Clock()
        timer = service(core, tmp_path / "wheel", clock, InMemoryOffsetStore())
        for i in range(3):
            await send_at(core, clock, b"m%d" % i, clock.ms + 1500)
        real_pwrite = os.pwrite
        writes = 0

        def half_then_full(fd: int, data: bytes, offset: int) -> int:
            nonlocal writes
            writes += 1
            if writes == 2:  # the second entry: half written, then ENOSPC
                real_pwrite(fd, data[: len(data) // 2], offset)
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_pwrite(fd, data, offset)

        monkeypatch.setattr("broker.timer.wheel.os.pwrite", half_then_full)
        with pytest.raises(OSError, match="No space"):
            await timer.step()
        assert timer.wheel.enqueue_next == 1
        clock.ms += 2000
        assert await timer.step() == 3
        assert [m.body for m in delivered(core)] == [b"m0", b"m1", b"m2"]
        await timer.stop()

    run(tmp_path, scenario)
