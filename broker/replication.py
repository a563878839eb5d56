"""What the send path asks of replication: may I write, how many replicas must hold it, wait.

The interface between ``broker/send`` and the HA/quorum parts (/tmp/broker-plan.md): a send
asks :meth:`Replication.writable`, then :meth:`Replication.admit` before the append (RocketMQ 5
evaluates needAckNums before it, research/broker.md §6.2), appends, then awaits
:meth:`Replication.wait`. :class:`Standalone` is the one-replica implementation;
``broker.quorum.replication.QuorumReplication`` the master of a replica group.

PutStatus -> response code (research/broker.md §3.1): PUT_OK 0, FLUSH_DISK_TIMEOUT 10,
FLUSH_SLAVE_TIMEOUT 12, SLAVE_NOT_AVAILABLE 11, IN_SYNC_REPLICAS_NOT_ENOUGH 1 (remark
"in-sync replicas not enough", trap 1), SERVICE_NOT_AVAILABLE 14, MESSAGE_ILLEGAL 13.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Admission", "PutStatus", "Replication", "Standalone"]


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"


@dataclass(frozen=True)
class Admission:
    need_acks: int  # replicas incl. the master


class Replication(Protocol):
    def writable(self) -> str | None:
        """None, or why sends are refused (slave, fenced) -> SERVICE_NOT_AVAILABLE with that
        remark."""
        ...

    def admit(self, end_offset: int) -> Admission | PutStatus:
        """Before the append (seed 004 evaluates needAckNums before)."""
        ...

    async def wait(self, next_offset: int, admission: Admission, wait_store_ok: bool) -> PutStatus:
        """After the append."""
        ...

    def readable_limit(self) -> int | None:
        """Commit-log offset consumers may see up to (confirm offset), None = all."""
        ...


class Standalone:
    """One replica: always writable, need 1, PUT_OK at once."""

    def writable(self) -> str | None:
        return None

    def admit(self, end_offset: int) -> Admission | PutStatus:
        return Admission(1)

    async def wait(self, next_offset: int, admission: Admission, wait_store_ok: bool) -> PutStatus:
        return PutStatus.PUT_OK

    def readable_limit(self) -> int | None:
        return None
