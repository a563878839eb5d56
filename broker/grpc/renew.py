"""Receipt-handle renewal for ``auto_renew`` receivers: the 5.x push consumers (Java, Python,
Node.js) receive with ``auto_renew`` and no invisible time, cache the messages and never renew
a handle themselves: RocketMQ's proxy does (its ``ReceiptHandleProcessor`` /
``DefaultReceiptHandleManager`` and ``RenewStrategyPolicy``, with ``ProxyConfig``'s defaults),
and so does :class:`Renewals` here, on the replica that popped the messages (the master: a
receive on another replica is forwarded there, with its client id).

- **Tracked**: each message handed out to an ``auto_renew`` receive, by (group, the handle the
  client got), with the client id of the call (``x-mq-client-id``) and the current handle.
- **Renewed**: every :data:`RENEW_PERIOD_MS` (5 s) a pass changes the invisible time of each
  message within :data:`RENEW_AHEAD_MS` (10 s) of becoming visible to the next step of
  :data:`RENEW_STEPS_MS` (1, 3, 5, 10, 30 min, then 1 h each time), for at most
  :data:`RENEW_MAX_MS` (3 h) after it was received; after that it is left to become visible
  (and redelivered, attempt + 1) at its instant.
- **The client's handle stays good**: an ack, a change of invisible time or a forward to the
  DLQ names the handle the client got; :meth:`Renewals.current` gives the renewed one and
  forgets the message (the proxy's ``removeReceiptHandle``). A renewal in flight for it is
  waited for first.
- **A client gone** (NotifyClientTermination, or silent for 120 s: :mod:`broker.clients`): its
  messages become visible again after :data:`CLEAR_INVISIBLE_MS` (1 s, the proxy's
  ``invisibleTimeMillisWhenClear``), for another consumer of the group.
- A renewal the POP service refuses (the message was acked by another path, or its handle
  went stale) forgets the message. At most :data:`MAX_TRACKED` messages are tracked (about
  400 bytes each, its handles included); beyond that a message keeps its invisible time (60 s,
  ``--pop-auto-renew-invisible-ms``), as without renewal (logged once).
  Nothing of this is persisted: after a restart or a failover the messages in flight are
  redelivered at their instant (docs/broker.md, POP consumption).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.pop.service import Popped, PopService
from broker.remoting.errors import BrokerRequestError

log = logging.getLogger(__name__)

RENEW_PERIOD_MS = 5_000  # renewSchedulePeriodMillis
RENEW_AHEAD_MS = 10_000  # renewAheadTimeMillis
RENEW_MAX_MS = 3 * 3_600_000  # renewMaxTimeMillis
#: RenewStrategyPolicy: the invisible time of the n-th renewal (the last one repeats)
RENEW_STEPS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
CLEAR_INVISIBLE_MS = 1_000  # invisibleTimeMillisWhenClear
MAX_TRACKED = 100_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class _Held:
    client_id: str
    topic: str
    handle: str  # the current one
    visible_at_ms: int
    received_ms: int
    renewals: int = 0
    busy: asyncio.Event | None = field(default=None, repr=False)


class Renewals:
    """The messages of ``auto_renew`` receives, renewed until acked (see the module)."""

    def __init__(
        self,
        pops: Callable[[], PopService],
        *,
        clock: Callable[[], int] = _now_ms,
        period_ms: int = RENEW_PERIOD_MS,
        ahead_ms: int = RENEW_AHEAD_MS,
        max_ms: int = RENEW_MAX_MS,
        steps_ms: tuple[int, ...] = RENEW_STEPS_MS,
        max_tracked: int = MAX_TRACKED,
    ) -> None:
        self._pops = pops
        self._clock = clock
        self.period_ms, self.ahead_ms, self.max_ms = period_ms, ahead_ms, max_ms
        self.steps_ms = steps_ms
        self.max_tracked = max_tracked
        #: (group, the handle the client got) -> the message's state
        self._held: dict[tuple[str, str], _Held] = {}
        self._task: asyncio.Task[None] | None = None
        self._full_logged = False
        self._side: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._held)

    def track(self, client_id: str, group: str, topic: str, popped: list[Popped]) -> None:
        """Messages handed out to an ``auto_renew`` receive; starts the renewal loop."""
        now = self._clock()
        for p in popped:
            if len(self._held) >= self.max_tracked:
                if not self._full_logged:
                    log.warning(
                        "gRPC receive: %d handles renewed already; more are not renewed",
                        len(self._held),
                    )
                    self._full_logged = True
                break
            self._held[(group, p.handle)] = _Held(client_id, topic, p.handle, p.visible_at_ms, now)
        if self._held and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="renewals")

    async def current(self, group: str, handle: str) -> str:
        """The handle to act on for the one the client gave (the renewed one when tracked);
        the message is forgotten (the client acks it, changes it or gives up on it)."""
        held = self._held.get((group, handle))
        if held is None:
            return handle
        while held.busy is not None:
            await held.busy.wait()
        self._held.pop((group, handle), None)
        return held.handle

    def client_gone(self, client_id: str) -> None:
        """A client terminated or went silent: its messages visible again in a second."""
        mine = [(k, h) for k, h in self._held.items() if h.client_id == client_id]
        if not mine:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a unit test's expiry): left to their instants
            loop = None
        for k, _ in mine:
            del self._held[k]

        async def clear() -> None:
            for (group, _), held in mine:
                while held.busy is not None:
                    await held.busy.wait()
                try:
                    await self._pops().change_invisible(
                        group, held.topic, held.handle, CLEAR_INVISIBLE_MS
                    )
                except BrokerRequestError as exc:
                    log.debug("renewals: %s not cleared: %s", held.handle, exc)

        if loop is None:
            return
        task = loop.create_task(clear())
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    async def renew_due(self) -> int:
        """One pass: each message due renewed (or forgotten); how many were renewed."""
        now = self._clock()
        renewed = 0
        for key, held in list(self._held.items()):
            if held.busy is not None or held.visible_at_ms - now > self.ahead_ms:
                continue
            if now - held.received_ms >= self.max_ms:
                self._held.pop(key, None)  # left to become visible at its instant
                continue
            step = self.steps_ms[min(held.renewals, len(self.steps_ms) - 1)]
            held.busy = asyncio.Event()
            try:
                popped = await self._pops().change_invisible(key[0], held.topic, held.handle, step)
            except BrokerRequestError as exc:
                self._held.pop(key, None)
                log.debug("renewals: %s not renewed, forgotten: %s", held.handle, exc)
            else:
                held.handle, held.visible_at_ms = popped.handle, popped.visible_at_ms
                held.renewals += 1
                renewed += 1
            finally:
                event, held.busy = held.busy, None
                event.set()
        return renewed

    async def _loop(self) -> None:
        while self._held:
            await asyncio.sleep(self.period_ms / 1000)
            try:
                await self.renew_due()
            except Exception:  # a bug: logged, the loop goes on
                log.exception("renewals: a pass failed")


__all__ = ["RENEW_MAX_MS", "RENEW_STEPS_MS", "Renewals"]
