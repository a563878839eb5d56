"""Test-only stand-ins: an HA master whose slaves the test moves by hand, and a role source."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from broker.quorum.group import GroupView
from nameserver.client import GroupPolicy


@dataclass
class FakeSlave:
    broker_id: int
    acked: int = -1
    connected: bool = True
    caught_up_at: float = 0.0


@dataclass
class FakeHAMaster:
    """``broker.ha.HAMaster`` in memory: :meth:`ack` moves a slave and wakes waiters."""

    slave_map: dict[int, FakeSlave] = field(default_factory=dict)
    waits: list[tuple[int, int, float, frozenset[int] | None]] = field(default_factory=list)
    _changed: asyncio.Condition | None = None

    def slaves(self) -> Mapping[int, FakeSlave]:
        return self.slave_map

    def slave_states(self) -> Mapping[int, FakeSlave]:
        return self.slave_map

    def add(self, broker_id: int, acked: int = -1, connected: bool = True) -> FakeSlave:
        s = self.slave_map[broker_id] = FakeSlave(broker_id, acked, connected)
        return s

    async def ack(self, broker_id: int, offset: int) -> None:
        self.slave_map[broker_id].acked = offset
        async with self._cond():
            self._cond().notify_all()

    def _cond(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    def _count(self, offset: int, among: Collection[int] | None) -> int:
        return sum(
            1
            for i, s in self.slave_map.items()
            if s.connected and s.acked >= offset and (among is None or i in among)
        )

    async def wait_for(
        self, offset: int, count: int, timeout_s: float, among: Collection[int] | None = None
    ) -> bool:
        self.waits.append((offset, count, timeout_s, None if among is None else frozenset(among)))
        cond = self._cond()
        async with cond:
            try:
                await asyncio.wait_for(
                    cond.wait_for(lambda: self._count(offset, among) >= count), timeout_s
                )
            except TimeoutError:
                return False
        return True


class FakeRoles:
    """A role source whose view and fence reason the test sets."""

    def __init__(self, view: GroupView | None, why: str | None = None) -> None:
        self.view = view
        self.why = why

    def writable(self) -> str | None:
        return self.why


def view(
    self_id: int = 1,
    isr: Collection[int] = (1,),
    alive: Collection[int] = (1, 2, 3),
    policy: GroupPolicy | None = None,
    master_id: int | None = None,
    master_epoch: int = 1,
    isr_epoch: int = 1,
) -> GroupView:
    return GroupView(
        "g",
        self_id,
        self_id if master_id is None else master_id,
        "127.0.0.1:10911",
        master_epoch,
        frozenset(isr),
        isr_epoch,
        frozenset(alive),
        policy or GroupPolicy(),
    )


def bump_epoch(v: GroupView, master_id: int) -> GroupView:
    return replace(v, master_id=master_id, master_epoch=v.master_epoch + 1)
