"""The wheel sink's lanes with the C++ producer replaced by a fake (the real one is in
tests/integration/replicator/test_sinks.py): one send per queue at a time, in order, retries
on a non-OK status, a queue that fails for good."""

from __future__ import annotations

import asyncio
import threading
from collections import namedtuple
from typing import Any

import pytest

from replicator.sinks.base import OutMessage, Slot
from replicator.sinks.errors import MessageRejected, QueueFailed, SendFailed
from replicator.sinks.wheel import WheelSink, WheelSinkConfig
from tests.unit.replicator.sinks.fake_broker import FakeRoutes

Result = namedtuple("Result", "status msg_id offset")
TOPIC = "T"


class FakeWheel(WheelSink):
    """``_send`` replaced: records (queue, offset) per call and answers ``statuses`` in turn."""

    def __init__(self, statuses: dict[int, list[int]], **settings: Any) -> None:
        config = WheelSinkConfig("127.0.0.1:1", (TOPIC,), retry_backoff_ms=1, **settings)
        super().__init__(config, FakeRoutes("127.0.0.1:1", queues=2))
        self.statuses = statuses
        self.calls: list[tuple[int, int]] = []
        self.busy: dict[int, int] = {0: 0, 1: 0}
        self.most_busy = 0
        self.lock = threading.Lock()
        self.next_offset = {0: 0, 1: 0}  # the fake broker's queue offsets

    def _start_producer(self) -> Any:
        return object()

    def _send(self, slot: Slot) -> int:
        q = slot.msg.queue_id
        with self.lock:
            self.calls.append((q, slot.msg.offset))
            self.busy[q] += 1
            self.most_busy = max(self.most_busy, self.busy[q])
            todo = self.statuses.get(slot.msg.offset, [])
            status = todo.pop(0) if todo else 0
        try:
            if status == -1:
                raise MessageRejected("the core threw")  # not retriable
            if status:
                raise SendFailed({1: 10, 2: 12, 3: 11}[status], f"SendStatus {status}")
            with self.lock:
                self.next_offset[q] += 1
                return self.next_offset[q] - 1
        finally:
            with self.lock:
                self.busy[q] -= 1

    async def close(self) -> None:
        self._producer = None
        await super().close()


def msg(i: int) -> OutMessage:
    return OutMessage(TOPIC, i % 2, f"b{i}".encode(), "SET", f"k{i}", {}, i)


def test_lanes_send_in_order_one_at_a_time_and_retry() -> None:
    async def main() -> None:
        sink = FakeWheel({4: [2, 3]}, threads=4)  # offset 4: FLUSH_SLAVE_TIMEOUT, then 11
        await sink.start()
        futures = [await sink.submit(msg(i)) for i in range(20)]
        offsets = await asyncio.gather(*futures)
        # each resolves with the queue offset the send returned (failed attempts take none)
        assert offsets == [i // 2 for i in range(20)]
        q0 = [off for q, off in sink.calls if q == 0]
        assert q0 == [0, 2, 4, 4, 4, *range(6, 20, 2)]
        assert sink.most_busy == 1
        assert sink.confirmed(TOPIC, 0) == 10 and sink.confirmed_offset(TOPIC, 1) == 19
        await sink.close()

    asyncio.run(main())


def test_a_queue_fails_for_good() -> None:
    async def main() -> None:
        sink = FakeWheel({2: [-1]}, threads=2, max_attempts=3)
        await sink.start()
        futures = [await sink.submit(msg(i)) for i in (0, 2, 4)]
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert results[0] == 0 and isinstance(results[1], MessageRejected)
        assert isinstance(results[2], QueueFailed)
        with pytest.raises(QueueFailed):
            await sink.submit(msg(6))
        await (await sink.submit(msg(1)))  # queue 1 goes on
        with pytest.raises(MessageRejected, match="empty"):
            await sink.submit(OutMessage(TOPIC, 1, b"", "", "", {}, 0))
        with pytest.raises(MessageRejected, match="flag"):
            await sink.submit(OutMessage(TOPIC, 1, b"x", "", "", {}, 0, flag=1))
        with pytest.raises(MessageRejected, match="UNIQ_KEY"):
            await sink.submit(OutMessage(TOPIC, 1, b"x", "", "", {}, 0, uniq_key="U"))
        await sink.close()

    asyncio.run(main())
