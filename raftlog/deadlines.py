"""Deadlines of many waiting proposals, checked by one periodic sweep per event loop.

A timer per request (``loop.call_later`` then ``cancel``) cost the leader's event loop a
few microseconds per write, for a timeout that almost never fires. Here a request's
deadline is one append to a queue, and one timer, armed only while deadlines are pending,
wakes every ``every_s`` to expire the overdue ones. A deadline therefore fires up to
``every_s`` late, never early.

Requests with the same timeout arrive in deadline order (the loop's clock does not go
back), so each distinct timeout gets its own FIFO queue and the sweep only looks at the
fronts. A request answered before its deadline stays queued until then and is skipped
(its future is done): no bookkeeping on the answer path. The queue holds the future
weakly, so an answered request's result is freed when its caller is done with it, not
``timeout_s`` later.

Everything runs on the event loop of the proposer (the sweep follows the loop of the
latest ``add``; queued deadlines of a loop that went away are dropped with it).
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

#: Default sweep period: how late a deadline may fire.
SWEEP_EVERY_S = 0.05

Expire = Callable[[Any, "asyncio.Future[Any]", float], None]


class DeadlineSweep:
    """``add(loop, timeout_s, key, fut)``: call ``on_expire(key, fut, timeout_s)`` once
    ``timeout_s`` has passed, unless ``fut`` is done by then."""

    def __init__(self, on_expire: Expire, every_s: float = SWEEP_EVERY_S) -> None:
        self._on_expire = on_expire
        self._every_s = every_s
        self._queues: dict[
            float, deque[tuple[float, Hashable, weakref.ref[asyncio.Future[Any]]]]
        ] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def add(
        self,
        loop: asyncio.AbstractEventLoop,
        timeout_s: float,
        key: Hashable,
        fut: asyncio.Future[Any],
    ) -> None:
        if loop is not self._loop:  # a new loop (tests run several): start afresh on it
            self._loop, self._timer = loop, None
            self._queues = {}
        queue = self._queues.get(timeout_s)
        if queue is None:
            queue = self._queues[timeout_s] = deque()
        queue.append((loop.time() + timeout_s, key, weakref.ref(fut)))
        if self._timer is None:
            self._timer = loop.call_later(self._every_s, self._sweep)

    def __len__(self) -> int:
        """Deadlines still queued (answered requests included until their deadline)."""
        return sum(len(q) for q in self._queues.values())

    def _sweep(self) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        for timeout_s, queue in list(self._queues.items()):
            while queue and queue[0][0] <= now:
                _, key, ref = queue.popleft()
                fut = ref()
                if fut is not None and not fut.done():
                    self._on_expire(key, fut, timeout_s)
            if not queue:
                del self._queues[timeout_s]
        self._timer = loop.call_later(self._every_s, self._sweep) if self._queues else None
