"""The committable source offset of one source queue: the contiguous low watermark of messages
the destination acknowledged (or the operator's policy dismissed).

A source offset is committed only up to the contiguous low watermark of messages the
destination acknowledged; a failed send holds the commit at its offset until it
is acknowledged after a resend, or dismissed by the explicit dismiss policy, which counts it.
RocketMQ offsets are consume-queue indices (PULL_MESSAGE answers carry
``nextBeginOffset``; a consumer offset is the *next* message to consume), so the committed
value is the lowest offset not yet done: a restart pulls from there and nothing is skipped.

Sans-I/O and single-threaded: the source loop calls :meth:`QueueWatermark.pulled` in offset
order, the sink's completions call :meth:`~QueueWatermark.acked` in any order::

    w = QueueWatermark(start=100)
    for o in (100, 101, 102):
        w.pulled(o)
    w.acked(101); w.committable        # 100: 100 is still in flight
    w.failed(100); w.dismissed(100)    # the policy gave up on it: counted, then passed
    w.committable                      # 102
    w.acked(102); w.committable        # 103

Offsets may skip (a pull's ``nextBeginOffset`` passes messages the source filtered out):
:meth:`~QueueWatermark.advance` says so, and offsets below it that were never pulled count as
done.
"""

from __future__ import annotations

from collections import deque

__all__ = ["QueueWatermark"]


class QueueWatermark:
    """The contiguous low watermark of one source queue (see the module docstring).

    Misuse (an offset pulled twice or out of order, an ack of an offset not in flight) is a
    bug of the caller and raises ``ValueError`` without changing anything."""

    def __init__(self, start: int) -> None:
        _check_offset("start", start)
        #: the next offset the source may hand out: every offset below it is pulled or skipped
        self._next = start
        self._pending: deque[int] = deque()  # pulled and not yet done, in offset order...
        self._done: set[int] = set()  # ... except these, done out of order
        self._failed: set[int] = set()
        self.dismissed_count = 0
        self.acked_count = 0

    # ----------------------------------------------------------------- events

    def pulled(self, offset: int) -> None:
        """The source handed out the message at ``offset`` (in offset order)."""
        _check_offset("offset", offset)
        if offset < self._next:
            raise ValueError(
                f"pulled offset {offset} is below the next expected offset {self._next}: "
                "pulled twice or out of order"
            )
        self._pending.append(offset)
        self._next = offset + 1

    def advance(self, next_offset: int) -> None:
        """The source's next offset is ``next_offset``: offsets below it not pulled yet were
        filtered out by the source and need no ack (a pull's ``nextBeginOffset``)."""
        _check_offset("next_offset", next_offset)
        if next_offset < self._next:
            raise ValueError(f"advance to {next_offset}: offsets up to {self._next} were pulled")
        self._next = next_offset

    def acked(self, offset: int) -> None:
        """The destination stored the message at ``offset`` (any order)."""
        self._finish(offset)
        self.acked_count += 1

    def failed(self, offset: int) -> None:
        """Sending ``offset`` failed: it holds the watermark until :meth:`acked` (a resend
        succeeded) or :meth:`dismissed`."""
        self._check_in_flight(offset)
        self._failed.add(offset)

    def dismissed(self, offset: int) -> None:
        """The dismiss policy gave up on ``offset``: counted, then treated as acknowledged."""
        self._finish(offset)
        self.dismissed_count += 1

    def moved(self, new_next: int) -> None:
        """OFFSET_ILLEGAL: the source has no message at our offset (retention deleted it, or
        the queue was reset); pulling restarts at ``new_next``. Only with nothing in flight."""
        _check_offset("new_next", new_next)
        if self._pending:
            raise ValueError(
                f"moved to {new_next} with {self.in_flight} message(s) in flight "
                f"(lowest {self.committable}): wait for them first"
            )
        self._next = new_next

    # ----------------------------------------------------------------- state

    @property
    def committable(self) -> int:
        """The offset to commit: the lowest pulled offset not done, else the next offset
        the source hands out (1 + the highest pulled, or where :meth:`advance` or
        :meth:`moved` put it, or ``start``)."""
        return self._pending[0] if self._pending else self._next

    @property
    def next_offset(self) -> int:
        """Where the next pull starts."""
        return self._next

    @property
    def in_flight(self) -> int:
        """Messages pulled and neither acknowledged nor dismissed."""
        return len(self._pending) - len(self._done)

    @property
    def failed_offsets(self) -> list[int]:
        """Offsets whose send failed and that are still in flight, ascending."""
        return sorted(self._failed)

    def is_in_flight(self, offset: int) -> bool:
        return (
            bool(self._pending)
            and self._pending[0] <= offset
            and offset not in self._done
            and _contains(self._pending, offset)
        )

    # ----------------------------------------------------------------- inside

    def _check_in_flight(self, offset: int) -> None:
        if not self.is_in_flight(offset):
            raise ValueError(
                f"offset {offset} is not in flight (pulled and not yet acked or dismissed)"
            )

    def _finish(self, offset: int) -> None:
        self._check_in_flight(offset)
        self._failed.discard(offset)
        if offset == self._pending[0]:
            self._pending.popleft()
            while self._pending and self._pending[0] in self._done:
                self._done.discard(self._pending.popleft())
        else:
            self._done.add(offset)


def _contains(pending: deque[int], offset: int) -> bool:
    """``offset in pending`` for an ascending deque: dense offsets make it an index lookup."""
    first = pending[0]
    i = offset - first
    if i < len(pending) and pending[i] == offset:
        return True  # the usual case: no gaps below it
    lo, hi = 0, len(pending)
    while lo < hi:  # offsets skipped (advance): binary search
        mid = (lo + hi) // 2
        if pending[mid] < offset:
            lo = mid + 1
        else:
            hi = mid
    return lo < len(pending) and pending[lo] == offset


def _check_offset(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int ({value!r})")
