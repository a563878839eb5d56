"""Propose-and-wait: a small registry of waiting proposers, keyed by request id.

Like etcd's ``pkg/wait``: the proposer registers its (client_id, seq) before it
proposes, the apply thread triggers it with the result once the entry is applied
here. Waiters live on an asyncio loop; the apply thread resolves a whole apply
group with one ``call_soon_threadsafe`` per loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Hashable, Iterable
from typing import Any


class Wait:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[Hashable, asyncio.Future[Any]] = {}

    def register(self, key: Hashable) -> asyncio.Future[Any]:
        """Register ``key`` on the running loop. Raises KeyError if it is already waiting."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if key in self._waiters:
                raise KeyError(f"duplicate request id {key!r}")
            self._waiters[key] = fut
        return fut

    def cancel(self, key: Hashable) -> None:
        with self._lock:
            self._waiters.pop(key, None)

    def trigger_many(self, results: Iterable[tuple[Hashable, Any]]) -> None:
        """Resolve waiters from any thread. Unknown keys are ignored (others' proposals)."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]]
        by_loop = defaultdict(list)
        with self._lock:
            for key, value in results:
                fut = self._waiters.pop(key, None)
                if fut is not None:
                    by_loop[fut.get_loop()].append((fut, value))
        running = asyncio._get_running_loop()  # applied on a waiters' loop: settle now
        for loop, items in by_loop.items():
            if loop is running:
                _settle(items)
                continue
            try:
                loop.call_soon_threadsafe(_settle, items)
            except RuntimeError:  # loop closed: nobody is waiting any more
                pass

    def fail(self, key: Hashable, error: BaseException) -> None:
        with self._lock:
            fut = self._waiters.pop(key, None)
        if fut is not None:
            try:
                fut.get_loop().call_soon_threadsafe(_settle, [(fut, error)])
            except RuntimeError:
                pass

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiters)


def _settle(items: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for fut, value in items:
        if fut.done():
            continue
        if isinstance(value, BaseException):
            fut.set_exception(value)
        else:
            fut.set_result(value)
