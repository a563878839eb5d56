"""The source connector's unit of work: one source queue this worker holds the claim of,
pulled from the source cluster and sent to the destination, committed only up to what the
destination acknowledged (docs/rocketmq-replicator.md, "At least once, and what stops the
commit").

A :class:`QueueReplication` pulls in offset order and hands each message to the sink; the
sink's future resolves with the destination queue offset of the stored copy, in any order
across destination queues. The :class:`~replicator.rocketmq.watermark.QueueWatermark` turns
those acks into the contiguous low watermark, which is what the worker commits (fenced) with
the offset-syncs of the acks: ``(source offset, destination offset)`` per destination queue,
the checkpoint connector's translation table (MirrorMaker 2's offset-syncs, kept in the
commit record itself so a sync never outlives or precedes its commit).

What a message becomes at the destination: the same body bytes (never decoded), tags, keys,
flag, message id (UNIQ_KEY) and user properties; ``ROCKETMQ_REPLICATOR_SOURCE`` gains the
source cluster's name. A message whose list already holds the destination cluster's name is
not sent (loop prevention, exact names) and counts as done. Properties that describe the
source broker's storage of the message (:data:`DROPPED`) are not copied.

Failure. A message the sink could not store (after its own retries) fails its future with
the cause; without a dismiss policy the watermark stays below it and the worker restarts the
pass (the sink) from the committed offsets after a backoff; with ``dismiss=log`` it is
counted, logged and reported as dismissed, then passed. A source queue whose committed
offset the source no longer has (retention) resumes at the source's earliest offset and
raises the ``offset_lost`` alarm, or stops (``on_offset_lost=stop``): never a silent skip.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from replicator.lease import Fence
from replicator.rocketmq.checkpoint import QueueCheckpoint
from replicator.rocketmq.client import ClusterClient, ReadQueue
from replicator.rocketmq.config import RocketMQReplicatorConfig, dest_queue
from replicator.rocketmq.watermark import QueueWatermark
from replicator.rocketmq.wire import SOURCE_PROPERTY, PullStatus, parse_sources
from replicator.rocketmq.wire import with_source as add_source
from replicator.sinks.base import OutMessage, Sink
from replicator.sinks.errors import QueueFailed, SinkClosed, SinkError
from rmq.message import StoredMessage

__all__ = ["DROPPED", "QueueReplication", "RateLimiter"]

log = logging.getLogger(__name__)

#: properties set by the sink from OutMessage fields, or describing the source's storage
DROPPED: Final = frozenset(
    {"KEYS", "TAGS", "UNIQ_KEY", "WAIT", "DELAY", "MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME"}
)
#: long-poll time of a pull that finds nothing new (the broker holds it that long)
PULL_SUSPEND_MS: Final = 5_000


class RateLimiter:
    """A token bucket over the whole worker: ``rate`` messages per second, bursts of at most
    a tenth of a second's worth (so a one-second window holds the rate within a few %)."""

    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.rate = rate
        self.burst = max(1.0, rate / 10)
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.burst
        self._at = clock()

    async def take(self) -> None:
        if self.rate <= 0:
            return
        while True:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens >= 1 - 1e-9:  # (a float's rounding must not leave it at 0.99…)
                self._tokens -= 1
                return
            await self._sleep((1 - self._tokens) / self.rate)


@dataclass
class Counters:
    """Per source queue, since this worker took it."""

    sent: int = 0
    acked: int = 0
    looped: int = 0
    dismissed: int = 0
    offset_lost: int = 0
    last_error: str = ""


