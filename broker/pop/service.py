"""PopService: POP consumption for both fronts (first version: the API the gRPC front codes
against; the implementation follows in this branch)."""

from __future__ import annotations

from dataclasses import dataclass

from rmq.message import StoredMessage


@dataclass(frozen=True)
class Popped:
    message: StoredMessage  # as stored (topic = the real topic)
    handle: str  # receipt handle
    attempt: int  # 1 on first delivery
    visible_at_ms: int  # when it becomes visible again if not acked


class PopService:
    async def pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_messages: int,
        invisible_ms: int,
        *,
        fifo: bool = False,
        expression: str = "*",
        wait_ms: int = 0,
    ) -> list[Popped]:
        """Up to ``max_messages`` messages of the queue (``queue_id`` -1: every readable
        queue), invisible for ``invisible_ms``."""
        raise NotImplementedError

    async def ack(self, group: str, topic: str, handle: str) -> None:
        raise NotImplementedError

    async def change_invisible(
        self, group: str, topic: str, handle: str, invisible_ms: int
    ) -> Popped:
        raise NotImplementedError

    async def forward_to_dlq(self, group: str, topic: str, handle: str) -> None:
        raise NotImplementedError

    def max_attempts(self, group: str) -> int:
        raise NotImplementedError
