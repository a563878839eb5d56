"""The one read loop both ends of an HA connection share: the next event of a sans-I/O decoder.

Reads at most ``READ_BYTES`` at a time, each within ``idle_timeout`` (a connection silent that
long is closed, as RocketMQ's HA closes one after 20 s without reads), until the decoder has a whole
event. A :class:`Deadline` keeps such a timeout (and the master's heartbeat interval) with one timer
re-armed when it fires, not one per read or frame as ``asyncio.timeout`` makes: a timer
costs more than the rest of reading an ack.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol, TypeVar

from broker.ha.protocol import NeedData

READ_BYTES = 64 * 1024
E = TypeVar("E", covariant=True)


class Decoder(Protocol[E]):
    def next_event(self) -> E | NeedData: ...

    def receive_data(self, data: bytes) -> None: ...


class Deadline:
    """Due ``delay`` s after the last :meth:`push`; then ``on_due()`` runs (once; again
    after each further ``delay`` with ``repeat``). Create it on the running loop."""

    def __init__(self, delay: float, on_due: Callable[[], object], repeat: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self.delay = delay
        self.on_due = on_due
        self.repeat = repeat
        self.fired = False
        self.due = self._loop.time() + delay
        self._handle: asyncio.TimerHandle | None = self._loop.call_at(self.due, self._check)

    def push(self) -> None:
        """Activity: due ``delay`` s from now (the timer moves when it fires)."""
        self.due = self._loop.time() + self.delay

    def is_due(self) -> bool:
        return self._loop.time() >= self.due

    def _check(self) -> None:
        self._handle = None
        now = self._loop.time()
        if now < self.due:
            self._handle = self._loop.call_at(self.due, self._check)
            return
        self.fired = True
        self.on_due()
        if self.repeat:
            self._handle = self._loop.call_at(now + self.delay, self._check)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


async def next_event(
    reader: asyncio.StreamReader,
    dec: Decoder[E],
    idle_timeout: float,
    peer: str,
    idle: Deadline | None = None,
) -> E:
    """The decoder's next event; ConnectionError naming ``peer`` when the far end closes.

    ``idle``: a :class:`Deadline` of ``idle_timeout`` whose ``on_due`` aborts the transport
    (the read then ends: TimeoutError); without it each read has its own timeout."""
    while True:
        ev = dec.next_event()
        if not isinstance(ev, NeedData):
            return ev
        if idle is None:
            async with asyncio.timeout(idle_timeout):  # no task per read, as wait_for makes
                data = await reader.read(READ_BYTES)
        else:
            data = await reader.read(READ_BYTES)
            idle.push()
        if not data:
            if idle is not None and idle.fired:
                raise TimeoutError(f"nothing from the {peer} for {idle_timeout:g} s")
            raise ConnectionError(f"the {peer} closed the connection")
        dec.receive_data(data)
