"""Dialling a peer again: connects that overlap, a back-off, both cut short when the peer
dials in.

A member whose paths to a peer are down dials it in a loop (see
:mod:`raftlog.native.transport`). A connect whose SYN a partition dropped sends no other
for a second (the kernel's first SYN retransmission), and before that SYN is given up
nothing else goes out: with one connect at a time a healed partition waited up to a whole
connect (1 s) and a pause (0.5 s) for the next SYN, about 1 s in the runs of
``tests/faults/net`` where every dialler's connect was in flight at the heal.
:func:`connect_racing` starts another connect every :data:`SYN_EVERY_S` while none has
answered, each given up after its own timeout, so a SYN leaves every quarter second and a
peer with a long round trip still connects (the first connect is not cut short). A
refusal (the peer's host answered: nothing listens) ends the round, and the caller pauses
(:func:`pause`) before the next. The peer's own diallers may reach us first: its inbound
handshake sets the path's ``wake`` event, and both helpers stop waiting for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: while no connect to a peer has answered, another is started this often
SYN_EVERY_S = 0.25


async def connect_racing(
    connect: Callable[[], Awaitable[T]],
    wake: asyncio.Event,
    timeout_s: float,
    every_s: float = SYN_EVERY_S,
    discard: Callable[[T], None] = lambda _: None,
) -> T | None:
    """``connect()``, and again every ``every_s`` while none has answered, each given up
    after ``timeout_s``: the first that connects (the others cancelled, and ``discard``-ed
    if they connected too); None if ``wake`` is set first (cleared before the first
    connect, so only a dial-in from now on counts). An error other than a timeout (a
    refusal, no route) ends it with that error."""
    wake.clear()
    woken = asyncio.ensure_future(wake.wait())
    pending: set[asyncio.Future[T]] = set()
    try:
        while True:
            pending.add(asyncio.ensure_future(asyncio.wait_for(connect(), timeout_s)))
            waiting: set[asyncio.Future[Any]] = {*pending, woken}
            await asyncio.wait(waiting, timeout=every_s, return_when=asyncio.FIRST_COMPLETED)
            for fut in [f for f in pending if f.done()]:
                pending.discard(fut)
                error = fut.exception()
                if error is None:
                    return fut.result()
                if not isinstance(error, TimeoutError):
                    raise error
            if woken.done():
                return None
    finally:
        woken.cancel()
        for fut in pending:
            fut.cancel()
            fut.add_done_callback(lambda f: _discard_connected(f, discard))


def _discard_connected(fut: asyncio.Future[T], discard: Callable[[T], None]) -> None:
    """A connect that completed after all as it was cancelled: its connection is closed."""
    if not fut.cancelled() and fut.exception() is None:
        discard(fut.result())


async def pause(wake: asyncio.Event, delay: float) -> None:
    """Sleep ``delay``, less if ``wake`` is set meanwhile (at once if it already is)."""
    if not wake.is_set():
        try:
            await asyncio.wait_for(wake.wait(), delay)
        except TimeoutError:
            pass