@dataclass
class QueueReplication:
    queue: ReadQueue
    index: int  # the queue's place among the topic's read queues (the ``same`` mapping)
    dest_topic: str
    fence: Fence
    checkpoint: QueueCheckpoint
    heartbeat: bool = False  # the heartbeat topic: counted apart from user topics
    mapping: str = "same"  # how messages pick their destination queue (config.dest_queue)
    watermark: QueueWatermark = field(init=False)
    counters: Counters = field(default_factory=Counters)
    #: newest acked (source offset, dest offset) per dest queue, not yet in the checkpoint
    syncs: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: older acks kept for the sync history (one each ``offset_sync_every`` offsets)
    marks: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    last_mark: dict[int, int] = field(default_factory=dict)
    max_offset: int = 0  # the source queue's end, from the last pull answer
    #: store timestamp (ms) of each in-flight message, for the lag in seconds
    stamps: dict[int, int] = field(default_factory=dict)
    alarms: list[str] = field(default_factory=list)
    stopped: str = ""  # why the queue stopped for good ("" = running)
    next_pull: int = 0
    dismissed_total: int = 0
    task: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        self.watermark = QueueWatermark(self.checkpoint.next_offset)
        self.next_pull = self.checkpoint.next_offset
        self.dismissed_total = self.checkpoint.dismissed

    @property
    def partition(self) -> str:
        return self.queue.partition

    # --- the pull loop ------------------------------------------------------------------

    async def run(
        self,
        config: RocketMQReplicatorConfig,
        source: ClusterClient,
        sink: Sink,
        limiter: RateLimiter,
        check: Callable[[], None],
        failed: Callable[[str], None],
    ) -> None:
        """Pull and send until cancelled. ``check`` raises when this worker lost its lease
        (before every send); ``failed(reason)`` asks the worker to restart the pass."""
        offset = self.watermark.committable
        source_cluster, dest_cluster = config.trail_names
        while True:
            result = await source.pull(
                self.queue, offset, config.pull_batch, suspend_ms=PULL_SUSPEND_MS
            )
            self.max_offset = max(self.max_offset, result.max_offset)
            if result.status is PullStatus.OFFSET_ILLEGAL:
                if self.watermark.in_flight:
                    # first let what was sent settle (moving needs nothing in flight)
                    await asyncio.sleep(0.1)
                    continue
                offset = self._offset_lost(config, offset, result.min_offset, result.next_offset)
                if self.stopped:
                    return
                continue
            if result.status is not PullStatus.FOUND:
                if result.next_offset > self.watermark.next_offset:
                    # nothing there for us (filtered out): those offsets need no ack
                    self.watermark.advance(result.next_offset)
                offset = max(offset, result.next_offset)
                self.next_pull = offset
                continue
            n_dest = sink.queue_count(self.dest_topic)
            same = self.mapping == "same"
            dq = self.index % n_dest
            limited = limiter.rate > 0
            for m in result.messages:
                if m.queue_offset < self.watermark.next_offset:
                    continue  # already had it (a broker answering from an earlier offset)
                self.watermark.pulled(m.queue_offset)
                trail = m.properties.get(SOURCE_PROPERTY)
                if trail and dest_cluster in parse_sources(trail):
                    self.counters.looped += 1
                    self.watermark.acked(m.queue_offset)
                    continue
                if limited:
                    await limiter.take()
                check()
                if not same:
                    dq = dest_queue(self.mapping, self.index, m.keys, m.msg_id, n_dest)
                out = self._out(m, dq, source_cluster)
                try:
                    future = await sink.submit(out)
                except SinkError as exc:
                    if self._failure(config, m.queue_offset, exc):
                        continue
                    failed(f"{self.partition}: {exc}")
                    return
                self.counters.sent += 1
                self.stamps[m.queue_offset] = m.store_timestamp
                future.add_done_callback(self._done_callback(config, m.queue_offset, dq, failed))
            offset = max(offset, result.next_offset)
            self.next_pull = offset

    def _out(self, m: StoredMessage, dq: int, source_cluster: str) -> OutMessage:
        props = {k: v for k, v in m.properties.items() if k not in DROPPED}
        props[SOURCE_PROPERTY] = add_source(m.properties.get(SOURCE_PROPERTY), source_cluster)
        return OutMessage(
            topic=self.dest_topic,
            queue_id=dq,
            body=m.body,
            tags=m.tags,
            keys=m.keys,
            properties=props,
            offset=m.queue_offset,
            uniq_key=m.msg_id,
            flag=m.flag,
        )

    def _done_callback(
        self,
        config: RocketMQReplicatorConfig,
        offset: int,
        dq: int,
        failed: Callable[[str], None],
    ) -> Callable[[asyncio.Future[int]], None]:
        def done(future: asyncio.Future[int]) -> None:
            self.stamps.pop(offset, None)
            if future.cancelled():
                return
            exc = future.exception()
            if exc is None:
                self.watermark.acked(offset)
                self.counters.acked += 1
                self._sync(dq, offset, future.result(), config.offset_sync_every)
                return
            if isinstance(exc, SinkClosed):
                return  # shutdown: sent again by the next pass or worker
            if isinstance(exc, QueueFailed):
                # behind a message that failed the lane for good: the lane takes nothing
                # more, so the pass restarts (from the watermark) even when that message
                # was dismissed
                failed(f"{self.partition} offset {offset}: {exc}")
                return
            if not self._failure(config, offset, exc):
                failed(f"{self.partition} offset {offset}: {exc}")

        return done

    def _sync(self, dq: int, offset: int, dest_offset: int, every: int) -> None:
        """Keep the newest ack per destination queue, and every ``every`` source offsets
        one more for the history (MirrorMaker 2's ``offset.lag.max``)."""
        newest = self.syncs.get(dq)
        if newest is not None and newest[1] >= dest_offset:
            return
        self.syncs[dq] = (offset, dest_offset)
        marks = self.marks.setdefault(dq, [])
        last = marks[-1][0] if marks else self.last_mark.get(dq, -every)
        if offset - last >= every:
            marks.append((offset, dest_offset))
            self.last_mark[dq] = offset

    def _failure(self, config: RocketMQReplicatorConfig, offset: int, exc: BaseException) -> bool:
        """Count a message the destination did not store; True when it was dismissed."""
        self.counters.last_error = f"offset {offset}: {exc}"
        if config.dismiss == "log" and not isinstance(exc, (QueueFailed, SinkClosed)):
            self.watermark.dismissed(offset)
            self.counters.dismissed += 1
            self.dismissed_total += 1
            log.error(
                "%s: dismissed the message at offset %d (dismiss=log): %s",
                self.partition,
                offset,
                exc,
            )
            return True
        log.warning("%s: the destination did not store offset %d: %s", self.partition, offset, exc)
        return False

    def _offset_lost(
        self, config: RocketMQReplicatorConfig, offset: int, min_offset: int, next_offset: int
    ) -> int:
        resume = max(min_offset, next_offset)
        text = (
            f"offset_lost: {self.partition}: the source no longer has offset {offset}"
            f" (earliest {min_offset})"
        )
        self.counters.offset_lost += max(0, resume - offset)
        if config.on_offset_lost == "stop":
            self.stopped = text + "; stopped (on_offset_lost=stop)"
            self.alarms.append(self.stopped)
            log.error("%s", self.stopped)
            return offset
        self.alarms.append(text + f"; resumed at {resume} (on_offset_lost=earliest)")
        log.error(
            "ALARM %s; resuming at %d, %d messages were never replicated",
            text,
            resume,
            resume - offset,
        )
        if self.watermark.in_flight == 0:
            self.watermark.moved(resume)
        return resume

    # --- what gets committed and shown -----------------------------------------------

    def next_checkpoint(self) -> QueueCheckpoint | None:
        """The record to commit now, or None when nothing changed since the last one."""
        ckpt = self.checkpoint
        committable = self.watermark.committable
        if (
            committable <= ckpt.next_offset
            and not self.syncs
            and self.dismissed_total == ckpt.dismissed
        ):
            return None
        new = ckpt.copy()
        new.next_offset = max(ckpt.next_offset, committable)
        new.dest_topic = self.dest_topic
        new.dismissed = self.dismissed_total
        for dq, (s, d) in sorted(self.syncs.items()):
            for ms, md in self.marks.get(dq, []):
                new.record_sync(dq, ms, md)
            new.record_sync(dq, s, d)
        return new

    def committed(self, ckpt: QueueCheckpoint) -> None:
        self.checkpoint = ckpt
        self.syncs.clear()
        self.marks.clear()

    def status(self, now_ms: int) -> dict[str, object]:
        committed = self.checkpoint.next_offset
        lag = max(0, self.max_offset - committed)
        oldest = min(self.stamps.values(), default=None)
        return {
            "partition": self.partition,
            "dest_topic": self.dest_topic,
            "pulled_offset": self.next_pull,
            "committed_offset": committed,
            "max_offset": self.max_offset,
            "lag_messages": lag,
            "lag_s": round(max(0, now_ms - oldest) / 1000, 3)
            if oldest is not None and lag
            else 0.0,
            "in_flight": self.watermark.in_flight,
            "sent": self.counters.sent,
            "acked": self.counters.acked,
            "looped": self.counters.looped,
            "dismissed": self.checkpoint.dismissed,
            "heartbeat": self.heartbeat,
            "alarms": list(self.alarms[-3:]),
            "stopped": self.stopped,
        }
