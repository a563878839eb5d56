"""An active pass ends once its lease may have run out, whether or not it is sending then:
the sink resends on its own, and only the pass's end closes it (dropping what its
connections hold). A worker cut off metaledger and the broker at once used to keep its pass
until the heal, and its sink's requests reached the broker in its successor's term
(tests/faults/net/test_replicator_partitions.py)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from replicator.lease import LEASE_WATCH_S, ActiveRole, Fence, LeaseLost
from replicator.redis.replicator import _Pass
from tests.unit.replicator.fake_lease import FakeKeeper as Keeper


class Client:
    def __init__(self, keeper: Keeper) -> None:
        self.keeper = keeper

    def election(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(keeper=self.keeper)


def role_with(keeper: Keeper) -> ActiveRole:
    role = ActiveRole(Client(keeper), "redis", "job", "w")  # type: ignore[arg-type]
    role._fence = Fence(1, 1, b"k")
    return role


def watch(keeper: Keeper, renew: float = 0.0, lose_at: float | None = None) -> float:
    """Run the pass's lease watch (the keeper renewing for ``renew`` s, or losing the lease
    at ``lose_at``); the seconds until it ended the pass with LeaseLost."""
    role = role_with(keeper)

    async def keep() -> None:
        started = time.monotonic()
        while time.monotonic() - started < renew:
            keeper.expires_at = time.monotonic() + 0.3
            await asyncio.sleep(0.05)
        if lose_at is not None:
            await asyncio.sleep(max(0.0, started + lose_at - time.monotonic()))
            keeper.alive, keeper.error = False, "revoked"

    async def main() -> float:
        started = time.monotonic()
        keeping = asyncio.create_task(keep())
        with pytest.raises(LeaseLost):
            owner = SimpleNamespace(owner=SimpleNamespace(role=role))
            await asyncio.wait_for(_Pass._lease_watch(owner), 10)  # type: ignore[arg-type]
        keeping.cancel()
        return time.monotonic() - started

    return asyncio.run(main())


def test_the_pass_ends_at_the_lease_deadline() -> None:
    took = watch(Keeper(time.monotonic() + 0.3))
    assert 0.25 <= took < 0.3 + 0.2, took


def test_renewals_keep_it_going_and_it_ends_a_ttl_after_the_last() -> None:
    took = watch(Keeper(time.monotonic() + 0.3), renew=0.6)
    assert 0.8 <= took < 0.9 + 0.2, took


def test_a_lease_the_keeper_lost_ends_it_within_the_watch_interval() -> None:
    took = watch(Keeper(time.monotonic() + 60), lose_at=0.3)
    assert 0.3 <= took < 0.3 + LEASE_WATCH_S + 0.2, took
