"""What every request handler of one replica shares: store, replication, topics, consumers.

The store is synchronous (an fdatasync may block for milliseconds): its calls run on a small
thread pool (:meth:`BrokerCore.run`). Puts go through one pipeline (:meth:`BrokerCore._store`):
those that arrive while a batch is written form the next batch, one ``MessageStore.put_many``
(one thread hop, one commit-log write); a batch of at least :data:`INLINE_WRITE_MESSAGES`
messages is written on the event loop instead (no fdatasync there: a SYNC_FLUSH wait stays
on the pool). :meth:`BrokerCore.put`
is the one write path (sends, send-backs, delayed delivery): ``Replication.writable()``, ``admit``,
the append, ``wait`` (broker/replication.py), then long polls of that queue are woken.
A message with ``WAIT`` = false is not subject to the replicas' admission (RocketMQ applies
needAckNums only to messages that wait, RocketMQ 5's ``CommitLog.needHandleHA``). Once a
batch is written, ``appended`` is called once (the HA master wakes its streams; under
SYNC_FLUSH before the batch's fdatasync, as RocketMQ's HA and flush run side by side); each
request then wakes the long polls of its queue, and again after the replicas' wait (under a
quorum, consumers see a message once it is confirmed).

The core sits between the state it holds (``broker/state/``: consumer groups, queue locks,
offsets, parked pulls) and the request handlers (``send/``, ``pull/``, ``consumers/``,
``admin/``), which import it; it imports no handler, and ``replica.py`` wires them in.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from broker.config import BrokerConfig
from broker.metrics import BrokerMetrics
from broker.replication import Admission, PutStatus, Replication, put_status
from broker.state.consumers import ConsumerRegistry
from broker.state.hold import PullHold
from broker.state.locks import LockManager
from broker.state.offsets import OffsetStore
from broker.state.producers import ProducerRegistry
from broker.store import FlushMode, MessageStore, PutResult
from broker.topics import TopicTable
from rmq.message import StoredMessage

T = TypeVar("T")

#: A put batch of at least this many messages (a Redis full sync's SEND_BATCH_MESSAGE carries
#: up to 1,024) is written on the event loop rather than on the store's thread. Its encoding,
#: consume-queue units and index entries are Python holding the GIL for milliseconds either
#: way, so the thread bought no concurrency there, only the two threads handing the GIL back
#: and forth: the 1 GB full sync took 0.87x the time written on the loop (28.9 and 29.1 s
#: against 34.3 and 32.0, taking turns; bench/results/full-sync-inline-write-2026-12-07.md).
#: Smaller batches (concurrent single sends: 64 producers gather fewer than this) keep the
#: thread, so the requests that arrive while one is written join the next.
INLINE_WRITE_MESSAGES = 128


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Stats:
    """Counters for GET_BROKER_RUNTIME_INFO and metrics."""

    puts_by_status: collections.Counter[str] = field(default_factory=collections.Counter)
    pulled_messages: int = 0
    started_ms: int = field(default_factory=now_ms)


class BrokerCore:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        replication: Replication,
        topics: TopicTable,
        offsets: OffsetStore,
    ) -> None:
        self.config = config
        self.store = store
        self.replication = replication
        self.topics = topics
        self.offsets = offsets
        self.consumers = ConsumerRegistry(config.client_expiry_ms)
        self.producers = ProducerRegistry(config.client_expiry_ms)
        self.locks = LockManager(config.lock_expiry_ms)
        self.hold = PullHold()
        self.stats = Stats()
        self.executor = concurrent.futures.ThreadPoolExecutor(16, thread_name_prefix="store")
        #: called after each append (the HA master's wake-up); set by the replica
        self.appended: Callable[[], None] = lambda: None
        #: the broker id a consumer this many commit-log bytes behind should pull from next
        #: (a pull answer's suggestWhichBrokerId); 0, the master, unless the replica says
        self.suggest_broker: Callable[[int], int] = lambda behind: 0
        self.metrics: BrokerMetrics | None = None
        # the put pipeline: requests wait here while the batch before them is written
        self._put_queue: list[tuple[list[StoredMessage], asyncio.Future[list[PutResult]]]] = []
        self._writing = False

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on the store's thread pool."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def _store(self, messages: list[StoredMessage]) -> list[PutResult]:
        """``store.put_many`` of one request's messages, batched with the requests around it.

        One batch is written at a time, on the thread pool: the requests that arrive meanwhile
        queue up and go together as the next batch (one thread hop, one lock hold and one
        write for all of them), in arrival order, so queue offsets follow the commit log.
        Under SYNC_FLUSH a batch's answers wait for its fdatasync while the next batch is
        written (the commit log's group commit).
        """
        fut: asyncio.Future[list[PutResult]] = asyncio.get_running_loop().create_future()
        self._put_queue.append((messages, fut))
        if not self._writing:
            self._write_next()
        return await fut

    def _write_next(self) -> None:
        batch, self._put_queue = self._put_queue, []
        self._writing = True
        requests = [m for m, _ in batch]
        if sum(map(len, requests)) >= INLINE_WRITE_MESSAGES:
            try:
                results = self.store.put_many(requests, False)
            except Exception as exc:  # answered to the batch's requests, as from the pool
                self._written(batch, None, exc)
            else:
                self._written(batch, results, None)
            return
        written = asyncio.get_running_loop().run_in_executor(
            self.executor, self.store.put_many, requests, False
        )
        written.add_done_callback(lambda f: self._from_pool(batch, f))

    def _from_pool(
        self,
        batch: list[tuple[list[StoredMessage], asyncio.Future[list[PutResult]]]],
        written: asyncio.Future[list[list[PutResult]]],
    ) -> None:
        if written.cancelled():
            self._written(batch, None, asyncio.CancelledError())
        elif (exc := written.exception()) is not None:
            self._written(batch, None, exc)
        else:
            self._written(batch, written.result(), None)

    def _written(
        self,
        batch: list[tuple[list[StoredMessage], asyncio.Future[list[PutResult]]]],
        results: list[list[PutResult]] | None,
        exc: BaseException | None,
    ) -> None:
        self._writing = False
        if results is not None:
            # the HA streams wake now, once a batch: not in a later loop turn, when each
            # request resumes (the slaves' round trip starts one turn sooner)
            self.appended()
        if self._put_queue:
            self._write_next()
        if results is None:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc or asyncio.CancelledError())
            return
        end = 0
        if self.store.config.flush_mode is FlushMode.SYNC_FLUSH:  # else nobody waits for it
            end = max(
                (r.physical_offset + r.size for rs in results for r in rs if r.status == "PUT_OK"),
                default=0,
            )
        if end:
            durable = asyncio.get_running_loop().run_in_executor(
                self.executor, self.store.wait_durable, end
            )
            durable.add_done_callback(lambda f: _answer(batch, results, f))
        else:
            _answer(batch, results, None)

    async def put(
        self, message: StoredMessage, wait_replicas: bool = True
    ) -> tuple[PutStatus, PutResult | None]:
        """Store one message and wait for the replicas the replication asks for."""
        if self.replication.writable() is not None:
            return self._count(PutStatus.SERVICE_NOT_AVAILABLE), None
        wait_store_ok = message.properties.get("WAIT", "true").lower() != "false"
        admission = (
            self.replication.admit(self.store.log.end_offset) if wait_store_ok else Admission(1)
        )
        if isinstance(admission, PutStatus):
            return self._count(admission), None
        (result,) = await self._store([message])
        status = put_status(result.status)
        if result.status == "PUT_OK":
            self.hold.notify(message.topic, message.queue_id)
        if status is PutStatus.PUT_OK and wait_replicas:
            end = result.physical_offset + result.size
            status = await self.replication.wait(end, admission, wait_store_ok)
            self.hold.notify(message.topic, message.queue_id)
        return self._count(status), result

    async def put_batch(self, messages: list[StoredMessage]) -> tuple[PutStatus, list[PutResult]]:
        """Several messages under one admission, stored in order up to the first refused;
        the wait covers the last."""
        if self.replication.writable() is not None:
            return self._count(PutStatus.SERVICE_NOT_AVAILABLE), []
        admission = self.replication.admit(self.store.log.end_offset)
        if isinstance(admission, PutStatus):
            return self._count(admission), []
        stored = await self._store(messages) if messages else []
        results = [r for r in stored if r.status == "PUT_OK"]
        status = PutStatus.PUT_OK
        if len(results) < len(stored):
            status = put_status(stored[-1].status)
        # the queues the stored messages went to, each once (a batch has one)
        queues = dict.fromkeys((m.topic, m.queue_id) for m in messages[: len(results)])
        if results:
            for topic, queue_id in queues:
                self.hold.notify(topic, queue_id)
        if results and status is PutStatus.PUT_OK:
            last = results[-1]
            status = await self.replication.wait(last.physical_offset + last.size, admission, True)
            for topic, queue_id in queues:
                self.hold.notify(topic, queue_id)
        return self._count(status), results

    def _count(self, status: PutStatus) -> PutStatus:
        self.stats.puts_by_status[status.value] += 1
        if self.metrics is not None:
            self.metrics.sent(status.value)
        return status

    def close(self) -> None:
        self.executor.shutdown(wait=True)


def _answer(
    batch: list[tuple[list[StoredMessage], asyncio.Future[list[PutResult]]]],
    results: list[list[PutResult]],
    durable: asyncio.Future[None] | None,
) -> None:
    """Give each request of a written batch its results (once durable, under SYNC_FLUSH)."""
    exc = None
    if durable is not None:
        exc = asyncio.CancelledError() if durable.cancelled() else durable.exception()
    for (_, fut), result in zip(batch, results, strict=True):
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
