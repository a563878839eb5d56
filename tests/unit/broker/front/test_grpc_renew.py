"""Receipt-handle renewal for auto_renew receivers (broker/grpc/renew.py): renewed ahead of its
instant by the proxy's steps for at most the max time, the client's own handle acts on the
renewed one, a gone client's messages come back in a second, refusals forget."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.grpc.renew import RENEW_STEPS_MS, Renewals
from broker.pop.errors import InvalidReceiptHandle
from broker.pop.service import Popped
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from protos.apache.rocketmq.v2 import service_pb2 as svc
from tests.unit.broker.front.test_grpc_consume import (
    CONFIG,
    Context,
    FakeBackend,
    receive,
    stored,
)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000

    def __call__(self) -> int:
        return self.ms


class Pops:
    """change_invisible of a POP service: a new handle, the old one refused from then on."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.current: dict[str, str] = {}  # original -> current
        self.changes: list[tuple[str, int]] = []
        self.gate: asyncio.Event | None = None

    def popped(self, handle: str, visible_in_ms: int = 60_000) -> Popped:
        self.current[handle] = handle
        return Popped(stored(0), handle, 1, self.clock() + visible_in_ms)

    async def change_invisible(self, group: str, topic: str, handle: str, ms: int) -> Popped:
        if self.gate is not None:
            await self.gate.wait()
        original = next((o for o, h in self.current.items() if h == handle), None)
        if original is None:
            raise InvalidReceiptHandle(f"receipt handle is expired or used: {handle}")
        self.current[original] = new = handle + "'"
        self.changes.append((handle, ms))
        return Popped(stored(0), new, 1, self.clock() + ms)


def renewals(clock: Clock, pops: Pops, **kw: Any) -> Renewals:
    return Renewals(lambda: pops, clock=clock, **kw)  # type: ignore[arg-type,return-value]


def test_a_message_is_renewed_ahead_of_its_instant_by_the_steps_until_the_max() -> None:
    async def go() -> None:
        clock = Clock()
        pops = Pops(clock)
        r = renewals(clock, pops, max_ms=4 * 60_000)
        r.track("c1", "G", "T", [pops.popped("h1")])
        assert await r.renew_due() == 0  # 60 s away
        clock.ms += 49_000
        assert await r.renew_due() == 0  # 11 s away
        clock.ms += 1_000
        assert await r.renew_due() == 1
        assert pops.changes == [("h1", RENEW_STEPS_MS[0])]
        clock.ms += 50_000  # 10 s before the renewed instant
        assert await r.renew_due() == 1 and pops.changes[-1] == ("h1'", RENEW_STEPS_MS[1])
        clock.ms += 170_000  # 10 s before it again, 4.7 min after the receive: past the max
        assert await r.renew_due() == 0 and len(r) == 0
        assert len(pops.changes) == 2  # left to become visible at its instant

    asyncio.run(go())


def test_the_clients_handle_acts_on_the_renewed_one_and_forgets_it() -> None:
    async def go() -> None:
        clock = Clock()
        pops = Pops(clock)
        r = renewals(clock, pops)
        r.track("c1", "G", "T", [pops.popped("h1"), pops.popped("h2")])
        clock.ms += 55_000
        assert await r.renew_due() == 2
        assert await r.current("G", "h1") == "h1'"
        assert await r.current("G", "h1") == "h1"  # forgotten: as given
        assert await r.current("OtherGroup", "h2") == "h2"  # another group's key
        assert len(r) == 1

    asyncio.run(go())


def test_current_waits_for_a_renewal_in_flight() -> None:
    async def go() -> None:
        clock = Clock()
        pops = Pops(clock)
        pops.gate = asyncio.Event()
        r = renewals(clock, pops)
        r.track("c1", "G", "T", [pops.popped("h1")])
        clock.ms += 55_000
        renewing = asyncio.create_task(r.renew_due())
        await asyncio.sleep(0)
        asking = asyncio.create_task(r.current("G", "h1"))
        await asyncio.sleep(0)
        assert not asking.done()
        pops.gate.set()
        assert await renewing == 1
        assert await asking == "h1'"

    asyncio.run(go())


def test_a_refused_renewal_forgets_the_message() -> None:
    async def go() -> None:
        clock = Clock()
        pops = Pops(clock)
        r = renewals(clock, pops)
        r.track("c1", "G", "T", [pops.popped("h1")])
        pops.current.clear()  # acked by another path
        clock.ms += 55_000
        assert await r.renew_due() == 0 and len(r) == 0

    asyncio.run(go())


def test_a_gone_clients_messages_are_visible_again_in_a_second() -> None:
    async def go() -> None:
        clock = Clock()
        pops = Pops(clock)
        r = renewals(clock, pops)
        r.track("c1", "G", "T", [pops.popped("h1")])
        r.track("c2", "G", "T", [pops.popped("h2")])
        r.client_gone("c1")
        r.client_gone("nobody")
        for _ in range(3):
            await asyncio.sleep(0)
        assert pops.changes == [("h1", 1_000)]
        assert len(r) == 1 and await r.current("G", "h2") == "h2"

    asyncio.run(go())


def test_at_most_max_tracked_and_the_loop_renews_on_its_own() -> None:
    async def go() -> None:
        clock = Clock()
        pops = Pops(clock)
        r = renewals(clock, pops, max_tracked=2, period_ms=1)
        r.track("c1", "G", "T", [pops.popped(f"h{i}", 5_000) for i in range(3)])
        assert len(r) == 2
        for _ in range(50):
            if len(pops.changes) == 2:
                break
            await asyncio.sleep(0.005)
        assert sorted(h for h, _ in pops.changes) == ["h0", "h1"]

    asyncio.run(go())


def test_the_consumers_track_auto_renew_receives_and_ack_through_the_renewed_handle() -> None:
    from broker.grpc.consume import Consumers

    backend = FakeBackend()
    backend.pops.ready = [stored(0), stored(1)]
    c = Consumers(backend, CONFIG)

    async def go() -> None:
        req = svc.ReceiveMessageRequest(batch_size=32, auto_renew=True)
        req.group.name, req.message_queue.topic.name = "G", "T"
        out = [x async for x in c.ReceiveMessage(req, Context())]
        handles = [x.message.system_properties.receipt_handle for x in out if x.HasField("message")]
        assert len(handles) == 2 and len(c.renewals) == 2
        # a renewal happened meanwhile: the client still acks with the handle it got
        renewed = await backend.pops.change_invisible("G", "T", handles[0], 60_000)
        c.renewals._held[("G", handles[0])].handle = renewed.handle
        ack = svc.AckMessageRequest(entries=[svc.AckMessageEntry(receipt_handle=handles[0])])
        ack.group.name, ack.topic.name = "G", "T"
        assert (await c.AckMessage(ack, Context())).status.code == v2.OK
        assert backend.pops.acked == [renewed.handle] and len(c.renewals) == 1

    asyncio.run(go())
    # a receive without auto_renew tracks nothing
    backend.pops.ready = [stored(2)]
    c2 = Consumers(backend, CONFIG)
    receive(c2)
    assert len(c2.renewals) == 0
