"""RateLimiter, the worker's token bucket (``--rate``), on a fake clock: off at 0 (never
sleeps), and over any span it lets through the rate times the span plus at most its burst
(a tenth of a second's worth), no fewer than the rate allows."""

from __future__ import annotations

import asyncio

import pytest

from replicator.rocketmq.source import RateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0
        self.slept = 0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.slept += 1
        self.t += seconds


def test_zero_is_no_limit() -> None:
    clock = FakeClock()
    limiter = RateLimiter(0, clock.now, clock.sleep)

    async def go() -> None:
        for _ in range(10_000):
            await limiter.take()

    asyncio.run(go())
    assert clock.slept == 0 and clock.t == 0.0


@pytest.mark.parametrize("rate", [1.0, 50.0, 2000.0, 100_000.0])
def test_takes_follow_the_rate(rate: float) -> None:
    clock = FakeClock()
    limiter = RateLimiter(rate, clock.now, clock.sleep)
    n = int(rate * 3) + 5

    async def go() -> list[float]:
        out = []
        for _ in range(n):
            await limiter.take()
            out.append(clock.t)
        return out

    times = asyncio.run(go())
    burst = max(1.0, rate / 10)
    for i, t in enumerate(times):
        assert i + 1 <= burst + rate * t + 1e-6, (i, t)  # never ahead of the bucket
    # and not behind it: the last take came as soon as the rate allowed
    assert times[-1] == pytest.approx((n - burst) / rate, rel=1e-6, abs=1e-9)
