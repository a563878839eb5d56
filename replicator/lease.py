"""One active worker per job: an election in metaledger, and the fence every action checks.

Both replicators run as several processes per job, one active (docs/redis-replicator.md,
"Active and standby"; docs/rocketmq-replicator.md, "Workers, leases and queue claims").
:class:`ActiveRole` campaigns in the election ``replicators/<kind>/<job>`` with a lease it keeps
alive; the leader key's create revision is the fencing token every offset commit carries, so the
server refuses a commit from a worker whose lease is gone or that a newer worker replaced. Sends are
not fenced by the server (the broker knows nothing of leases), so :meth:`ActiveRole.check` runs
before each one: it fails once the keeper has lost the lease *or* the local deadline (last renewal
sent + TTL) has passed. A worker paused past its TTL wakes with its monotonic clock past the
deadline and stops before it sends anything; it cannot be fooled by a keeper thread that has not run
yet.

Checking before a send is not enough: a pass blocked elsewhere (a pull, a send in flight, idle)
would run on, and its sink resend, past the deadline. :func:`watch_lease` ends a pass at the
deadline whatever it is doing; both replicators run it beside their passes, with
:meth:`ActiveRole.expires_at` or :meth:`replicator.rocketmq.assign.Membership.expires_at`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NoReturn

from nameserver.client import (
    Client,
    ClientError,
    Compare,
    Comparison,
    Election,
    KeepAlive,
    LeaseLost,
)

__all__ = ["LEASE_WATCH_S", "ActiveRole", "Fence", "LeaseLost", "lease_deadline", "watch_lease"]

#: how often :func:`watch_lease` looks whether the keeper has lost the lease (the deadline
#: itself is waited for exactly)
LEASE_WATCH_S = 0.1


def lease_deadline(keeper: KeepAlive, where: str) -> float:
    """``time.monotonic()`` from which the lease ``keeper`` renews may have run out (the last
    renewal sent + TTL); LeaseLost once the keeper lost it or that time has come."""
    if not keeper.alive:
        raise LeaseLost(f"{where}: lease lost ({keeper.error})")
    if time.monotonic() >= keeper.expires_at:
        raise LeaseLost(f"{where}: lease not renewed within its TTL of {keeper.ttl_s}s")
    return keeper.expires_at


async def watch_lease(
    expires_at: Callable[[], float],
    *,
    poll_s: float = LEASE_WATCH_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> NoReturn:
    """Raise LeaseLost once the lease may have run out: at ``expires_at()`` unless a renewal
    moved it, or within ``poll_s`` of the keeper losing it (``expires_at`` raising). Run it
    beside a pass and end the pass when it raises."""
    while True:
        remaining = expires_at() - clock()
        if remaining <= 0:
            raise LeaseLost(f"lease not renewed by its deadline ({-remaining:.3f} s ago)")
        await sleep(min(remaining, poll_s))


@dataclass(frozen=True, slots=True)
class Fence:
    """What an offset commit carries: the lease and the token (the leader key's revision)."""

    lease_id: int
    token: int
    #: the election's leader key: ``Compare.create(key) == token`` guards a KV write
    key: bytes = b""

    def is_owner(self) -> Comparison:
        """The txn guard "still the active worker" (etcd's ``IsOwner``)."""
        return Compare.create(self.key) == self.token


class ActiveRole:
    """``acquire()`` blocks until this worker is the job's active one (call it off the event
    loop); ``check()`` before every send and commit; ``release()`` resigns."""

    def __init__(self, client: Client, kind: str, job: str, worker: str, ttl_s: int = 10) -> None:
        self.name = f"replicators/{kind}/{job}"
        self.worker = worker
        self.ttl_s = ttl_s
        self._election: Election = client.election(self.name)
        self._fence: Fence | None = None
        self.lost_reason: str | None = None

    def acquire(self, timeout_s: float | None = None) -> Fence:
        self.lost_reason = None
        key = self._election.campaign(
            self.worker, ttl_s=self.ttl_s, timeout_s=timeout_s, on_lost=self._lost
        )
        self._fence = Fence(key.lease, key.rev, key.key)
        return self._fence

    def _lost(self, why: str) -> None:
        self.lost_reason = why

    @property
    def fence(self) -> Fence:
        self.check()
        assert self._fence is not None
        return self._fence

    def check(self) -> None:
        """Raise LeaseLost unless this worker is still certainly the active one."""
        self.expires_at()

    def expires_at(self) -> float:
        """``time.monotonic()`` from which :meth:`check` fails unless the lease is renewed
        (LeaseLost when it fails already)."""
        keeper = self._election.keeper
        if self._fence is None or keeper is None:
            raise LeaseLost(f"{self.name}: not the active worker")
        return lease_deadline(keeper, self.name)

    @property
    def active(self) -> bool:
        try:
            self.check()
        except LeaseLost:
            return False
        return True

    def active_worker(self) -> str | None:
        """Who is active now (any worker's view), None when nobody is."""
        kv = self._election.leader()
        return None if kv is None else kv.value.decode(errors="replace")

    def release(self) -> None:
        fence, self._fence = self._fence, None
        if fence is not None:
            # lost already (FailedPrecondition), or unreachable: the lease is revoked or
            # expires either way
            with contextlib.suppress(ClientError):
                self._election.resign()
