"""The check-back: half messages left without an end are asked about at their producer.

RocketMQ's ``TransactionalMessageCheckService`` + ``TransactionalMessageServiceImpl.check``
(broker/.../transaction/queue/TransactionalMessageServiceImpl.java:108-354), on the master only,
every ``transaction_check_interval_ms``: the half queue is read from the check's progress;
a half with an op (or whose root has one) is passed; one checked ``transaction_check_max``
times already is left for good (``needDiscard``; RocketMQ moves it to
TRANS_CHECK_MAX_TIME_TOPIC, here it stays in the half queue with a warning, and an end still
works); one younger than its immunity (the transaction timeout, or its
``CHECK_IMMUNITY_TIME_IN_SECONDS``) stops the round (with a longer immunity only that half is
stepped over); any other is put back at the queue's end with one more check counted
(``putBackHalfMsgQueue``) and CHECK_TRANSACTION_STATE goes, naming the copy, to a live
connection of its producer group (``PGROUP``; none: nothing goes, the check still counts,
as RocketMQ). The progress moves over the passed prefix and is kept in the offset store
(:meth:`TransactionService.advance`), so a new master starts where the old one was; one that
starts a little earlier only asks again, and ends are idempotent.

The clock is injected (``clock``) so tests drive the timing without waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from broker.core import now_ms
from broker.state.producers import ProducerRegistry
from broker.transactions.half import (
    HALF_TOPIC,
    PRODUCER_GROUP,
    TRANSACTION_ID,
    check_times,
    immunity_ms,
    renewed,
)
from broker.transactions.service import STORED, TransactionService
from rmq.message import StoredMessage

log = logging.getLogger(__name__)


class CheckService:
    def __init__(
        self,
        service: TransactionService,
        producers: ProducerRegistry,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.service = service
        self.producers = producers
        self.clock = clock
        config = service.core.config
        self.timeout_ms = config.transaction_timeout_ms
        self.check_max = config.transaction_check_max
        self.interval_ms = config.transaction_check_interval_ms
        self.broker_name = config.broker_name
        #: half offsets at or past the progress already dealt with this term
        self.passed: set[int] = set()
        self.checks_sent = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="transaction-check")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def reset(self) -> None:
        """After a role change: the progress is loaded again, nothing is remembered."""
        self.passed.clear()
        self.service.reset()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            try:
                await self.check_round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transactions: check round failed (retried)")

    async def check_round(self) -> int:
        """One pass over the half queue; returns how many halves were asked about."""
        core = self.service.core
        if core.replication.writable() is not None or not core.offsets.loaded:
            return 0  # only a master checks, from the progress it loaded
        svc = self.service
        await svc.refresh()
        now = self.clock()
        progress = svc.half_progress
        end = core.store.max_offset(HALF_TOPIC, 0)
        prefix = True
        asked = 0
        for half in await svc.read(HALF_TOPIC, progress, end):
            offset = half.queue_offset
            done = offset in self.passed or await svc.ended_as(half) is not None
            if not done and check_times(half) >= self.check_max:
                log.warning(
                    "transactions: half %d (%s, group %s) checked %d times without an end: "
                    "no more checks",
                    offset,
                    half.properties.get(TRANSACTION_ID, half.msg_id),
                    half.properties.get(PRODUCER_GROUP, ""),
                    check_times(half),
                )
                done = True
            if not done:
                immunity = immunity_ms(half, self.timeout_ms)
                if now - half.born_timestamp < immunity:
                    if immunity == self.timeout_ms:
                        break  # the later ones are younger still
                    prefix = False
                    continue
                if not await self._ask(half):
                    break
                asked += 1
                done = True
            if prefix:
                progress = offset + 1
                self.passed.discard(offset)
            else:
                self.passed.add(offset)
        svc.advance(progress)
        return asked

    async def _ask(self, half: StoredMessage) -> bool:
        """Put the half back with one more check, then ask its producer; False when the copy
        could not be stored (the round stops, the half is asked next round)."""
        status, result = await self.service.core.put(renewed(half))
        if status not in STORED or result is None:
            log.warning("transactions: a half could not be put back for its check: %s", status)
            return False
        copy = renewed(half)._replace(
            queue_offset=result.queue_offset,
            physical_offset=result.physical_offset,
            store_host=self.service.core.store.config.store_host,
        )
        group = half.properties.get(PRODUCER_GROUP, "")
        transaction_id = half.properties.get(TRANSACTION_ID) or half.msg_id
        channel = self.producers.channel(group)
        if channel is None or not channel.check(copy, transaction_id, self.broker_name):
            log.warning(
                "transactions: no live producer of group %s to check transaction %s",
                group,
                transaction_id,
            )
        else:
            self.checks_sent += 1
        return True
