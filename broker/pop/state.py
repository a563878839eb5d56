"""One (group, topic, queue) POP book: which offsets are done, in flight, or never popped.

Sans-I/O: the book keeps three numbers and a small set in memory and reads and writes the
per-offset slots through a :class:`Slots` store (:class:`InMemorySlots` here for tests,
:class:`broker.pop.table.FileSlots` on disk). No clock: every call is given ``now_ms``.

- ``low``: every offset below is done (acked, dead-lettered, or filtered out by tag).
- ``next``: the next offset never popped. Offsets in [low, next) each have a slot.
- A slot is ``(visible_at_ms, attempt)``: attempt 0 means done; attempt ≥ 1 means in flight,
  delivered ``attempt`` times, invisible until ``visible_at_ms``. ``visible_at_ms`` 0 is a
  slot restored from metaledger after a failover (:meth:`QueueBook.merge`): visible now,
  and any handle of it may still ack it (its real instant was lost with the old master).
- In memory besides low and next: ``inflight`` (how many slots are in flight),
  ``earliest`` (a lower bound of their visible_at: nothing can have expired before it, so a
  pop scans the slots only once ``now`` passes it) and ``acked`` (offsets acked above low,
  at most :data:`MAX_ACKED_KEPT`, for the progress flushed to metaledger). So memory per
  queue is O(1) whatever the number of messages in flight.

Order of writes (a crash between two leaves a state recovery accepts): a slot before the
bounds that cover it; the bounds say low and next.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Protocol

#: a slot on disk: visible_at_ms (int64), attempt (uint16), flags (uint16, reserved), little-endian
SLOT = struct.Struct("<qHH")
MAX_ATTEMPT = 0xFFFF
#: acked offsets above low kept for the progress in metaledger (more are redelivered after a
#: failover rather than remembered)
MAX_ACKED_KEPT = 1000
NEVER = 1 << 62


class Slots(Protocol):
    """Per-offset slots of one queue and its bounds. Failure contract: an ``OSError`` of the
    backing file propagates; nothing is written half (a slot is one 12-byte write)."""

    def read(self, offset: int) -> tuple[int, int]:
        """(visible_at_ms, attempt) of ``offset``; (0, 0) when never written."""
        ...

    def write(self, offset: int, visible_at_ms: int, attempt: int) -> None: ...

    def clear(self, lo: int, hi: int) -> None:
        """Mark [lo, hi) done (attempt 0)."""
        ...

    def scan(self, lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
        """(offset, visible_at_ms, attempt) for each offset in [lo, hi), in order."""
        ...

    def forget_below(self, offset: int) -> None:
        """Slots below ``offset`` will not be read again (storage may be freed)."""
        ...

    def save_bounds(self, low: int, next_offset: int) -> None: ...


class InMemorySlots:
    """Slots in a dict (tests, and the model of the file)."""

    def __init__(self) -> None:
        self.slots: dict[int, tuple[int, int]] = {}
        self.bounds = (0, 0)

    def read(self, offset: int) -> tuple[int, int]:
        return self.slots.get(offset, (0, 0))

    def write(self, offset: int, visible_at_ms: int, attempt: int) -> None:
        if attempt:
            self.slots[offset] = (visible_at_ms, attempt)
        else:
            self.slots.pop(offset, None)

    def clear(self, lo: int, hi: int) -> None:
        for off in [o for o in self.slots if lo <= o < hi]:
            del self.slots[off]

    def scan(self, lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
        for off in range(lo, hi):
            vis, att = self.slots.get(off, (0, 0))
            yield off, vis, att

    def forget_below(self, offset: int) -> None:
        for off in [o for o in self.slots if o < offset]:
            del self.slots[off]

    def save_bounds(self, low: int, next_offset: int) -> None:
        self.bounds = (low, next_offset)


class Stale(Exception):
    """A handle that names no in-flight delivery of this book (the service says which)."""


class QueueBook:
    def __init__(self, slots: Slots, low: int, next_offset: int) -> None:
        self.slots = slots
        self.low = low
        self.next = max(low, next_offset)
        self.acked: set[int] = set()
        self.inflight = 0
        self.earliest = NEVER
        for off, vis, att in slots.scan(self.low, self.next):
            if att:
                self.inflight += 1
                self.earliest = min(self.earliest, vis)
            elif len(self.acked) < MAX_ACKED_KEPT:
                self.acked.add(off)  # done above low: again in the progress
        self._advance()
        slots.save_bounds(self.low, self.next)

    # ------------------------------------------------------------------ reading
    def state(self, offset: int) -> tuple[int, int]:
        """(visible_at_ms, attempt) of ``offset``; (0, 0) when done or never popped."""
        if not self.low <= offset < self.next:
            return 0, 0
        return self.slots.read(offset)

    def expired(self, now_ms: int, limit: int, fifo: bool = False) -> list[tuple[int, int]]:
        """In-flight offsets visible again at ``now_ms``, in offset order, at most ``limit``:
        (offset, attempt). FIFO stops at the first one still invisible (an offset is never
        redelivered before an earlier one of its queue is done)."""
        if not self.inflight or now_ms < self.earliest or limit <= 0:
            return []
        out: list[tuple[int, int]] = []
        rest = NEVER
        for off, vis, att in self.slots.scan(self.low, self.next):
            if not att:
                continue
            if vis > now_ms:
                if fifo:
                    return out
                rest = min(rest, vis)
            elif len(out) < limit:
                out.append((off, att))
            else:
                return out  # not scanned to the end: earliest stays a lower bound
        self.earliest = rest  # those in ``out`` are redelivered, done, or retry_later()
        return out

    # ------------------------------------------------------------------ changes
    def deliver_new(self, offset: int, visible_at_ms: int) -> None:
        """``offset`` (≥ next; those between are done) handed out for the first time. The
        bounds are saved by :meth:`save` (once per pop): a crash before it hands these out
        again as new, which at-least-once allows."""
        if offset > self.next:
            self.slots.clear(self.next, offset)
        self.slots.write(offset, visible_at_ms, 1)
        self.next = offset + 1
        self.inflight += 1
        if visible_at_ms < self.earliest:
            self.earliest = visible_at_ms
        if self.inflight == 1:  # nothing else in flight: low may move up to it
            self._advance()

    def save(self) -> None:
        """Write the bounds (after :meth:`deliver_new`)."""
        self.slots.save_bounds(self.low, self.next)

    def pass_over(self, upto: int) -> None:
        """Offsets [next, upto) are done without delivery (filtered out, or gone); saves
        the bounds."""
        if upto > self.next:
            self.slots.clear(self.next, upto)
            self.next = upto
        self._advance()
        self.slots.save_bounds(self.low, self.next)

    def redeliver(self, offset: int, attempt: int, visible_at_ms: int) -> int | None:
        """Hand ``offset`` out again if it is still in flight as ``attempt`` (else None: it
        was acked or changed meanwhile); the new attempt."""
        vis, att = self.state(offset)
        if att != attempt or attempt >= MAX_ATTEMPT:
            return None
        if vis == visible_at_ms:
            visible_at_ms += 1
        self.slots.write(offset, visible_at_ms, attempt + 1)
        self.earliest = min(self.earliest, visible_at_ms)
        return attempt + 1

    def check(self, offset: int, visible_at_ms: int | None) -> int:
        """The attempt of the in-flight delivery a handle names (``visible_at_ms`` None: any);
        :class:`Stale` when there is none."""
        vis, att = self.state(offset)
        if not att:
            raise Stale(f"offset {offset} is not in flight (acked, or never popped)")
        if visible_at_ms is not None and vis not in (0, visible_at_ms):
            raise Stale(f"offset {offset} was redelivered or changed since (a newer handle)")
        return att

    def ack(self, offset: int, visible_at_ms: int | None) -> bool:
        """Done with ``offset`` (:meth:`check` first); True if ``low`` moved."""
        self.check(offset, visible_at_ms)
        return self.done(offset)

    def done(self, offset: int) -> bool:
        """``offset`` done (acked, dead-lettered, gone); True if ``low`` moved."""
        _vis, att = self.state(offset)
        if not att:
            return False
        self.slots.write(offset, 0, 0)
        self.inflight -= 1
        if self.inflight == 0:
            self.earliest = NEVER
        if offset > self.low and len(self.acked) < MAX_ACKED_KEPT:
            self.acked.add(offset)
        low = self.low
        self._advance()
        if self.low != low:
            self.slots.save_bounds(self.low, self.next)
        return self.low != low

    def change(self, offset: int, old_visible_at_ms: int | None, visible_at_ms: int) -> int:
        """A new invisibility for an in-flight delivery; the instant it now has (distinct
        from the old one, so the old handle is stale)."""
        vis, att = self.state(offset)
        self.check(offset, old_visible_at_ms)
        if visible_at_ms == vis:
            visible_at_ms += 1
        self.slots.write(offset, visible_at_ms, att)
        self.earliest = min(self.earliest, visible_at_ms)
        return visible_at_ms

    def retry_later(self, now_ms: int) -> None:
        """An expired offset handed to the caller was neither redelivered nor done (its
        dead-letter write failed): look again at the next pop."""
        self.earliest = min(self.earliest, now_ms)

    def merge(self, low: int, next_offset: int, acked: list[int]) -> None:
        """Take in progress another master flushed (failover): at least its low, at least its
        next (offsets new here are in flight, visible now), its acks. Never moves back."""
        if low > self.low:
            for off, _vis, att in self.slots.scan(self.low, min(low, self.next)):
                if att:
                    self.slots.write(off, 0, 0)
                    self.inflight -= 1
            self.low = low
            if self.next < low:
                self.next = low
            self.slots.forget_below(low)
        if next_offset > self.next:
            for off in range(self.next, next_offset):
                self.slots.write(off, 0, 1)
            self.inflight += next_offset - self.next
            self.next = next_offset
            self.earliest = 0
        for off in acked:
            if self.low <= off < self.next and self.slots.read(off)[1]:
                self.done(off)
        if self.inflight == 0:
            self.earliest = NEVER
        self._advance()
        self.acked = {a for a in self.acked if a >= self.low}
        self.slots.save_bounds(self.low, self.next)

    def progress(self) -> tuple[int, int, list[int]]:
        """(low, next, acked above low) for metaledger."""
        return self.low, self.next, sorted(self.acked)

    def _advance(self) -> None:
        if self.low < self.next and self.slots.read(self.low)[1]:
            return
        low = self.next
        for off, _vis, att in self.slots.scan(self.low, self.next):
            if att:
                low = off
                break
        if low != self.low:
            self.low = low
            self.slots.forget_below(low)
            self.acked = {a for a in self.acked if a > low}
