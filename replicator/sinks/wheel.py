"""The RocketMQ sink on the ``rocketmq`` 0.4.4 wheel (messense's ctypes wrapper around a bundled
rocketmq-client-cpp 1.x core), behind the same interface as the codec sink.

The wheel offers no asynchronous send to a chosen queue: ``send_async`` picks the queue itself
and ``send_orderly`` (``SendMessageOrderly``) blocks. So each queue is a lane that sends one
message at a time with ``send_orderly``, its selector returning the queue index (the core's
``hashing_queue_selector``: ``arg % mq_size``, and the core orders a topic's write queues as
:mod:`replicator.sinks.base` numbers them); lanes run in parallel on a thread pool (ctypes
releases the GIL during the call). One in flight per queue keeps the queue's order without any
rewind: a failed send is retried (``max_attempts``, doubling backoff) before the next message of
the queue goes out, and the queue fails for good as in the codec sink.

The core resolves routes itself through the metaledger node's remoting port (``namesrv``, the
RocketMQ nameserver protocol); queue counts come from metaledger's ``route_get`` like the codec
sink's. Status (RocketMQ's ``SendStatus``): only SEND_OK confirms; the core's statuses
FLUSH_DISK_TIMEOUT 1, FLUSH_SLAVE_TIMEOUT 2, SLAVE_NOT_AVAILABLE 3 become SendFailed with the
remoting codes 10, 12, 11. Bodies go in with ``SetByteMessageBody`` (``set_body`` stops at a NUL
byte). The core adds UNIQ_KEY and WAIT itself (it overwrites a UNIQ_KEY set as a property:
tests/integration/replicator/test_sinks.py saw it), and the wheel cannot set a message flag,
so a message with a ``uniq_key`` or a ``flag`` is rejected (MessageRejected). A confirmed message's future resolves with the SendResult's
``offset`` (the core's ``getQueueOffset``); it zlib-compresses bodies over 4 KiB (the broker
stores them compressed with sysFlag bit 0, consumers inflate them). It logs to
``$HOME/logs/rocketmq-cpp``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from replicator.sinks.base import OutMessage, QueueLedger, Slot, encode_properties, submit_each
from replicator.sinks.errors import (
    MessageRejected,
    QueueFailed,
    SendFailed,
    SinkClosed,
    SinkError,
    SinkUnavailable,
)
from replicator.sinks.routes import RouteSource, write_queues

__all__ = ["WheelSink", "WheelSinkConfig"]

log = logging.getLogger(__name__)

#: the wheel's SendStatus → the remoting response code it stands for
STATUS_CODES: Final = {1: 10, 2: 12, 3: 11}


@dataclass(frozen=True)
class WheelSinkConfig:
    namesrv: str  # host:port of a metaledger node's RocketMQ remoting port
    topics: tuple[str, ...]
    producer_group: str = "metaledger-replicator"
    max_in_flight: int = 4096
    threads: int = 8
    send_timeout_ms: int = 10_000
    max_attempts: int = 5
    retry_backoff_ms: int = 100
    max_backoff_ms: int = 2_000

    def validate(self) -> None:
        if not self.topics:
            raise ValueError("topics: at least one topic")
        if ":" not in self.namesrv:
            raise ValueError(f"namesrv: host:port, got {self.namesrv!r}")
        for name in ("max_in_flight", "threads", "send_timeout_ms", "max_attempts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")


@dataclass(eq=False)
class _Lane:
    topic: str
    index: int
    ledger: QueueLedger
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    failed: SinkError | None = None
    task: asyncio.Task[None] | None = None


class WheelSink:
    """:class:`~replicator.sinks.base.Sink` over the ``rocketmq`` wheel (module docstring)."""

    def __init__(self, config: WheelSinkConfig, routes: RouteSource) -> None:
        config.validate()
        self.config = config
        self._routes = routes
        self._counts: dict[str, int] = {}
        self._lanes: dict[tuple[str, int], _Lane] = {}
        self._capacity = asyncio.Semaphore(config.max_in_flight)
        self._pool = ThreadPoolExecutor(config.threads, thread_name_prefix="wheel-sink")
        self._producer: Any = None
        self._closed = False

    async def start(self) -> None:
        for topic in self.config.topics:
            try:
                route = await asyncio.to_thread(self._routes.route_get, topic)
            except Exception as exc:
                raise SinkUnavailable(f"no route for topic {topic}: {exc}") from None
            count = len(write_queues(route))
            if not count:
                raise SinkUnavailable(f"topic {topic} has no writable queue")
            self._counts[topic] = count
        loop = asyncio.get_running_loop()
        self._producer = await loop.run_in_executor(self._pool, self._start_producer)
        for topic, count in self._counts.items():
            for i in range(count):
                lane = _Lane(topic, i, QueueLedger(topic, i))
                lane.task = asyncio.create_task(self._run_lane(lane), name=f"wheel {topic}/{i}")
                self._lanes[(topic, i)] = lane

    def _start_producer(self) -> Any:
        from rocketmq.client import Producer  # type: ignore[import-untyped]

        producer = Producer(
            self.config.producer_group,
            timeout=self.config.send_timeout_ms,
            max_message_size=4 * 1024 * 1024,
        )
        producer.set_namesrv_addr(self.config.namesrv)
        try:
            producer.start()
        except Exception as exc:
            raise SinkUnavailable(f"the wheel's producer did not start: {exc}") from None
        return producer

    def queue_count(self, topic: str) -> int:
        return self._counts[topic]

    async def submit(self, msg: OutMessage) -> asyncio.Future[int]:
        self._lane_for(msg)
        if not msg.body:
            raise MessageRejected("the wheel's core refuses an empty body")
        if msg.flag or msg.uniq_key:
            raise MessageRejected(
                "the wheel cannot send a message flag or keep a given UNIQ_KEY (use the codec sink)"
            )
        encode_properties(msg)  # the same checks as the codec sink (separators, reserved names)
        await self._capacity.acquire()
        try:
            lane = self._lane_for(msg)
        except SinkError:
            self._capacity.release()
            raise
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda _f: self._capacity.release())
        lane.ledger.add(msg, future)
        lane.wake.set()
        return future

    async def submit_many(self, msgs: Sequence[OutMessage]) -> asyncio.Future[int]:
        return await submit_each(self.submit, msgs)

    def confirmed(self, topic: str, queue_id: int) -> int:
        return self._lanes[(topic, queue_id)].ledger.confirmed

    def confirmed_offset(self, topic: str, queue_id: int) -> int | None:
        return self._lanes[(topic, queue_id)].ledger.confirmed_offset

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = [lane.task for lane in self._lanes.values() if lane.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for lane in self._lanes.values():
            lane.ledger.fail_all(SinkClosed("the sink was closed before confirmation"))
        if self._producer is not None:
            producer, self._producer = self._producer, None
            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(self._pool, producer.shutdown)
        self._pool.shutdown(wait=True)

    def _lane_for(self, msg: OutMessage) -> _Lane:
        if self._closed:
            raise SinkClosed("the sink is closed")
        lane = self._lanes.get((msg.topic, msg.queue_id))
        if lane is None:
            raise MessageRejected(f"no queue {msg.queue_id} in topic {msg.topic} of this sink")
        if lane.failed is not None:
            raise QueueFailed(msg.topic, msg.queue_id, lane.failed)
        return lane

    async def _run_lane(self, lane: _Lane) -> None:
        loop = asyncio.get_running_loop()
        while lane.failed is None:
            if not len(lane.ledger):
                lane.wake.clear()
                await lane.wake.wait()
                continue
            slot = lane.ledger[0]
            try:
                offset = await loop.run_in_executor(self._pool, self._send, slot)
            except SinkError as exc:
                slot.attempts += 1
                if not exc.retriable or slot.attempts >= self.config.max_attempts:
                    log.warning("wheel sink %s queue %d failed: %s", lane.topic, lane.index, exc)
                    lane.failed = exc
                    slot.fail(exc)
                    lane.ledger.fail_all(QueueFailed(lane.topic, lane.index, exc))
                    return
                backoff_ms = self.config.retry_backoff_ms * 2 ** min(slot.attempts - 1, 30)
                await asyncio.sleep(min(backoff_ms, self.config.max_backoff_ms) / 1000)
                continue
            lane.ledger.mark_done(slot, offset)

    def _send(self, slot: Slot) -> int:
        """On a pool thread: one blocking ``send_orderly`` to the slot's queue; the queue
        offset the broker stored it at."""
        from rocketmq.client import Message
        from rocketmq.exceptions import ffi_check  # type: ignore[import-untyped]
        from rocketmq.ffi import dll  # type: ignore[import-untyped]

        msg = slot.msg
        started = time.monotonic()
        try:
            m = Message(msg.topic)
            if msg.keys:
                m.set_keys(msg.keys)
            if msg.tags:
                m.set_tags(msg.tags)
            for name, value in msg.properties.items():
                m.set_property(name, value)
            ffi_check(dll.SetByteMessageBody(m._handle, msg.body, len(msg.body)))
            result = self._producer.send_orderly(m, msg.queue_id, retry_times=1)
        except Exception as exc:
            raise SinkUnavailable(
                f"the wheel's send failed after {time.monotonic() - started:.3f} s: {exc}"
            ) from None
        status = int(result.status)
        if status != 0:
            raise SendFailed(STATUS_CODES.get(status, 1), f"SendStatus {status}")
        return int(result.offset)
