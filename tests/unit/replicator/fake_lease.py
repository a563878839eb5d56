"""A lease keeper for the replicators' unit tests: what ``replicator.lease.lease_deadline``
reads of a ``KeepAlive``, set by the test (a renewal moves ``expires_at``, a lost lease
clears ``alive``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FakeKeeper:
    expires_at: float
    alive: bool = True
    error: str | None = None
    ttl_s: int = 1
    lease_id: int = 7
