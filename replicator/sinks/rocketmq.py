"""The RocketMQ sink: an asyncio producer on the project's remoting codec.

(A little over 500 lines: one producer's lanes, batches, answers and resends, which share
the lane state.)

Routes come from metaledger (``nameserver.client`` ``route_get``; fetched at start, every
``route_refresh_ms`` and before a resend that followed a route-type failure). A topic's write
queues are numbered as RocketMQ clients number them (see :mod:`replicator.sinks.base`); each
is a *lane* sent to its broker group's master (broker id 0) with SEND_MESSAGE_V2 (code 310),
the V1 header fields renamed ``a``..``n`` (RocketMQ 4.9's
``SendMessageRequestHeaderV2.java``): producerGroup, topic, defaultTopic ``TBW102``,
defaultTopicQueueNums, queueId, sysFlag 0 (bodies are never compressed: they are stored as
given), bornTimestamp, flag (the message's), properties (KEYS, TAGS, the message's own,
UNIQ_KEY: the message's ``uniq_key`` or one made here, WAIT=true; ``k 0x01 v 0x02``),
reconsumeTimes 0, unitMode false, batch false, brokerName.

Confirmation (RocketMQ 5's ``SendMessageProcessor``): only PUT_OK (0) confirms. FLUSH_DISK_TIMEOUT,
SLAVE_NOT_AVAILABLE and FLUSH_SLAVE_TIMEOUT mean "stored on the master only" and SYSTEM_ERROR
"in-sync replicas not enough" means "not stored": none is a confirmation. A confirmed message's
future resolves with its destination queue offset: the answer's ``queueOffset`` (a batch's
answer names its first message's; the broker stores a batch as one unit, so its messages take
consecutive offsets from there: RocketMQ 5's ``CommitLog.putMessages``, broker/core.py
``put_batch``).
A PUT_OK without a ``queueOffset`` fails the lane (a broker this sink cannot use).

Order and batching. A broker may store the requests of one connection in any order (the
metaledger broker serves each request in its own task, and one for a topic it has not loaded
yet waits for its route; RocketMQ 5's Java broker runs up to 4 send threads), so by default a
queue (a *lane*) has one request outstanding (``max_in_flight_per_queue`` = 1), and throughput
comes from batching and from the lanes: while a lane's request is out, the messages submitted
to it queue up and leave together in its next request, SEND_BATCH_MESSAGE (320, the same header
with ``batch``; the body in the store's batch encoding, each message with its own properties),
which the broker stores in order as one unit; many lanes are in flight at once on a few shared
connections (lane ``i`` uses connection ``i % connections_per_broker`` of its master), answers
matched by opaque. A lone message goes as SEND_MESSAGE_V2. With a broker that keeps a
connection's order, ``max_in_flight_per_queue`` > 1 pipelines a lane too; confirmation stays
correct either way (below), only the stored order depends on the broker.

Retries. When a send fails with a retriable error (errors.RETRIABLE_CODES, a lost connection, a
timeout) the lane *rewinds*: the failed message and every later one of the lane go back to
unsent (their outstanding answers are ignored), the lane waits until those answers are in (or
the connection that carried them is gone), then after a backoff (``retry_backoff_ms`` doubling
per attempt of that message, at most ``max_backoff_ms``) resends them in order, so the broker's
log ends with a complete, ordered run of the lane's unconfirmed messages. A later message is
never confirmed before an earlier one, and a message is confirmed only by a PUT_OK of its own
latest attempt. Copies written before a rewind are duplicates with the same
UNIQ_KEY (consumers drop them by it, or by the REDIS_* offsets). After ``max_attempts`` failed
sends of one message, or a non-retriable answer, the lane fails for good: every unconfirmed
message of it fails (the first with the cause, the rest with QueueFailed) and later submits to
it raise QueueFailed; the replicator restarts from its checkpoint. A send that times out
aborts its connection, so the resend dials anew instead of queueing behind a stream stuck in
a partition (TCP backs its retransmissions off to tens of seconds), and ``close`` aborts
every connection: neither leaves the kernel a request to deliver after the partition heals
(tests/faults/net/test_replicator_partitions.py found both).

Bounded: ``submit`` waits while ``max_in_flight`` messages are unconfirmed (all lanes).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from nameserver.client import ClientError, NotFound
from replicator.sinks.base import Confirmation, OutMessage, QueueLedger, Slot, wire_properties
from replicator.sinks.capacity import Capacity
from replicator.sinks.errors import (
    ROUTE_CODES,
    MessageRejected,
    QueueFailed,
    SendFailed,
    SinkClosed,
    SinkError,
    SinkUnavailable,
)
from replicator.sinks.routes import RouteSource, WriteQueue, write_queues
from replicator.sinks.wire import WAIT_ONLY, encode_batch, props_bytes
from rmq.batch import ITEM_OVERHEAD, fits_batch
from rmq.codec import RemotingCommand
from rmq.connection import AnswerTimeout, ConnectionFailure, RemotingConnection
from rmq.headers import DEFAULT_TOPIC, SendMessageHeader
from rmq.msgid import uniq_key

__all__ = ["RocketMQSink", "RocketMQSinkConfig"]

log = logging.getLogger(__name__)

PUT_OK: Final = 0


@dataclass(frozen=True)
class RocketMQSinkConfig:
    topics: tuple[str, ...]  # learnt at start; more with ``RocketMQSink.add_topic``
    producer_group: str = "metaledger-replicator"
    max_in_flight: int = 4096
    max_in_flight_per_queue: int = 1
    #: 1024, not 256: one request per queue is out at a time, so a queue moves at most
    #: this many messages per broker round trip (4 queues x 256 / ~60 ms under a loaded
    #: broker was ~17k/s: lag grew at 20k writes/s; bench/results/redis_replicate-*)
    max_batch_messages: int = 1024
    max_batch_bytes: int = 1024 * 1024
    connections_per_broker: int = 2
    send_timeout_ms: int = 10_000
    connect_timeout_ms: int = 3_000
    max_attempts: int = 5
    retry_backoff_ms: int = 100
    max_backoff_ms: int = 2_000
    route_refresh_ms: int = 30_000
    #: bodies over this are refused at submit (RocketMQ's maxMessageSize, 4 MiB by default,
    #: which the broker answers with MESSAGE_ILLEGAL: better said before the queue fails)
    max_message_bytes: int = 4 * 1024 * 1024

    def validate(self) -> None:
        # no topics is fine: ``add_topic`` adds them at run time
        for name in (
            "max_in_flight",
            "max_in_flight_per_queue",
            "max_batch_messages",
            "max_batch_bytes",
            "connections_per_broker",
            "send_timeout_ms",
            "connect_timeout_ms",
            "max_attempts",
            "route_refresh_ms",
            "max_message_bytes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")
        for name in ("retry_backoff_ms", "max_backoff_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")


@dataclass(eq=False)
class _Lane:
    topic: str
    index: int
    ledger: QueueLedger
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    next_send: int = 0  # ledger index of the first slot not sent in the current run
    in_flight: int = 0  # sent in the current run, unanswered
    stale: set[int] = field(default_factory=set)  # tokens of rewound sends still unanswered
    retry_at: float = 0.0
    refresh_route: bool = False
    #: ledger slots below this index go one per request (isolating a refused message)
    solo_until: int = 0
    failed: SinkError | None = None
    task: asyncio.Task[None] | None = None


class RocketMQSink:
    """:class:`~replicator.sinks.base.Sink` over SEND_MESSAGE_V2 (see the module docstring)."""

    def __init__(self, config: RocketMQSinkConfig, routes: RouteSource) -> None:
        config.validate()
        self.config = config
        self._routes_source = routes
        self._routes: dict[str, list[WriteQueue]] = {}
        self._counts: dict[str, int] = {}
        self._lanes: dict[tuple[str, int], _Lane] = {}
        self._conns: dict[tuple[str, int], RemotingConnection] = {}
        self._connecting: dict[tuple[str, int], asyncio.Future[RemotingConnection]] = {}
        self._capacity = Capacity(config.max_in_flight)
        self._tokens = itertools.count(1)
        self._closed = False
        self._refresher: asyncio.Task[None] | None = None
        self.resends = 0  # messages sent again after a rewind (for status and tests)

    # --- Sink surface ----------------------------------------------------------------

    async def start(self) -> None:
        for topic in self.config.topics:
            await self.add_topic(topic)
        self._refresher = asyncio.create_task(self._refresh_routes(), name="sink routes")

    @property
    def topics(self) -> list[str]:
        """The topics this sink has lanes for (started with, or added)."""
        return sorted(self._counts)

    async def add_topic(self, topic: str) -> None:
        """Learn ``topic``'s route and make a lane per write queue (a topic found at run time).
        Called again for a known topic: lanes for the queues added since (``queue_count``
        follows the route; lanes of queues that went away stay and fail their sends).
        SinkUnavailable when the topic has no route or no writable queue."""
        if self._closed:
            raise SinkClosed("the sink is closed")
        queues = await self._fetch_route(topic)
        if not queues:
            raise SinkUnavailable(f"topic {topic} has no writable queue")
        if self._closed:
            raise SinkClosed("the sink is closed")
        self._routes[topic] = queues
        self._counts[topic] = len(queues)
        for i in range(len(queues)):
            if (topic, i) not in self._lanes:
                lane = _Lane(topic, i, QueueLedger(topic, i))
                lane.task = asyncio.create_task(self._run_lane(lane), name=f"sink {topic}/{i}")
                self._lanes[(topic, i)] = lane

    def queue_count(self, topic: str) -> int:
        return self._counts[topic]

    async def submit(self, msg: OutMessage) -> asyncio.Future[int]:
        lane = self._lane_for(msg)
        wire = self._wire(msg)
        capacity = self._capacity
        if not capacity.try_take():
            await capacity.take()
            try:
                lane = self._lane_for(msg)  # closed or failed while we waited?
            except SinkError:
                capacity.give(1)
                raise
        # the unit goes back when the slot leaves its ledger (confirmed or failed)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        slot = lane.ledger.add(msg, future)
        slot.wire = wire
        lane.wake.set()
        return future

    async def submit_many(self, msgs: Sequence[OutMessage]) -> asyncio.Future[int]:
        """``submit`` each, one future for all (:meth:`Sink.submit_many`): every message is
        checked and encoded before any is queued, and no future or callback is made per
        message (a slot of the lane's ledger is: answers and resends stay per message)."""
        lane_of = [self._lane_for(msg) for msg in msgs]
        wires = [self._wire(msg) for msg in msgs]
        group = Confirmation(asyncio.get_running_loop().create_future(), len(msgs))
        capacity = self._capacity
        touched: set[_Lane] = set()
        try:
            for msg, lane, wire in zip(msgs, lane_of, wires, strict=True):
                if not capacity.try_take():
                    for t in touched:
                        t.wake.set()  # what is queued must go before capacity comes back
                    await capacity.take()
                    try:
                        lane = self._lane_for(msg)
                    except SinkError:
                        capacity.give(1)
                        raise
                elif lane.failed is not None or self._closed:
                    lane = self._lane_for(msg)  # raises why
                lane.ledger.add(msg, None, group).wire = wire
                touched.add(lane)
        except BaseException:
            group.future.cancel()  # nobody holds it: the queued ones confirm into nothing
            raise
        finally:
            for t in touched:
                t.wake.set()
        return group.future

    def _wire(self, msg: OutMessage) -> bytes:
        """The message's properties as sent (UNIQ_KEY: its own or a new one; WAIT=true);
        MessageRejected for a body over ``max_message_bytes`` or a bad property."""
        if len(msg.body) > self.config.max_message_bytes:
            raise MessageRejected(
                f"a body of {len(msg.body)} bytes is over the {self.config.max_message_bytes}-byte"
                " limit (max_message_bytes)"
            )
        return wire_properties(msg, msg.uniq_key or uniq_key())

    def confirmed(self, topic: str, queue_id: int) -> int:
        return self._lanes[(topic, queue_id)].ledger.confirmed

    def confirmed_offset(self, topic: str, queue_id: int) -> int | None:
        return self._lanes[(topic, queue_id)].ledger.confirmed_offset

    def unconfirmed(self) -> int:
        return sum(len(lane.ledger) for lane in self._lanes.values())

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = [lane.task for lane in self._lanes.values() if lane.task is not None]
        if self._refresher is not None:
            tasks.append(self._refresher)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for lane in self._lanes.values():
            failed = lane.ledger.fail_all(SinkClosed("the sink was closed before confirmation"))
            self._capacity.give(len(failed))
        for conn in self._conns.values():
            # abort, not close: nothing written may reach the broker later (the messages are
            # failed, and a replicator that closes its sink may have lost its lease)
            conn.abort()
        self._conns.clear()

    def _drop(self, conn: RemotingConnection) -> None:
        """Abort ``conn`` (its requests fail: their lanes rewind) and dial anew next time."""
        for key, c in list(self._conns.items()):
            if c is conn:
                del self._conns[key]
        conn.abort()

    # --- lanes -----------------------------------------------------------------------

    def _lane_for(self, msg: OutMessage) -> _Lane:
        if self._closed:
            raise SinkClosed("the sink is closed")
        lane = self._lanes.get((msg.topic, msg.queue_id))
        if lane is None:
            count = self._counts.get(msg.topic)
            raise MessageRejected(
                f"no queue {msg.queue_id} in topic {msg.topic}"
                + (f" (it has {count})" if count is not None else " (not a topic of this sink)")
            )
        if lane.failed is not None:
            raise QueueFailed(msg.topic, msg.queue_id, lane.failed)
        return lane

    async def _run_lane(self, lane: _Lane) -> None:
        limit = self.config.max_in_flight_per_queue
        while lane.failed is None:
            lane.wake.clear()
            now = time.monotonic()
            idle = lane.next_send >= len(lane.ledger) or lane.in_flight >= limit or bool(lane.stale)
            if idle or now < lane.retry_at:
                timeout = None if idle else lane.retry_at - now
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await lane.wake.wait()
                continue
            try:
                if lane.refresh_route:
                    await self._refresh(lane.topic)
                    lane.refresh_route = False
                target, conn = await self._target(lane)
            except SinkError as exc:
                if lane.next_send < len(lane.ledger) and not lane.stale:
                    self._on_failure(lane, lane.ledger[lane.next_send], exc)
                continue
            if lane.stale or time.monotonic() < lane.retry_at:
                continue  # a failure came in while we connected: wait for it first
            while lane.next_send < len(lane.ledger) and lane.in_flight < limit:
                slots = self._take_batch(lane)
                token = next(self._tokens)
                for slot in slots:
                    slot.token = token
                lane.in_flight += 1
                conn.send(
                    self._request(slots, target, self._counts[lane.topic]),
                    functools.partial(self._answered, lane, slots, token, conn),
                    self.config.send_timeout_ms / 1000,
                )

    def _take_batch(self, lane: _Lane) -> list[Slot]:
        """The next slots to send in one request: up to ``max_batch_messages`` and
        ``max_batch_bytes``; a message over the byte limit, or whose properties are too long
        for a batch item, goes alone (as SEND_MESSAGE_V2)."""
        ledger, start = lane.ledger, lane.next_send
        limit = 1 if start < lane.solo_until else self.config.max_batch_messages
        end = min(len(ledger), start + limit)
        max_bytes = self.config.max_batch_bytes
        slots: list[Slot] = []
        size = 0
        for i in range(start, end):
            slot = ledger[i]
            wire = props_bytes(slot)
            item = ITEM_OVERHEAD + len(slot.msg.body) + len(wire)
            alone = not fits_batch(wire)  # its length is an int16 in a batch item
            if slots and (alone or size + item > max_bytes):
                break
            slots.append(slot)
            size += item
            if alone:
                break
        lane.next_send = start + len(slots)
        return slots

    def _request(self, slots: list[Slot], target: WriteQueue, queue_nums: int) -> RemotingCommand:
        """SEND_MESSAGE_V2 for one message; SEND_BATCH_MESSAGE (320, the same header with
        ``batch``) for several, the body holding each in the store's batch encoding."""
        first = slots[0]
        batch = len(slots) > 1
        return SendMessageHeader(
            producer_group=self.config.producer_group,
            topic=first.msg.topic,
            default_topic=DEFAULT_TOPIC,
            default_topic_queue_nums=queue_nums,
            queue_id=target.queue_id,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=0 if batch else first.msg.flag,
            properties=WAIT_ONLY if batch else props_bytes(first).decode(),
            reconsume_times=0,
            unit_mode=False,
            batch=batch,
            broker_name=target.broker_name,
        ).request_v2(encode_batch(slots) if batch else first.msg.body, language="PYTHON")

    def _answered(
        self,
        lane: _Lane,
        slots: list[Slot],
        token: int,
        conn: RemotingConnection,
        answer: RemotingCommand | None,
        exc: BaseException | None,
    ) -> None:
        if isinstance(exc, AnswerTimeout):
            # the stream may be stuck behind a partition (TCP backs its retransmissions off
            # to tens of seconds): resends go on a new connection, and what this one still
            # holds is dropped instead of landing whenever the stream moves again
            self._drop(conn)
        if token in lane.stale:
            lane.stale.discard(token)
            if not lane.stale:
                lane.wake.set()
            return
        first = slots[0]
        if first.token != token or lane.failed is not None or self._closed:
            return
        lane.in_flight -= 1
        for slot in slots:
            slot.token = None
        lane.wake.set()
        if answer is not None and answer.code == PUT_OK:
            first_offset = _queue_offset(answer)
            if first_offset is None:
                where = f"{lane.topic} queue {lane.index}"
                self._fail_lane(lane, first, SendFailed(0, "PUT_OK without a queueOffset", where))
                return
            confirmed = lane.ledger.mark_run_done(slots, first_offset)
            lane.next_send -= confirmed
            lane.solo_until = max(0, lane.solo_until - confirmed)
            self._capacity.give(confirmed)
            return
        if answer is not None:
            error: SinkError = SendFailed(
                answer.code, answer.remark, f"{lane.topic} queue {lane.index}"
            )
            if answer.code in ROUTE_CODES:
                lane.refresh_route = True
        elif isinstance(exc, ConnectionFailure):  # no answer: connection lost, timed out
            error = SinkUnavailable(str(exc))
            lane.refresh_route = True
        elif isinstance(exc, SinkError):
            error = exc
            lane.refresh_route = True
        else:
            error = SinkUnavailable(f"send failed: {exc!r}")
        if not error.retriable and len(slots) > 1:
            # a batch refused for good: send its messages one by one to find the one the
            # broker refuses (it alone fails the lane, and a dismiss policy names it)
            index = lane.ledger.index(first)
            lane.solo_until = max(lane.solo_until, index + len(slots))
            self._rewind(lane, index)
            return
        self._on_failure(lane, first, error)

    def _on_failure(self, lane: _Lane, slot: Slot, error: SinkError) -> None:
        """Rewind the lane to ``slot`` (or fail it for good)."""
        slot.attempts += 1
        index = lane.ledger.index(slot)
        if not error.retriable or slot.attempts >= self.config.max_attempts:
            self._fail_lane(lane, slot, error)
            return
        log.info(
            "sink %s queue %d: %s (attempt %d of %d): resending from there",
            lane.topic,
            lane.index,
            error,
            slot.attempts,
            self.config.max_attempts,
        )
        self._rewind(lane, index)
        backoff_ms = min(
            self.config.retry_backoff_ms * 2 ** min(slot.attempts - 1, 30),
            self.config.max_backoff_ms,
        )
        lane.retry_at = time.monotonic() + backoff_ms / 1000
        lane.wake.set()

    def _rewind(self, lane: _Lane, index: int) -> None:
        """Make the lane's slots from ``index`` on unsent again (answers still out for them
        are ignored when they come)."""
        outstanding: set[int] = set()
        for i in range(index, lane.next_send):
            later = lane.ledger[i]
            if later.token is not None:
                outstanding.add(later.token)
                later.token = None
            later.done = False
        lane.stale |= outstanding
        lane.in_flight -= len(outstanding)
        self.resends += lane.next_send - index
        lane.next_send = index
        lane.wake.set()

    def _fail_lane(self, lane: _Lane, slot: Slot, error: SinkError) -> None:
        log.warning("sink %s queue %d failed for good: %s", lane.topic, lane.index, error)
        lane.failed = error
        slot.fail(error)
        self._capacity.give(len(lane.ledger.fail_all(QueueFailed(lane.topic, lane.index, error))))
        lane.wake.set()

    # --- routes and connections -------------------------------------------------------

    async def _fetch_route(self, topic: str) -> list[WriteQueue]:
        try:
            route = await asyncio.to_thread(self._routes_source.route_get, topic)
        except NotFound:
            raise SinkUnavailable(f"no route for topic {topic} in metaledger") from None
        except ClientError as exc:
            raise SinkUnavailable(f"route of {topic}: {exc}") from None
        return write_queues(route)

    async def _refresh(self, topic: str) -> None:
        self._routes[topic] = await self._fetch_route(topic)

    async def _refresh_routes(self) -> None:
        while True:
            await asyncio.sleep(self.config.route_refresh_ms / 1000)
            for topic in list(self._routes):
                try:
                    await self._refresh(topic)
                except SinkError as exc:
                    log.warning("route refresh of %s failed (kept the old one): %s", topic, exc)

    async def _target(self, lane: _Lane) -> tuple[WriteQueue, RemotingConnection]:
        queues = self._routes[lane.topic]
        if lane.index >= len(queues):
            raise SinkUnavailable(f"{lane.topic} has {len(queues)} write queues now")
        target = queues[lane.index]
        if target.master is None:
            raise SinkUnavailable(f"broker group {target.broker_name} has no master")
        key = (target.master, lane.index % self.config.connections_per_broker)
        conn = self._conns.get(key)
        if conn is not None and conn.usable:
            return target, conn
        pending = self._connecting.get(key)
        if pending is None:
            pending = asyncio.ensure_future(_open(target.master, self.config.connect_timeout_ms))
            self._connecting[key] = pending
            try:
                self._conns[key] = await pending
            finally:
                del self._connecting[key]
            return target, self._conns[key]
        return target, await asyncio.shield(pending)


async def _open(address: str, timeout_ms: int) -> RemotingConnection:
    try:
        return await RemotingConnection.open(address, timeout_ms / 1000)
    except ConnectionFailure as exc:
        raise SinkUnavailable(str(exc)) from None


def _queue_offset(answer: RemotingCommand) -> int | None:
    """A send answer's ``queueOffset`` (a string, as RocketMQ's SendMessageResponseHeader
    sends it), or None when absent or not a number."""
    text = answer.ext_fields.get("queueOffset")
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
