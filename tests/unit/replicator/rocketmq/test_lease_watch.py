"""A RocketMQ replicator's pass ends at its worker's lease deadline, however it is blocked (a
pull in flight, a send in flight, idle), and its sink's connections are aborted then: the
claims went with the lease, and a worker cut off used to keep its pass until a queue next
tried to send, a pull failed or a commit was refused, its sink resending meanwhile
(tests/faults/net/test_replicator_rocketmq_partition.py). The watch itself
(``replicator.lease.watch_lease``, shared with the Redis replicator) runs on a fake clock."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from replicator.lease import LEASE_WATCH_S, LeaseLost, watch_lease
from replicator.rocketmq.assign import Membership
from replicator.rocketmq.replicator import RocketMQReplicator
from replicator.sinks.base import OutMessage
from replicator.sinks.errors import SinkClosed
from replicator.sinks.rocketmq import RocketMQSink, RocketMQSinkConfig
from tests.unit.replicator.fake_lease import FakeKeeper as Keeper
from tests.unit.replicator.sinks.fake_broker import FakeBroker, FakeRoutes

TOPIC = "T"
TTL_S = 0.3


# ---- the watch, on a fake clock ---------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def run_watch(clock: FakeClock, expires_at: object) -> LeaseLost:
    async def main() -> LeaseLost:
        with pytest.raises(LeaseLost) as raised:
            await watch_lease(expires_at, clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
        return raised.value

    return asyncio.run(main())


def test_the_watch_raises_at_the_deadline_and_not_before() -> None:
    clock = FakeClock()
    run_watch(clock, lambda: 102.5)
    assert clock.now == pytest.approx(102.5)
    assert max(clock.sleeps) <= LEASE_WATCH_S  # it looks at the keeper that often


def test_renewals_move_the_deadline() -> None:
    clock = FakeClock()
    # renewed every look for 3 s (each renewal a TTL of 1 s from then), then no more
    last = [0.0]

    def expires_at() -> float:
        if clock.now < 103.0:
            last[0] = clock.now + 1.0
        return last[0]

    run_watch(clock, expires_at)
    assert 104.0 - 1e-9 <= clock.now <= 104.0 + LEASE_WATCH_S


def test_a_lease_the_keeper_lost_ends_it_at_the_next_look() -> None:
    clock = FakeClock()

    def expires_at() -> float:
        if clock.now >= 101.0:
            raise LeaseLost("revoked")
        return 160.0

    assert "revoked" in str(run_watch(clock, expires_at))
    assert 101.0 <= clock.now <= 101.0 + LEASE_WATCH_S + 1e-9


# ---- the membership's deadline ----------------------------------------------------------


def member(keeper: Keeper | None) -> Membership:
    m = Membership(None, "job", "w1")  # type: ignore[arg-type]  # no call reaches the client
    m._keeper = keeper  # type: ignore[assignment]
    return m


def test_membership_expires_at_is_the_keepers_deadline_until_it_passes() -> None:
    soon = time.monotonic() + 30
    assert member(Keeper(soon)).expires_at() == soon
    with pytest.raises(LeaseLost, match="not renewed within its TTL"):
        member(Keeper(time.monotonic() - 0.01)).check()
    with pytest.raises(LeaseLost, match="lease lost \\(revoked\\)"):
        member(Keeper(soon, alive=False, error="revoked")).expires_at()
    with pytest.raises(LeaseLost, match="not a member"):
        member(None).expires_at()
    assert not member(Keeper(time.monotonic() - 0.01)).alive


# ---- the pass, against a fake lease and an in-process broker ----------------------------


def worker(keeper: Keeper) -> RocketMQReplicator:
    """Just what ``_within_lease`` uses: the membership, the queues' tasks, the failure."""
    w = RocketMQReplicator.__new__(RocketMQReplicator)
    w.membership = member(keeper)
    w.tasks = {}
    w._failure = None
    w._wake = asyncio.Event()
    return w


async def forever() -> None:
    await asyncio.Event().wait()


class NoSink:
    closed = False

    async def close(self) -> None:
        self.closed = True


def test_a_blocked_pass_ends_at_the_deadline_and_its_sends_in_flight_are_dropped() -> None:
    """A queue's pull in flight, another's send in flight (the broker holds the answer), the
    pass's loop blocked (a commit to an unreachable metaledger): all end at the deadline."""

    async def main() -> None:
        broker = FakeBroker(lambda r: None)  # holds every answer
        addr = await broker.start()
        sink = RocketMQSink(RocketMQSinkConfig(topics=(TOPIC,)), FakeRoutes(addr))
        await sink.start()
        keeper = Keeper(time.monotonic() + TTL_S)
        w = worker(keeper)
        sent = await sink.submit(OutMessage(TOPIC, 0, b"x", "", "", {}, 0))
        await broker.wait_received(1)
        pulling = asyncio.create_task(forever())
        w.tasks["T/b/0"] = SimpleNamespace(task=pulling)  # type: ignore[assignment]
        started = time.monotonic()
        await asyncio.wait_for(w._within_lease(sink, forever()), 5)
        took = time.monotonic() - started
        assert TTL_S - 0.05 <= took < TTL_S + 0.2, took
        assert w._failure is not None and "lease" in w._failure
        assert pulling.cancelled()
        with pytest.raises(SinkClosed):
            await sent
        # the sink's connection was aborted: the broker's end of it goes away
        deadline = time.monotonic() + 2
        while not all(writer.is_closing() for writer, _, _ in broker.held):
            assert time.monotonic() < deadline, "the sink's connection is still open"
            await asyncio.sleep(0.01)
        assert len(broker.received) == 1  # nothing sent again
        await broker.close()

    asyncio.run(main())


def test_an_idle_pass_ends_at_the_deadline_and_renewals_keep_it() -> None:
    async def main() -> None:
        keeper = Keeper(time.monotonic() + TTL_S)
        w = worker(keeper)

        async def renew(for_s: float) -> None:
            until = time.monotonic() + for_s
            while time.monotonic() < until:
                keeper.expires_at = time.monotonic() + TTL_S
                await asyncio.sleep(0.05)

        sink = NoSink()
        renewing = asyncio.create_task(renew(0.5))
        started = time.monotonic()
        await asyncio.wait_for(w._within_lease(sink, forever()), 5)  # type: ignore[arg-type]
        took = time.monotonic() - started
        await renewing
        assert 0.5 + TTL_S - 0.1 <= took < 0.5 + TTL_S + 0.2, took
        assert sink.closed and w._failure is not None

    asyncio.run(main())


def test_a_pass_that_ends_first_ends_as_it_did() -> None:
    async def main() -> None:
        w = worker(Keeper(time.monotonic() + 30))
        sink = NoSink()

        async def done() -> None:
            await asyncio.sleep(0.05)

        async def broken() -> None:
            raise OSError("pull failed")

        await w._within_lease(sink, done())  # type: ignore[arg-type]
        assert w._failure is None and not sink.closed  # the pass's caller closes it
        with pytest.raises(OSError, match="pull failed"):
            await w._within_lease(sink, broken())  # type: ignore[arg-type]

    asyncio.run(main())
