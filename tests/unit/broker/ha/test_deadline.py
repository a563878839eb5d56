"""broker.ha.stream.Deadline: one timer, pushed back by activity, fires once it is due."""

from __future__ import annotations

import asyncio
import time

from broker.ha.stream import Deadline


def test_a_pushed_deadline_fires_only_after_the_activity_stops() -> None:
    async def main() -> None:
        fired: list[float] = []
        t0 = time.monotonic()
        d = Deadline(0.5, lambda: fired.append(time.monotonic() - t0))
        for _ in range(6):  # activity every 50 ms for 300 ms: not due meanwhile
            await asyncio.sleep(0.05)
            assert not fired
            d.push()
        pushed = time.monotonic() - t0
        deadline = time.monotonic() + 5.0
        while not fired and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(fired) == 1 and fired[0] >= pushed + 0.45 and d.fired and d.is_due()
        d.cancel()

    asyncio.run(main())


def test_a_repeating_deadline_fires_every_delay_and_cancel_stops_it() -> None:
    async def main() -> None:
        fired: list[int] = []
        d = Deadline(0.05, lambda: fired.append(1), repeat=True)
        deadline = time.monotonic() + 5.0
        while len(fired) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(fired) >= 3
        d.cancel()
        n = len(fired)
        await asyncio.sleep(0.15)
        assert len(fired) == n

    asyncio.run(main())
