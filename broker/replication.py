"""How a replica decides when a stored message may be acknowledged: the ``Replication`` protocol.

The send path (``broker.send``) asks, in order (RocketMQ 5's ``CommitLog.asyncPutMessage``:
needAckNums is evaluated before the append, the wait happens after it, in ``handleHA``):

1. ``writable()``: None, or why this replica refuses sends (a slave, a fenced master):
   SERVICE_NOT_AVAILABLE (14) with that remark;
2. ``admit(end_offset)``: how many replicas (the master included) must hold the message, or
   a refusing :class:`PutStatus` (IN_SYNC_REPLICAS_NOT_ENOUGH: nothing is stored);
3. the store's append;
4. ``await wait(next_offset, admission, wait_store_ok)``: the status the client gets.

``readable_limit()`` bounds what consumers see (5.x: up to the confirm offset;
4.x: every appended message).
:class:`Standalone` is one replica: always writable, one ack (its own), PUT_OK at once.
The HA/quorum implementations live in ``broker.quorum`` and ``broker.ha``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from rmq.codes import ResponseCode


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


#: PutStatus → (response code, remark) as RocketMQ 5's ``SendMessageProcessor.java:378-449``
#: answers; the first four mean "stored on the master". IN_SYNC_REPLICAS_NOT_ENOUGH has no
#: code of its own: SYSTEM_ERROR, "in-sync replicas not enough", and the message is not stored.
RESPONSE: dict[PutStatus, tuple[int, str | None]] = {
    PutStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, None),
    PutStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, None),
    PutStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, None),
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: (
        ResponseCode.SYSTEM_ERROR,
        "in-sync replicas not enough",
    ),
    PutStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "service not available now, the store cannot be written (disk full?)",
    ),
    PutStatus.MESSAGE_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length is too long",
    ),
    PutStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
}


_BY_NAME: dict[str, PutStatus] = {s.value: s for s in PutStatus}


def put_status(name: str) -> PutStatus:
    """The store's status name (``PutResult.status``) as a PutStatus (unknown → UNKNOWN_ERROR).
    A dict lookup: once per send, where ``PutStatus(name)`` costs a microsecond."""
    return _BY_NAME.get(name, PutStatus.UNKNOWN_ERROR)


@dataclass(frozen=True)
class Admission:
    need_acks: int
    """Replicas that must hold the message, the master included."""


class Replication(Protocol):
    def writable(self) -> str | None:
        """None, or why sends are refused now (answered SERVICE_NOT_AVAILABLE). Never raises."""
        ...

    def admit(self, end_offset: int) -> Admission | PutStatus:
        """Before the append at commit-log ``end_offset``: the acks to wait for, or a
        refusing status (nothing is stored then). Never raises."""
        ...

    async def wait(self, next_offset: int, admission: Admission, wait_store_ok: bool) -> PutStatus:
        """After the append (the message ends at ``next_offset``): the status the sender
        gets, once enough replicas hold it or their time ran out. Never raises."""
        ...

    def readable_limit(self) -> int | None:
        """The commit-log offset consumers may read up to (the confirm offset); None = all."""
        ...


class Standalone:
    """One replica and no copies: writable, one ack, PUT_OK at once, everything readable."""

    def writable(self) -> str | None:
        return None

    def admit(self, end_offset: int) -> Admission | PutStatus:
        return Admission(1)

    async def wait(self, next_offset: int, admission: Admission, wait_store_ok: bool) -> PutStatus:
        return PutStatus.PUT_OK

    def readable_limit(self) -> int | None:
        return None
