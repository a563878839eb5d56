"""raftlog.native.redial: connects that overlap, and a dial or a back-off cut short when the
peer dials in.

Found by the partition harness: with one connect at a time every dialler's connect was in
flight at the heal with its SYN dropped, and the first SYN after the heal went up to 1.5 s
later (a connect given up after 1 s, then a 0.5 s pause): a member that was cut off
answered its first write about 1 s after the heal in a third of the faults.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from raftlog.native.redial import connect_racing, pause


class Dials:
    """Connect attempts: the ``answer_at``-th (from 1) connects, earlier ones hang (their
    SYN dropped) until cancelled; each records whether it was cancelled."""

    def __init__(self, answer_at: int | None = None, refuse_at: int | None = None) -> None:
        self.answer_at, self.refuse_at = answer_at, refuse_at
        self.started: list[float] = []
        self.cancelled = 0
        self.closed: list[str] = []
        self.tasks: list[asyncio.Task[object]] = []

    async def connect(self) -> str:
        self.started.append(time.monotonic())
        task = asyncio.current_task()
        assert task is not None
        self.tasks.append(task)
        n = len(self.started)
        if n == self.answer_at:
            return f"conn{n}"
        if n == self.refuse_at:
            raise ConnectionRefusedError("nothing listens")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return "late"

    async def settled(self) -> None:
        """Every connect this round started has finished (the cancelled ones too)."""
        await asyncio.wait(self.tasks)


def test_connects_overlap_until_one_answers_and_the_others_are_cancelled() -> None:
    async def main() -> None:
        dials = Dials(answer_at=3)
        got = await connect_racing(
            dials.connect, asyncio.Event(), timeout_s=30, every_s=0.02, discard=dials.closed.append
        )
        assert got == "conn3"
        assert len(dials.started) == 3  # a SYN every every_s while none answered
        await dials.settled()
        assert dials.cancelled == 2 and dials.closed == []

    asyncio.run(main())


def test_a_connect_past_its_timeout_is_dropped_and_the_next_ones_go_on() -> None:
    async def main() -> None:
        dials = Dials(answer_at=6)
        got = await connect_racing(dials.connect, asyncio.Event(), timeout_s=0.03, every_s=0.02)
        assert got == "conn6"  # the timeouts of the first ones ended nothing

    asyncio.run(main())


def test_a_refusal_ends_the_round_with_its_error() -> None:
    async def main() -> None:
        dials = Dials(refuse_at=2)
        with pytest.raises(ConnectionRefusedError):
            await connect_racing(dials.connect, asyncio.Event(), timeout_s=30, every_s=0.02)
        await dials.settled()
        assert dials.cancelled == 1  # the first, still waiting, is given up

    asyncio.run(main())


def test_a_dial_in_ends_the_round_and_one_before_it_does_not_count() -> None:
    async def main() -> None:
        wake = asyncio.Event()
        wake.set()  # a dial-in before this round does not count: cleared first
        asyncio.get_running_loop().call_later(0.1, wake.set)
        dials = Dials()
        started = time.monotonic()
        assert await connect_racing(dials.connect, wake, timeout_s=30, every_s=0.02) is None
        assert time.monotonic() - started >= 0.09 and len(dials.started) >= 2
        await dials.settled()
        assert dials.cancelled == len(dials.started)

    asyncio.run(main())


def test_a_connect_completing_as_it_is_cancelled_is_closed() -> None:
    async def main() -> None:
        closed: list[str] = []
        gate = asyncio.Event()

        async def connect() -> str:
            try:
                await gate.wait()
            except asyncio.CancelledError:
                return "raced"  # connected just as it was cancelled: no CancelledError
            return "first"

        async def first_answers() -> None:
            await asyncio.sleep(0.05)
            gate.set()

        opener = asyncio.ensure_future(first_answers())
        got = await connect_racing(
            connect, asyncio.Event(), timeout_s=30, every_s=0.01, discard=closed.append
        )
        assert got in ("first", "raced")
        await opener
        for _ in range(5):
            await asyncio.sleep(0)
        assert closed and all(c in ("first", "raced") for c in closed)

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
