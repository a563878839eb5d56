"""Dialling a peer again: a back-off, or a connect, cut short when the peer dials in.

A member whose paths to a peer are down dials it in a loop (a connect within
``DIAL_TIMEOUT_S``, then a pause that doubles up to ``DIAL_RETRY_MAX_S``; see
:mod:`raftlog.native.transport`). After a healed partition that loop can be up to 1.5 s
from its next SYN, while the peer's own loop may already have reached this member: its
inbound handshake sets the path's ``wake`` event, and these helpers stop waiting for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def open_unless_woken(opening: Coroutine[Any, Any, T], wake: asyncio.Event) -> T | None:
    """``await opening``, or None (``opening`` cancelled) if ``wake`` is set first; the
    event is cleared before it starts, so only a dial-in from now on counts."""
    wake.clear()
    task = asyncio.ensure_future(opening)
    woken = asyncio.ensure_future(wake.wait())
    try:
        await asyncio.wait((task, woken), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this dialler was cancelled: so is its connect
        task.cancel()
        raise
    finally:
        woken.cancel()
    if not task.done():
        task.cancel()
        try:
            return await task  # (connected just now after all: keep it)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # cancelled ourselves meanwhile
            return None
    return task.result()


async def pause(wake: asyncio.Event, delay: float) -> None:
    """Sleep ``delay``, less if ``wake`` is set meanwhile (at once if it already is)."""
    if not wake.is_set():
        try:
            await asyncio.wait_for(wake.wait(), delay)
        except TimeoutError:
            pass
