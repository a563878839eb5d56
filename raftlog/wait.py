"""Propose-and-wait: a small registry of waiting proposers, keyed by request id.

Like etcd's ``pkg/wait``: the proposer registers its (client_id, seq) before it
proposes, apply triggers it with the result once the entry is applied here. Waiters live
on an asyncio loop; apply resolves a whole apply group with one call per loop
(direct when it runs on that loop, ``call_soon_threadsafe`` from the apply thread).
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
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
        for loop, items in by_loop.items():
            run_on(loop, _settle, items)

    def fail(self, key: Hashable, error: BaseException) -> None:
        with self._lock:
            fut = self._waiters.pop(key, None)
        if fut is not None:
            run_on(fut.get_loop(), _settle, [(fut, error)])

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiters)


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or None (never raises)."""
    return asyncio._get_running_loop()


def run_on(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    """``fn(*args)`` on ``loop``: at once when called on it (the engine and apply share the
    proposers' loop), else handed over with ``call_soon_threadsafe``; nothing if the loop is
    closed (nobody waits any more)."""
    if running_loop() is loop:
        fn(*args)
        return
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass


def _settle(items: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for fut, value in items:
        if fut.done():
            continue
        if isinstance(value, BaseException):
            fut.set_exception(value)
        else:
            fut.set_result(value)
