"""The one read loop both ends of an HA connection share: the next event of a sans-I/O decoder.

Reads at most ``READ_BYTES`` at a time, each within ``idle_timeout`` (research/broker.md §5:
a connection silent that long is closed), until the decoder has a whole event.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, TypeVar

from broker.ha.protocol import NeedData

READ_BYTES = 64 * 1024
E = TypeVar("E", covariant=True)


class Decoder(Protocol[E]):
    def next_event(self) -> E | NeedData: ...

    def receive_data(self, data: bytes) -> None: ...


async def next_event(
    reader: asyncio.StreamReader, dec: Decoder[E], idle_timeout: float, peer: str
) -> E:
    """The decoder's next event; ConnectionError naming ``peer`` when the far end closes."""
    while True:
        ev = dec.next_event()
        if not isinstance(ev, NeedData):
            return ev
        async with asyncio.timeout(idle_timeout):  # no task per read, as wait_for makes
            data = await reader.read(READ_BYTES)
        if not data:
            raise ConnectionError(f"the {peer} closed the connection")
        dec.receive_data(data)
