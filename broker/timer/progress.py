"""How far a delivery loop got, kept where a new master finds it: the delayed and timer services.

Both loops deliver only on the master, and remember a position (a delay level's next
``SCHEDULE_TOPIC_XXXX`` offset; the timer wheel's fired-through time and dispatched timer-queue
offset). :class:`DeliveryProgress` keeps those numbers in an :class:`OffsetStore` under a
reserved group name: in metaledger that is a :class:`~broker.state.offsets.KvOffsetStore` of
its own prefix (``/brokers/<name>/delivery/<group>/<topic>/<queueId>``), flushed with the
consumer offsets (every ≤ 1 s and at stop), raised only. A replica that becomes master
(:meth:`DeliveryProgress.ready`) reloads them before it delivers anything, so a failover
repeats only what was delivered within the last flush interval before the old master died,
instead of starting from zero.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker.state.offsets import OffsetStore

log = logging.getLogger(__name__)


class DeliveryProgress:
    """``store``'s positions of one loop (``group``); ``reload`` reads the stored ones (None: a
    store with nothing elsewhere, as :class:`~broker.state.offsets.InMemoryOffsetStore`)."""

    def __init__(self, store: OffsetStore, reload: Callable[[], object] | None, group: str) -> None:
        self.store = store
        self.reload = reload
        self.group = group
        self.master = False
        #: how often this replica became writable with the positions loaded
        self.promotions = 0
        self._warned = False

    async def ready(self, not_writable: str | None) -> bool:
        """Whether the loop may deliver now: this replica is writable (``not_writable`` is
        ``Replication.writable()``) and, since it became so, the stored positions were
        reloaded (each time that happens :attr:`promotions` counts one more)."""
        if not_writable is not None:
            self.master = False
            return False
        if self.master:
            return True
        if self.reload is not None:
            try:
                await asyncio.to_thread(self.reload)
            except Exception as exc:  # metaledger unreachable: wait, deliver nothing yet
                if not self._warned:
                    log.warning("%s: positions not loaded yet (retrying): %s", self.group, exc)
                self._warned = True
                return False
        self._warned = False
        self.master = True
        self.promotions += 1
        return True

    def load(self, topic: str, queue_id: int) -> int | None:
        return self.store.load(self.group, topic, queue_id)

    def commit(self, topic: str, queue_id: int, value: int) -> None:
        self.store.commit(self.group, topic, queue_id, value)
