"""PopService: POP consumption in the broker's store, for the remoting and gRPC fronts.

RocketMQ 5 consumers (the gRPC SimpleConsumer/PushConsumer, the 4.9+/5.x remoting POP
consumer) do not keep offsets: they *pop* messages, which become invisible for a while,
and *ack* each by its receipt handle. This is that model, kept in the store of one master:

- **Books** (:mod:`broker.pop.state`, on disk by :mod:`broker.pop.table`): per (group,
  topic, queue) ``low`` (everything below is done), ``next`` (never popped from there on)
  and a 12-byte slot per offset in [low, next) (visible_at_ms, attempt). Memory per queue is
  O(1); a million messages received and not acked cost 12 MB of (sparse) disk and nothing in
  memory but the book's numbers.
- **pop** hands out first the queue's in-flight messages whose invisible time passed
  (attempt + 1, a new handle; the older handle is then refused as stale), then new ones
  from ``next`` (tags filtered: a message whose tag does not match is done for the group
  without delivery, as RocketMQ), all up to the readable limit (the quorum's confirm offset,
  as pulls). A message whose next attempt would pass :meth:`PopService.max_attempts`
  (RocketMQ: the group's retryMaxTimes + 1, default 17) is written to ``%DLQ%<group>``
  through the normal put path (replicated; properties DLQ_ORIGIN_TOPIC,
  DLQ_ORIGIN_MESSAGE_ID, ORIGIN_MESSAGE_ID as RocketMQ's ``MessageConst``) and is done.
- **FIFO** (``fifo=True``, RocketMQ's ``order``): a queue hands out nothing new while any of
  its messages is in flight, and redelivers expired ones in offset order, never one before
  an earlier one of the queue is done; a message group (hashed to one queue by the
  producer) is so consumed in order.
- **ack / change_invisible / forward_to_dlq** take a handle (:mod:`broker.pop.handle`,
  RocketMQ's layout); ``popTime + invisibleTime`` must be the instant the slot holds.
- **Consumer offsets**: a POP group's committed offset of a queue is its ``low``
  (``OffsetStore.commit``), so QUERY_CONSUMER_OFFSET and consumer lag are right for POP
  and gRPC consumers (RocketMQ's dashboard shows -1 for them), and the offset survives a
  failover like any other.
- **Failover**: the books' progress goes to metaledger every second (:mod:`broker.pop.progress`);
  a new master merges it into its books on promotion. After a failover, messages that were
  in flight, and acks of the last second before it, are delivered again; no acked message
  below low is. A restart of the same master keeps every handle's fate (its books are on
  its disk): acked stays acked, in flight stays in flight until its visible_at.
- **Long polling**: a pop with ``wait_ms`` waits for a message in its queues (the pull's
  :class:`broker.state.hold.PullHold`) or the next expiry, until ``wait_ms``.
- Only a master serves POP; a slave refuses with SERVICE_NOT_AVAILABLE, as a 4.x slave
  refuses writes.

A new group starts where RocketMQ's ``PopMessageProcessor.getInitOffset`` starts it
(``PopMessageProcessor.java:909-932``): its committed offset if it has one, else for
``init_mode`` MIN the queue's min offset, for MAX (the default, the gRPC proxy's) 0 in a
young queue (min offset 0) and the last message otherwise.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from dataclasses import dataclass

from broker.core import BrokerCore
from broker.pop.errors import (
    IllegalInvisibleTime,
    IllegalPopRequest,
    InvalidReceiptHandle,
    PopError,
)
from broker.pop.handle import NORMAL_TOPIC, ORDER_REVIVE_QID, Handle, decode
from broker.pop.progress import KvPopProgress
from broker.pop.state import QueueBook, Stale
from broker.pop.table import Key, PopTable
from broker.remoting.errors import NoPermission, ServiceNotAvailable, TopicNotExist
from broker.replication import PutStatus
from broker.state.consumers import parse_expression
from broker.topics import DLQ_PREFIX, TopicConfig
from rmq.message import PHYSICAL_OFFSET_AT, QUEUE_OFFSET_AT, StoredMessage
from rmq.message import decode as decode_message
from rmq.msgid import offset_msg_id

log = logging.getLogger(__name__)
#: RocketMQ's ConsumeInitMode
INIT_MIN, INIT_MAX = 0, 1
MAX_BATCH = 32  # PopMessageProcessor.java:266: "pop message's num is greater than 32"
MAX_INVISIBLE_MS = 24 * 3600 * 1000
#: a long poll looks again at least this long after a pop found nothing (an expiry bound
#: in the past but nothing handed out: a FIFO queue waiting for an earlier message)
MIN_RECHECK_S = 0.05
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Popped:
    message: StoredMessage  # as stored (topic = the real topic); reconsume_times = attempt - 1
    handle: str  # receipt handle
    attempt: int  # 1 on first delivery
    visible_at_ms: int  # when it becomes visible again if not acked
    raw: bytes = b""  # the record as a pull sends it (re-encoded when attempt > 1)


class PopService:
    def __init__(
        self,
        core: BrokerCore,
        root: str,
        broker_name: str,
        progress: KvPopProgress | None = None,
    ) -> None:
        self.core = core
        self.table = PopTable(root)
        self.broker_name = broker_name
        self.progress = progress
        self._locks: dict[Key, asyncio.Lock] = {}
        self._max_attempts: dict[str, int] = {}

    # ------------------------------------------------------------------ settings
    def max_attempts(self, group: str) -> int:
        """Deliveries before a message goes to ``%DLQ%<group>``: the group's own setting
        (:meth:`set_max_attempts`), else the broker's retry_max_times + 1 (RocketMQ: the
        subscription group's retryMaxTimes + 1, 17 by default)."""
        return self._max_attempts.get(group, self.core.config.retry_max_times + 1)

    def set_max_attempts(self, group: str, attempts: int) -> None:
        if not 1 <= attempts <= 0xFFFF:
            raise IllegalPopRequest(f"max attempts of group {group}: {attempts} is not 1..65535")
        self._max_attempts[group] = attempts

    # ------------------------------------------------------------------ pop
    async def pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_messages: int,
        invisible_ms: int,
        *,
        fifo: bool = False,
        expression: str = "*",
        wait_ms: int = 0,
        init_mode: int = INIT_MAX,
    ) -> list[Popped]:
        """Up to ``max_messages`` messages of the queue (``queue_id`` -1: every readable
        queue), invisible for ``invisible_ms``; waits up to ``wait_ms`` for one."""
        self._serving()
        _check_invisible(invisible_ms)
        if not 1 <= max_messages <= MAX_BATCH:
            raise IllegalPopRequest(f"max messages {max_messages} is not 1..{MAX_BATCH}")
        config = await self._topic(topic)
        n = config.read_queue_nums
        if queue_id == -1:
            start = random.randrange(n) if n else 0
            queues = [(start + i) % n for i in range(n)]
        elif 0 <= queue_id < n:
            queues = [queue_id]
        else:
            raise IllegalPopRequest(
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{n}]"
            )
        tags = parse_expression(topic, expression).tags
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(wait_ms, 0) / 1000
        while True:
            out: list[Popped] = []
            pop_time = now_ms()  # one instant per answer: a remoting client needs it so
            for q in queues:
                if len(out) >= max_messages:
                    break
                key = (group, topic, q)
                async with self._lock(key):
                    book = await self._book(key, init_mode)
                    out += await self._pop_queue(
                        key, book, max_messages - len(out), pop_time, invisible_ms, fifo, tags
                    )
            remaining = deadline - loop.time()
            if out or remaining <= 0:
                return out
            # a new message in one of the queues, or the next expiry, or 1 s (readable limit)
            expiry = min(self._until_expiry(group, topic, q) for q in queues)
            wake = min(remaining, 1.0, max(expiry, MIN_RECHECK_S))  # FIFO may wait on a bound
            await self.core.hold.wait_any([(topic, q) for q in queues], wake)

    def _until_expiry(self, group: str, topic: str, queue_id: int) -> float:
        book = self.table.books.get((group, topic, queue_id))
        if book is None or not book.inflight:
            return 1.0
        return max(0.0, (book.earliest - now_ms()) / 1000)

    async def _pop_queue(
        self,
        key: Key,
        book: QueueBook,
        limit: int,
        pop_time: int,
        invisible_ms: int,
        fifo: bool,
        tags: frozenset[str] | None,
    ) -> list[Popped]:
        group, topic, queue_id = key
        visible_at = pop_time + invisible_ms
        out: list[Popped] = []
        start = -1
        expired = book.expired(pop_time, limit, fifo)
        try:
            for offset, attempt in expired:
                m = await self._read(topic, queue_id, offset)
                if m is None:  # gone (retention): nothing to deliver
                    book.done(offset)
                elif attempt + 1 > self.max_attempts(group):
                    await self._dead_letter(group, key, book, m, attempt)
                else:
                    new_attempt = book.redeliver(offset, attempt, visible_at)
                    if new_attempt is not None:
                        start = offset if start < 0 else start
                        out.append(
                            self._popped(m, start, invisible_ms, fifo, new_attempt, book, offset)
                        )
        except BaseException:
            book.retry_later(pop_time)
            raise
        if len(out) >= limit or (fifo and book.inflight):
            self._committed(key, book)
            return out
        got = await self.core.run(
            self.core.store.get, topic, queue_id, book.next, limit - len(out), set(tags or ())
        )
        if got.status == "OFFSET_TOO_SMALL":  # retention went past next: those are gone
            book.pass_over(got.min_offset)
        elif got.status in ("FOUND", "NO_MATCHED_MESSAGE"):
            readable = self.core.replication.readable_limit()
            upto = got.next_offset
            for raw in got.messages:
                physical = int.from_bytes(raw[PHYSICAL_OFFSET_AT : PHYSICAL_OFFSET_AT + 8], "big")
                offset = int.from_bytes(raw[QUEUE_OFFSET_AT : QUEUE_OFFSET_AT + 8], "big")
                if readable is not None and physical + len(raw) > readable:
                    upto = offset
                    break
                book.deliver_new(offset, visible_at)
                start = offset if start < 0 else start
                out.append(
                    self._popped(
                        decode_message(raw, check_crc=False),
                        start,
                        invisible_ms,
                        fifo,
                        1,
                        book,
                        offset,
                        raw,
                    )
                )
            book.pass_over(upto)
        self._committed(key, book)
        return out

    def _popped(
        self,
        m: StoredMessage,
        start: int,
        invisible_ms: int,
        fifo: bool,
        attempt: int,
        book: QueueBook,
        offset: int,
        raw: bytes = b"",
    ) -> Popped:
        visible_at, _att = book.state(offset)
        handle = Handle(
            start,
            visible_at - invisible_ms,
            invisible_ms,
            ORDER_REVIVE_QID if fifo else 0,
            NORMAL_TOPIC,
            self.broker_name,
            m.queue_id,
            offset,
            m.physical_offset,
        )
        if attempt > 1 or not raw:
            m = m._replace(reconsume_times=attempt - 1)
            raw = b""
        return Popped(m, handle.encode(), attempt, visible_at, raw)

    async def _read(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        got = await self.core.run(self.core.store.get, topic, queue_id, offset, 1)
        if got.status != "FOUND" or not got.messages:
            return None
        m = decode_message(got.messages[0], check_crc=False)
        return m if m.queue_offset == offset else None

    async def _dead_letter(
        self, group: str, key: Key, book: QueueBook, m: StoredMessage, attempt: int
    ) -> None:
        """``m`` to ``%DLQ%<group>`` queue 0 (the normal put path: replicated), then done."""
        dlq = DLQ_PREFIX + group
        self.core.topics.ensure(dlq, 1)
        msg_id = m.properties.get("UNIQ_KEY") or offset_msg_id(
            m.store_host.ip, m.store_host.port, m.physical_offset
        )
        props = dict(m.properties)
        props[DLQ_ORIGIN_TOPIC] = m.topic
        props[DLQ_ORIGIN_MESSAGE_ID] = msg_id
        props.setdefault("ORIGIN_MESSAGE_ID", msg_id)
        props.pop("DELAY", None)
        status, _ = await self.core.put(
            StoredMessage(
                topic=dlq,
                body=m.body,
                queue_id=0,
                flag=m.flag,
                sysflag=m.sysflag,
                born_timestamp=m.born_timestamp,
                born_host=m.born_host,
                reconsume_times=attempt,
                properties=props,
            )
        )
        if status is not PutStatus.PUT_OK:
            log.warning("pop: %s offset %d not dead-lettered yet: %s", key, m.queue_offset, status)
            book.retry_later(now_ms())
            raise ServiceNotAvailable(f"the dead-letter queue {dlq} refused the message: {status}")
        book.done(m.queue_offset)
        log.info(
            "pop: group %s: %s queue %d offset %d to %s after %d attempts",
            group,
            m.topic,
            m.queue_id,
            m.queue_offset,
            dlq,
            attempt,
        )

    def rest_num(self, group: str, topic: str, queue_ids: list[int]) -> int:
        """Messages of the queues not popped yet by the group (a POP answer's restNum)."""
        rest = 0
        for q in queue_ids:
            book = self.table.books.get((group, topic, q))
            if book is not None:
                rest += max(0, self.core.store.max_offset(topic, q) - book.next)
        return rest

    # ------------------------------------------------------------------ handles
    def _find(self, group: str, topic: str, handle: str) -> tuple[Key, QueueBook, Handle]:
        self._serving()
        h = decode(handle)
        if h.broker_name != self.broker_name:
            raise InvalidReceiptHandle(
                f"receipt handle is another broker's ({h.broker_name}, not {self.broker_name})"
            )
        key = (group, topic, h.queue_id)
        book = self.table.get(key)
        if book is None:
            raise InvalidReceiptHandle(
                f"receipt handle names nothing popped by group {group} from {topic} "
                f"queue {h.queue_id}"
            )
        return key, book, h

    async def ack(self, group: str, topic: str, handle: str) -> None:
        key, book, h = self._find(group, topic, handle)
        try:
            book.ack(h.offset, h.visible_at_ms)
        except Stale as exc:
            raise InvalidReceiptHandle(f"receipt handle is expired or used: {exc}") from None
        self._committed(key, book)

    async def change_invisible(
        self, group: str, topic: str, handle: str, invisible_ms: int
    ) -> Popped:
        """A new invisibility for a message in flight (from now; 0: visible again at once, as
        the proxy allows, ``GrpcValidator.validateInvisibleTime(..., 0)``); the new handle."""
        _check_invisible(invisible_ms, low=0)
        key, book, h = self._find(group, topic, handle)
        try:
            attempt = book.check(h.offset, h.visible_at_ms)
        except Stale as exc:
            raise InvalidReceiptHandle(f"receipt handle is expired or used: {exc}") from None
        m = await self._read(topic, h.queue_id, h.offset)
        if m is None:
            book.done(h.offset)
            self._committed(key, book)
            raise InvalidReceiptHandle(f"the message at offset {h.offset} is gone (retention)")
        try:
            book.change(h.offset, h.visible_at_ms, now_ms() + invisible_ms)
        except Stale as exc:  # acked while the message was read
            raise InvalidReceiptHandle(f"receipt handle is expired or used: {exc}") from None
        return self._popped(m, h.start_offset, invisible_ms, h.fifo, attempt, book, h.offset)

    async def forward_to_dlq(self, group: str, topic: str, handle: str) -> None:
        """The message of ``handle`` to ``%DLQ%<group>`` now (a consumer gave up on it)."""
        key, book, h = self._find(group, topic, handle)
        try:
            attempt = book.check(h.offset, h.visible_at_ms)
        except Stale as exc:
            raise InvalidReceiptHandle(f"receipt handle is expired or used: {exc}") from None
        async with self._lock(key):
            m = await self._read(topic, h.queue_id, h.offset)
            if m is None:
                book.done(h.offset)
            elif book.state(h.offset)[1] == attempt:
                await self._dead_letter(group, key, book, m, attempt)
        self._committed(key, book)

    # ------------------------------------------------------------------ books
    def _serving(self) -> None:
        why = self.core.replication.writable()
        if why is not None:
            raise ServiceNotAvailable(why)

    def _lock(self, key: Key) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def _topic(self, topic: str) -> TopicConfig:
        config = await self.core.topics.lookup(topic)
        if config is None:
            raise TopicNotExist(f"topic[{topic}] not exist, apply first please!")
        if not config.readable:
            raise NoPermission(f"the topic[{topic}] peeking message is forbidden")
        return config

    async def _book(self, key: Key, init_mode: int) -> QueueBook:
        book = self.table.books.get(key) or self.table.get(key)
        if book is not None:
            return book
        group, topic, queue_id = key
        store = self.core.store
        if not self.core.offsets.loaded:  # a new book now could rewind or skip the group
            raise PopError("consumer offsets are not loaded from metaledger yet, retry")
        committed = self.core.offsets.load(group, topic, queue_id)
        if committed is not None:
            low = committed
        elif init_mode == INIT_MIN or store.min_offset(topic, queue_id) <= 0:
            low = store.min_offset(topic, queue_id)
        else:
            low = max(0, store.max_offset(topic, queue_id) - 1)
        book = self.table.open(key, lambda: low)
        self._committed(key, book)
        return book

    def _committed(self, key: Key, book: QueueBook) -> None:
        """The group's consumer offset of the queue is its low (lag for POP consumers)."""
        self.core.offsets.commit(*key, book.low)

    # ------------------------------------------------------------------ upkeep
    async def load(self) -> int:
        """Merge the progress metaledger holds into the books (at start, on promotion);
        how many books. Raises ClientError when metaledger cannot be read."""
        if self.progress is None:
            return 0
        stored = await asyncio.to_thread(self.progress.load_all)
        for key, (low, nxt, acked) in stored.items():
            # never past this log's end (messages an async failover lost): new ones take
            # those offsets again and must not be skipped
            end = self.core.store.max_offset(key[1], key[2])
            low, nxt = min(low, end), min(nxt, end)
            async with self._lock(key):
                book = self.table.open(key, functools.partial(int, low))
                book.merge(low, nxt, acked)
                self._committed(key, book)
        return len(stored)

    def is_master(self) -> bool:
        return self.core.replication.writable() is None

    async def flush(self, master: bool | None = None) -> None:
        """Sync the books' files and, on a master (``master``: whether this replica was one
        until now, at stop), write their progress to metaledger (every second and at stop;
        a slave's books are stale). Raises ClientError or OSError (the replica logs it
        once per outage; the next flush writes what is still different)."""
        books = {k: b.progress() for k, b in self.table.books.items()}
        if master is None:
            master = self.is_master()
        await asyncio.to_thread(self.table.flush)
        if self.progress is not None and books and master:
            await asyncio.to_thread(self.progress.flush, books)

    def close(self) -> None:
        self.table.close()


def _check_invisible(invisible_ms: int, low: int = 1) -> None:
    if not low <= invisible_ms <= MAX_INVISIBLE_MS:
        raise IllegalInvisibleTime(
            f"invisible time {invisible_ms} ms is not in {low}..{MAX_INVISIBLE_MS} ms"
        )
