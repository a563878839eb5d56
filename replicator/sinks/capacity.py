"""The codec sink's ``max_in_flight`` bound: a unit per unconfirmed message."""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["Capacity"]


class Capacity:
    """``max_in_flight``: a unit per unconfirmed message, taken at submit and given back when
    the message leaves its lane's ledger (a semaphore whose uncontended take is a plain
    decrement, without a coroutine, and whose release needs no callback per message)."""

    def __init__(self, units: int) -> None:
        self.free = units
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_take(self) -> bool:
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        if self.try_take():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # give() hands this waiter a unit
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give(1)  # handed a unit, then cancelled: pass it on
            else:
                self._waiters.remove(waiter)
            raise

    def give(self, units: int) -> None:
        while units > 0:
            while self._waiters and self._waiters[0].done():
                self._waiters.popleft()  # cancelled
            if not self._waiters:
                self.free += units
                return
            self._waiters.popleft().set_result(None)
            units -= 1
