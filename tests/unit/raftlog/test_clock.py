"""raftlog.clock: steps of the real-time clock move the node's wall clock by at most 0.1 %
of the time that passes, and it never goes backwards."""

from __future__ import annotations

import pytest

from raftlog import clock


class FakeTime:
    def __init__(self) -> None:
        self.mono = 1_000_000_000
        self.real = 1_700_000_000_000_000_000

    def advance(self, s: float) -> None:
        self.mono += int(s * 1e9)
        self.real += int(s * 1e9)

    def monotonic_ns(self) -> int:
        return self.mono

    def time_ns(self) -> int:
        return self.real


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    f = FakeTime()
    monkeypatch.setattr(clock.time, "monotonic_ns", f.monotonic_ns)
    monkeypatch.setattr(clock.time, "time_ns", f.time_ns)
    return f


def test_follows_the_real_time_clock_while_it_does_not_step(fake: FakeTime) -> None:
    c = clock.SteadyWallClock()
    start = c.now_ms()
    assert start == fake.real // 1_000_000
    fake.advance(12.345)
    assert c.now_ms() - start == 12_345


@pytest.mark.parametrize("step_s", [3600.0, -3600.0, 30.0, -30.0])
def test_a_step_moves_it_by_at_most_the_slew(fake: FakeTime, step_s: float) -> None:
    c = clock.SteadyWallClock()
    start = c.now_ns()
    fake.real += int(step_s * 1e9)
    last = start
    for _ in range(100):  # 10 s pass in small ticks
        fake.advance(0.1)
        now = c.now_ns()
        assert now >= last  # never backwards
        last = now
    drift = (last - start) - 10 * 10**9
    assert abs(drift) <= 10 * 10**9 * clock.MAX_SLEW + 100
    assert drift != 0 and (drift > 0) == (step_s > 0)  # it does slew towards the system clock


def test_catches_up_with_a_small_step_and_then_follows_again(fake: FakeTime) -> None:
    c = clock.SteadyWallClock()
    c.now_ns()
    fake.real += 5_000_000  # +5 ms
    for _ in range(60):  # 6 s at 0.1 % slew: 6 ms of room
        fake.advance(0.1)
        c.now_ns()
    assert c.now_ns() == fake.real
