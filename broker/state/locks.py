"""Queue locks of orderly consumers (LOCK_BATCH_MQ 41 / UNLOCK_BATCH_MQ 42).

RocketMQ's ``RebalanceLockManager`` (RocketMQ 4.9's
``broker/client/rebalance/RebalanceLockManager.java:32-33``): a lock is per (group, topic, queue),
held by one client id, and expires ``expiry_ms`` (60 s) after its last renewal; a client re-locking
what it holds renews.
"""

from __future__ import annotations

from dataclasses import dataclass

LockKey = tuple[str, str, int]  # group, topic, queue id


@dataclass
class _Lock:
    client_id: str
    renewed_ms: int


class LockManager:
    def __init__(self, expiry_ms: int = 60_000) -> None:
        self.expiry_ms = expiry_ms
        self._locks: dict[LockKey, _Lock] = {}

    def try_lock(
        self, group: str, queues: list[tuple[str, int]], client_id: str, now_ms: int
    ) -> list[tuple[str, int]]:
        """The queues now held by ``client_id`` (free, expired or already its own ones)."""
        got = []
        for topic, qid in queues:
            key = (group, topic, qid)
            held = self._locks.get(key)
            if (
                held is None
                or held.client_id == client_id
                or now_ms - held.renewed_ms > self.expiry_ms
            ):
                self._locks[key] = _Lock(client_id, now_ms)
                got.append((topic, qid))
        return got

    def unlock(self, group: str, queues: list[tuple[str, int]], client_id: str) -> None:
        for topic, qid in queues:
            key = (group, topic, qid)
            held = self._locks.get(key)
            if held is not None and held.client_id == client_id:
                del self._locks[key]

    def holder(self, group: str, topic: str, qid: int, now_ms: int) -> str | None:
        held = self._locks.get((group, topic, qid))
        if held is None or now_ms - held.renewed_ms > self.expiry_ms:
            return None
        return held.client_id
