"""The timer's delivery loop: ``rmq_sys_wheel_timer`` → the wheel → the real topic when due.

RocketMQ 5's ``TimerMessageStore`` (store/timer/TimerMessageStore.java: the enqueue,
dequeue and checkpoint services), in one loop on the master, every :data:`TICK_S`:

1. **dispatch**: every timer-queue message from the wheel's ``enqueue_next`` on is linked into
   the wheel at its ``TIMER_OUT_MS`` (one already due goes to the next second to fire);
2. **fire**: each second from the wheel's ``read_s`` that is over: its slot's entries are read
   from the commit log and put on their real topic and queue (:func:`to_real`), a rolled entry
   is linked further on; then ``read_s`` moves past it. A put the store refuses stops the
   round (retried next tick, the entries already delivered not again).

**Progress survives.** The wheel's files hold ``read_s`` and ``enqueue_next``: a restart
resumes there (a second that was firing when the process died fires again whole). The pair
(``read_s`` as ms, ``enqueue_next``) is also kept in metaledger (:class:`DeliveryProgress`,
flushed with the consumer offsets, every ≤ 1 s), written right after a second that had
entries fired, or one after new messages were linked (idle seconds write nothing: the pair
stays true); it says: every timer-queue message below that offset and due before that time
was delivered.
A replica that becomes master compares it with its own wheel; when metaledger's is ahead (an
other master delivered meanwhile) the wheel is rebuilt: emptied, firing at that time, and
dispatched again from the first timer-queue message stored ``timer_max_delay_sec`` (+ 1 min
of clock skew) before it (anything older was due, and delivered, before it), skipping what
the pair says was delivered. What is delivered twice: after a crash, the messages due in the
second that was firing; after a failover, those the old master delivered after its last flush
(messages due within the last flush interval before the crash). Nothing is lost: delivery is
at least once.

The wheel's files are read and written on the event loop (small reads and writes; one
second's entries at a time), its fsync every second on the store's threads. Only a master
runs the loop; a slave's wheel waits untouched (its timer queue is replicated
like any topic and dispatched when it is promoted).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker.core import BrokerCore, now_ms
from broker.replication import PutStatus
from broker.store import StoreError
from broker.timer.message import TIMER_TOPIC, timer_out_ms, to_real
from broker.timer.progress import DeliveryProgress
from broker.timer.wheel import DEFAULT_ROLL_WINDOW_SLOTS, DEFAULT_SLOTS, Entry, TimerWheel
from rmq.message import MessageError, decode

log = logging.getLogger(__name__)
TICK_S = 0.1
BATCH = 64
FLUSH_EVERY_S = 1.0
#: clock skew allowed between masters when a rebuild picks where to start reading
SKEW_MS = 60_000
#: statuses of a put that stored the message (the delivery is done)
STORED = frozenset(
    {
        PutStatus.PUT_OK,
        PutStatus.FLUSH_DISK_TIMEOUT,
        PutStatus.FLUSH_SLAVE_TIMEOUT,
        PutStatus.SLAVE_NOT_AVAILABLE,
    }
)
#: the progress store's names: ``read_s`` in ms, and ``enqueue_next``
READ_MS_QUEUE, ENQUEUE_QUEUE = 1, 0


@dataclass(frozen=True)
class TimerSettings:
    """RocketMQ's ``timerMaxDelaySec`` (3 days), the wheel's slots (7 days of seconds,
    ``TIMER_WHEEL_TTL_DAY``) and roll window (``timerRollWindowSlot``, 2 days)."""

    max_delay_sec: int = 3 * 86_400
    slots: int = DEFAULT_SLOTS
    roll_window_slots: int = DEFAULT_ROLL_WINDOW_SLOTS

    def validate(self) -> TimerSettings:
        if self.max_delay_sec <= 0:
            raise ValueError(f"max_delay_sec: must be > 0, got {self.max_delay_sec}")
        if not 0 < self.roll_window_slots < self.slots:
            raise ValueError(f"roll_window_slots: must be in 1..{self.slots - 1}")
        return self


class TimerService:
    def __init__(
        self,
        core: BrokerCore,
        directory: str,
        progress: DeliveryProgress,
        settings: TimerSettings = TimerSettings(),
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.core = core
        self.progress = progress
        self.settings = settings.validate()
        self.clock = clock
        self.wheel = TimerWheel(
            directory, clock() // 1000, settings.slots, settings.roll_window_slots
        )
        #: (queue offset, ms) pairs: a message below both was delivered by an earlier master
        self.skips: list[tuple[int, int]] = []
        self._promotions = 0
        self._done = 0  # entries of the slot being fired delivered already (this process)
        self._changed = False  # a slot with entries fired since the last commit
        self._committed_enqueue = -1
        self._flushed_at = 0.0
        #: the wheel's fsync on the store's threads (waited for before the files close)
        self._flushing: concurrent.futures.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="timer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._flushing is not None:
            await asyncio.wrap_future(self._flushing)  # a cancelled step's, still running
        self.wheel.flush()
        self.wheel.close()

    async def _run(self) -> None:
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("timer: delivery round failed (retried)")
            await asyncio.sleep(TICK_S)

    async def step(self) -> int:
        """One round (a master's): dispatch, then fire what is due; how many were delivered."""
        if not await self.progress.ready(self.core.replication.writable()):
            return 0
        if self.progress.promotions != self._promotions:
            self._promotions = self.progress.promotions
            await self._rebuild_if_behind()
        await self.dispatch()
        delivered = await self.fire()
        loop = asyncio.get_running_loop()
        if loop.time() - self._flushed_at >= FLUSH_EVERY_S:
            self._flushed_at = loop.time()
            self._flushing = self.core.executor.submit(self.wheel.flush)
            await asyncio.wrap_future(self._flushing)
        return delivered

    async def _rebuild_if_behind(self) -> None:
        """On becoming master: rebuild the wheel when metaledger's progress is ahead of it."""
        read_ms = self.progress.load(TIMER_TOPIC, READ_MS_QUEUE) or 0
        enqueued = self.progress.load(TIMER_TOPIC, ENQUEUE_QUEUE) or 0
        wheel = self.wheel
        if read_ms <= wheel.read_s * 1000 and enqueued <= wheel.enqueue_next:
            return
        mine = (wheel.enqueue_next, wheel.read_s * 1000)
        since = read_ms - self.settings.max_delay_sec * 1000 - SKEW_MS
        start = await self.core.run(
            self.core.store.search_offset_by_timestamp, TIMER_TOPIC, 0, since
        )
        self.skips = [(enqueued, read_ms), mine]
        wheel.reset(max(read_ms // 1000, wheel.read_s), start)
        self._done = 0
        log.info(
            "timer: wheel rebuilt from the timer queue at offset %d (delivered before: "
            "offset %d and %d ms, by an earlier master)",
            start,
            enqueued,
            read_ms,
        )

    async def dispatch(self) -> int:
        """Link every timer-queue message not in the wheel yet; how many were linked."""
        store = self.core.store
        linked = 0
        while True:
            at = max(self.wheel.enqueue_next, store.min_offset(TIMER_TOPIC, 0))
            if at >= store.max_offset(TIMER_TOPIC, 0):
                return linked
            got = await self.core.run(store.get, TIMER_TOPIC, 0, at, BATCH)
            if not got.messages:
                return linked  # not visible yet (SYNC_FLUSH: until durable)
            for i, raw in enumerate(got.messages):
                queue_offset = at + i
                try:
                    m = decode(raw, check_crc=False)
                    out = timer_out_ms(m)
                except MessageError as exc:
                    out = None
                    log.warning("timer: queue offset %d unreadable (%s): skipped", at + i, exc)
                if out is not None and not self._delivered_before(queue_offset, out):
                    self.wheel.add(Entry(out, m.physical_offset, len(raw), queue_offset))
                    linked += 1
                self.wheel.set_enqueued(queue_offset + 1)

    def _delivered_before(self, queue_offset: int, out_ms: int) -> bool:
        return any(queue_offset < q and out_ms < ms for q, ms in self.skips)

    async def fire(self) -> int:
        """Deliver each second's slot up to now; how many messages were put."""
        wheel = self.wheel
        now_s = self.clock() // 1000
        delivered = 0
        while wheel.read_s < now_s:  # a second fires once it is over (RocketMQ's dequeue)
            second = wheel.read_s
            if wheel.count(second):
                entries = wheel.due(second)  # one second's entries: small reads, here
                for entry in entries[self._done :]:
                    if entry.deliver_ms // 1000 > second:
                        wheel.add(entry)  # rolled: beyond the window when linked
                    elif await self._deliver(entry):
                        delivered += 1
                    else:
                        return delivered  # retried next tick from this entry
                    self._done += 1
                self._changed = True
            self._done = 0
            wheel.advance(second + 1)
            if self._changed or wheel.enqueue_next != self._committed_enqueue:
                # idle seconds are not written: metaledger's older pair stays true
                self.progress.commit(TIMER_TOPIC, READ_MS_QUEUE, wheel.read_s * 1000)
                self.progress.commit(TIMER_TOPIC, ENQUEUE_QUEUE, wheel.enqueue_next)
                self._committed_enqueue = wheel.enqueue_next
                self._changed = False
            if second % 1000 == 0:
                await asyncio.sleep(0)  # a long gap (a restart after hours): let others run
        return delivered

    async def _deliver(self, entry: Entry) -> bool:
        """Put the entry's message on its real topic; False when the store refused (retry)."""
        try:
            raw = await self.core.run(self.core.store.guard.record, entry.phys_offset, entry.size)
            m = decode(raw, check_crc=False)
        except (StoreError, MessageError, OSError) as exc:
            log.warning(
                "timer: message at commit-log offset %d gone (%s): not delivered",
                entry.phys_offset,
                exc,
            )
            return True
        status, _ = await self.core.put(to_real(m, self.clock()))
        return status in STORED
