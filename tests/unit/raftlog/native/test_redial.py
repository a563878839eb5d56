"""raftlog.native.redial: a dial or a back-off cut short when the peer dials in."""

from __future__ import annotations

import asyncio
import time

from raftlog.native.redial import open_unless_woken, pause


def test_a_connect_is_given_up_when_the_peer_dials_in_and_kept_otherwise() -> None:
    async def main() -> None:
        wake = asyncio.Event()
        wake.set()  # a dial-in before this attempt does not count: cleared first
        cancelled = asyncio.Event()

        async def hung_connect() -> str:  # a SYN the partition dropped
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return "late"

        loop = asyncio.get_running_loop()
        loop.call_later(0.05, wake.set)
        started = time.monotonic()
        assert await open_unless_woken(hung_connect(), wake) is None
        assert time.monotonic() - started < 5 and cancelled.is_set()

        async def connect() -> str:
            return "connected"

        assert await open_unless_woken(connect(), asyncio.Event()) == "connected"

    asyncio.run(main())


def test_a_pause_ends_early_on_a_dial_in_and_at_once_if_one_came() -> None:
    async def main() -> None:
        wake = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, wake.set)
        started = time.monotonic()
        await pause(wake, 30)
        assert time.monotonic() - started < 5
        started = time.monotonic()
        await pause(wake, 30)  # still set: no wait
        assert time.monotonic() - started < 1
        await pause(asyncio.Event(), 0.01)  # nobody dials in: the whole delay

    asyncio.run(main())
