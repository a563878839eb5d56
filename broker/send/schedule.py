"""Delayed delivery: SCHEDULE_TOPIC_XXXX queue ``level-1`` → the real topic when due.

RocketMQ's ``ScheduleMessageService`` (RocketMQ 4.9's
``store/schedule/ScheduleMessageService.java``): one queue per delay level, read in order; a message
is due at its store time + the level's delay; then it is stored again on ``REAL_TOPIC``/``REAL_QID``
without ``DELAY``/``REAL_*``. Each level's delivered offset is kept in ``delayOffset.json`` (written
after each round that moved), so a restart neither loses nor (beyond the last round) repeats.

Only a master delivers. The offsets are also kept in metaledger (:class:`DeliveryProgress`,
group ``schedule``, queue ``level-1``, flushed with the consumer offsets), and a replica that
becomes master takes the higher of its file's and metaledger's before it delivers: a new master
after a failover (whose ``delayOffset.json`` is its own, as a slave never moved: RocketMQ's
slaves copy the master's every 10 s) would otherwise deliver every level again from its
first message. It repeats only what the old master delivered after its last flush.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile

from broker.core import BrokerCore, now_ms
from broker.state.offsets import InMemoryOffsetStore
from broker.timer.message import unpark
from broker.timer.progress import DeliveryProgress
from broker.timer.service import STORED
from broker.topics import SCHEDULE_TOPIC
from rmq.message import MessageError, StoredMessage, decode

log = logging.getLogger(__name__)
TICK_S = 0.1


class ScheduleService:
    def __init__(
        self, core: BrokerCore, path: str | None, progress: DeliveryProgress | None = None
    ) -> None:
        self.core = core
        self.path = path
        self.offsets: dict[int, int] = {}
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                self.offsets = {int(k): int(v) for k, v in json.load(f).items()}
        self.progress = progress or DeliveryProgress(InMemoryOffsetStore(), None, "schedule")
        self._promotions = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="schedule")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._save()

    async def _run(self) -> None:
        while True:
            try:
                if await self.deliver_due():
                    self._save()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("schedule: delivery round failed (retried)")
            await asyncio.sleep(TICK_S)

    async def deliver_due(self) -> int:
        """Deliver every due message of every level (a master's); returns how many."""
        progress = self.progress
        if not await progress.ready(self.core.replication.writable()):
            return 0
        if progress.promotions != self._promotions:
            self._promotions = progress.promotions
            for level in range(1, len(self.core.config.delay_levels_ms) + 1):
                stored = progress.load(SCHEDULE_TOPIC, level - 1) or 0
                if stored > self.offsets.get(level, 0):
                    self.offsets[level] = stored
        delivered = 0
        for level, delay_ms in enumerate(self.core.config.delay_levels_ms, start=1):
            qid = level - 1
            store = self.core.store
            if store.max_offset(SCHEDULE_TOPIC, qid) <= self.offsets.get(level, 0):
                continue
            while True:
                offset = max(self.offsets.get(level, 0), store.min_offset(SCHEDULE_TOPIC, qid))
                got = await self.core.run(store.get, SCHEDULE_TOPIC, qid, offset, 32)
                if not got.messages:
                    break
                stop = False
                for raw in got.messages:
                    try:
                        m = decode(raw, check_crc=False)
                    except MessageError:
                        self.offsets[level] = offset + 1
                        offset += 1
                        continue
                    if m.store_timestamp + delay_ms > now_ms():
                        stop = True
                        break
                    status, _ = await self.core.put(self._real(m))
                    if status not in STORED:
                        stop = True  # retried next tick
                        break
                    offset = m.queue_offset + 1
                    self.offsets[level] = offset
                    progress.commit(SCHEDULE_TOPIC, qid, offset)
                    delivered += 1
                if stop:
                    break
        return delivered

    @staticmethod
    def _real(m: StoredMessage) -> StoredMessage:
        props = dict(m.properties)
        props.pop("DELAY", None)
        return unpark(m, props)

    def _save(self) -> None:
        if not self.path:
            return
        directory = os.path.dirname(self.path) or "."
        fd, tmp = tempfile.mkstemp(prefix=".delay.", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({str(k): v for k, v in self.offsets.items()}, f)
        os.replace(tmp, self.path)
