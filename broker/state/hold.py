"""Long polling's parking lot (RocketMQ 4.9's
``broker/longpolling/PullRequestHoldService.java:66-168``).

A PULL_MESSAGE that finds nothing new waits here, per ``topic@queueId``, until a message
is stored in that queue (:meth:`notify`, called by the write path) or its time is up. The
waiter then re-runs its pull once without suspension and answers with the original opaque.
"""

from __future__ import annotations

import asyncio
import contextlib

Key = tuple[str, int]


class PullHold:
    def __init__(self) -> None:
        self._waiters: dict[Key, set[asyncio.Future[None]]] = {}

    @property
    def parked(self) -> int:
        return sum(len(w) for w in self._waiters.values())

    def notify(self, topic: str, queue_id: int) -> None:
        for fut in self._waiters.pop((topic, queue_id), set()):
            if not fut.done():
                fut.set_result(None)

    def notify_all(self) -> None:
        """Wake every parked pull (the readable limit moved)."""
        for key in list(self._waiters):
            self.notify(*key)

    async def wait(self, topic: str, queue_id: int, timeout_s: float) -> bool:
        """True if woken by a new message before ``timeout_s``."""
        return await self.wait_any([(topic, queue_id)], timeout_s)

    async def wait_any(self, keys: list[Key], timeout_s: float) -> bool:
        """True if woken by a new message in any of ``keys`` before ``timeout_s`` (a POP
        across every queue of a topic waits on all of them)."""
        if timeout_s <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters.setdefault(key, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        with contextlib.suppress(KeyError):
                            del self._waiters[key]
