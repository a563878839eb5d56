"""Errors of the broker's message store.

    StoreError
    ├── DiskFullError          a write met ENOSPC: the put is refused (``send_status`` says what a
    │                          send answers), nothing acknowledged before is lost, reads keep working
    ├── DecodeError            replicated bytes are not well-formed records (names where)
    ├── StoreCorruptionError   a record before the tail of a commit log or consume queue is bad:
    │                          recovery stops and names the file and the byte position
    │   └── DamagedRecordError a record read to be handed out (pull, POP, lookup, HA) fails its
    │                          checks while running: not handed out, and the store is damaged
    └── ConsumeQueueBehindError  a unit would leave a gap in a consume queue (it lost units):
                               the store rebuilds its queues from the start of the commit log

Behaviour is on the class (``retriable``, ``send_status``) so a caller maps an error to an
answer without matching on types one by one.
"""

from __future__ import annotations


class StoreError(Exception):
    """Root of this package's errors."""

    retriable: bool = False
    # the PutMessageStatus name a send maps this error to (RocketMQ's store statuses)
    send_status: str = "UNKNOWN_ERROR"


class DiskFullError(StoreError):
    """A durable write met ENOSPC. The partial write was cut back; earlier messages are intact."""

    retriable = True
    send_status = "SERVICE_NOT_AVAILABLE"  # RocketMQ: store not writeable (disk full)


class DecodeError(StoreError, ValueError):
    """Replicated bytes are not well-formed store records (a record that does not decode is
    ``rmq.message.MalformedMessage``)."""


class StoreCorruptionError(StoreError):
    """A bad record with a valid record after it: not a torn tail, so nothing is cut."""

    def __init__(self, path: str, position: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt record at byte {position}: {reason}")
        self.path = path
        self.position = position
        self.reason = reason


class DamagedRecordError(StoreCorruptionError):
    """A record about to be served or replicated does not check (magic, TOTALSIZE, the
    consume queue's unit, BODYCRC): the bytes changed on disk while the broker ran."""


class ConsumeQueueBehindError(StoreError):
    """A consume queue is behind the commit log past the checkpoint: re-dispatch from the start."""
