"""The on-disk timer wheel: one slot per second, each the tail of a chain in an append-only log.

RocketMQ 5's layout (``store/timer/TimerWheel.java``, ``TimerLog.java``), simplified:

- ``<dir>/wheel``: a header (magic, slot count, ``read_s``: the next second to fire,
  ``enqueue_next``: the next ``rmq_sys_wheel_timer`` queue offset to dispatch) and
  ``slots`` fixed-size slots (second, position of the chain's last entry, entry count),
  memory-mapped. Slot ``i`` serves every second ``s`` with ``s % slots == i``; a slot whose
  second is not the one asked for is stale (a second one wheel-turn ago, or 0: never used)
  and counts as empty.
- ``<dir>/timerlog``: fixed-size entries (previous entry of the same slot, the slot's second,
  the delivery time, the message's commit-log offset and size, its timer-queue offset, a
  CRC32), appended only. A slot is walked backwards from its last entry (RocketMQ's
  ``prevPos``), so what the wheel holds in memory is one slot's entries at a time, however
  many messages wait.

A delivery time beyond ``roll_window_slots`` of ``read_s`` is linked at the window's edge
(RocketMQ's ``timerRollWindowSlots``, ``TimerMessageStore.doEnqueue``); when that slot fires
the entry is re-linked further on (:meth:`TimerWheel.add` again) until it is due.

Crash safety (a ``kill -9``): an insert appends the entry, then links it into its slot; on
open a last entry that is not linked yet is linked (the interrupted insert finished), a torn
last entry is cut off. An entry linked twice (an insert repeated after a crash, a roll repeated
when its slot fires again) is handed out once: :meth:`TimerWheel.due` drops repeated
commit-log offsets within a slot. The log is emptied whenever nothing waits.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from typing import NamedTuple

MAGIC = 0x54494D31  # "TIM1"
HEADER = struct.Struct(">IIqqq")  # magic, slots, read_s, enqueue_next, reserved
SLOT = struct.Struct(">qqq")  # second, last entry's position (-1: none), entries
ENTRY = struct.Struct(">qqqqiq")  # prev, slot second, deliver ms, commit-log offset, size, qoff
CRC = struct.Struct(">I")
ENTRY_SIZE = ENTRY.size + CRC.size
#: RocketMQ's TIMER_WHEEL_TTL_DAY (7 days of one-second slots) and its default roll window
DEFAULT_SLOTS = 7 * 86_400
DEFAULT_ROLL_WINDOW_SLOTS = 2 * 86_400


class TimerWheelError(Exception):
    """The wheel's files are not a wheel of this shape (the message names the file)."""


class Entry(NamedTuple):
    deliver_ms: int
    phys_offset: int
    size: int
    queue_offset: int


class TimerWheel:
    """One replica's wheel under ``directory`` (created when missing, at ``start_s``)."""

    def __init__(
        self,
        directory: str,
        start_s: int,
        slots: int = DEFAULT_SLOTS,
        roll_window_slots: int = DEFAULT_ROLL_WINDOW_SLOTS,
    ) -> None:
        if not 0 < roll_window_slots < slots:
            raise ValueError(f"roll_window_slots: {roll_window_slots} must be in 1..{slots - 1}")
        os.makedirs(directory, exist_ok=True)
        self.slots = slots
        self.roll_window_slots = roll_window_slots
        self.wheel_path = os.path.join(directory, "wheel")
        self.log_path = os.path.join(directory, "timerlog")
        size = HEADER.size + slots * SLOT.size
        fresh = not os.path.exists(self.wheel_path)
        self._wheel_fd = os.open(self.wheel_path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._wheel_fd).st_size not in (0, size):
            os.close(self._wheel_fd)
            raise TimerWheelError(f"{self.wheel_path}: not a wheel of {slots} slots")
        os.ftruncate(self._wheel_fd, size)
        self._map = mmap.mmap(self._wheel_fd, size)
        self._log_fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._waiting = 0
        self._fired = 0
        if fresh:
            self.reset(start_s, 0)
        else:
            magic, n, _, _, _ = HEADER.unpack_from(self._map, 0)
            if magic != MAGIC or n != slots:
                self.close()
                raise TimerWheelError(f"{self.wheel_path}: not a wheel of {slots} slots")
            self._recover()

    # ------------------------------------------------------------------ header
    @property
    def read_s(self) -> int:
        """The next second to fire: every entry of an earlier slot was handed out."""
        return int(HEADER.unpack_from(self._map, 0)[2])

    @property
    def enqueue_next(self) -> int:
        """The next timer-queue offset to dispatch into the wheel."""
        return int(HEADER.unpack_from(self._map, 0)[3])

    def _set_header(self, read_s: int, enqueue_next: int) -> None:
        HEADER.pack_into(self._map, 0, MAGIC, self.slots, read_s, enqueue_next, 0)

    def set_enqueued(self, enqueue_next: int) -> None:
        self._set_header(self.read_s, enqueue_next)

    @property
    def waiting(self) -> int:
        """Entries linked into slots not fired yet (an entry linked twice counts twice)."""
        return self._waiting

    # ------------------------------------------------------------------- slots
    def _slot(self, second: int) -> tuple[int, int]:
        """(last position, entries) of ``second``'s slot; (-1, 0) when empty or stale."""
        at = HEADER.size + (second % self.slots) * SLOT.size
        s, last, count = SLOT.unpack_from(self._map, at)
        return (int(last), int(count)) if s == second else (-1, 0)

    def count(self, second: int) -> int:
        """How many entries ``second``'s slot holds (0 when empty or stale)."""
        return self._slot(second)[1]

    def _link(self, second: int, pos: int, count: int) -> None:
        SLOT.pack_into(
            self._map, HEADER.size + (second % self.slots) * SLOT.size, second, pos, count
        )

    def slot_for(self, deliver_ms: int) -> int:
        """The second an entry due at ``deliver_ms`` is linked at now: due already → the next
        to fire; beyond the roll window → the window's edge."""
        read_s = self.read_s
        return min(max(deliver_ms // 1000, read_s), read_s + self.roll_window_slots)

    def add(self, entry: Entry) -> int:
        """Link ``entry`` at :meth:`slot_for` its time; returns that second."""
        second = self.slot_for(entry.deliver_ms)
        last, count = self._slot(second)
        pos = os.fstat(self._log_fd).st_size
        pos -= pos % ENTRY_SIZE
        body = ENTRY.pack(last, second, *entry)
        os.pwrite(self._log_fd, body + CRC.pack(zlib.crc32(body)), pos)
        self._link(second, pos, count + 1)
        self._waiting += 1
        return second

    def _read(self, pos: int) -> tuple[int, int, Entry] | None:
        """(prev, slot second, entry) at ``pos``; None when torn or past the end."""
        raw = os.pread(self._log_fd, ENTRY_SIZE, pos)
        if len(raw) < ENTRY_SIZE or CRC.unpack_from(raw, ENTRY.size)[0] != zlib.crc32(
            raw[: ENTRY.size]
        ):
            return None
        prev, second, *fields = ENTRY.unpack_from(raw)
        return prev, second, Entry(*fields)

    def due(self, second: int) -> list[Entry]:
        """The entries of ``second``'s slot, oldest first, each commit-log offset once."""
        out: list[Entry] = []
        pos, _ = self._slot(second)
        while pos >= 0:
            got = self._read(pos)
            if got is None:
                raise TimerWheelError(f"{self.log_path}: no entry at {pos} (slot {second})")
            pos, _, entry = got
            out.append(entry)
        self._fired = len(out)
        seen: set[int] = set()
        unique = []
        for e in reversed(out):
            if e.phys_offset not in seen:
                seen.add(e.phys_offset)
                unique.append(e)
        return unique

    def advance(self, read_s: int) -> None:
        """Mark every slot before ``read_s`` fired (after :meth:`due` of ``self.read_s``, the
        entries it counted leave the waiting count); an empty wheel empties its log."""
        if read_s <= self.read_s:
            return
        self._waiting = max(0, self._waiting - self._fired)
        self._fired = 0
        self._set_header(read_s, self.enqueue_next)
        if self._waiting == 0 and os.fstat(self._log_fd).st_size:
            os.ftruncate(self._log_fd, 0)

    def reset(self, read_s: int, enqueue_next: int) -> None:
        """Empty the wheel: nothing waits, firing resumes at ``read_s``, dispatch at
        ``enqueue_next`` (a new wheel; a master rebuilding from the timer queue)."""
        size = len(self._map)
        self._map.close()
        os.ftruncate(self._wheel_fd, 0)  # every slot's second 0: stale (sparse, nothing written)
        os.ftruncate(self._wheel_fd, size)
        self._map = mmap.mmap(self._wheel_fd, size)
        self._set_header(read_s, enqueue_next)
        os.ftruncate(self._log_fd, 0)
        self._waiting = 0
        self._fired = 0

    def _recover(self) -> None:
        """Cut a torn last entry, link a last entry its insert did not link, count what waits."""
        end = os.fstat(self._log_fd).st_size
        end -= end % ENTRY_SIZE
        got = self._read(end - ENTRY_SIZE) if end else None
        if end and got is None:
            end -= ENTRY_SIZE
            got = self._read(end - ENTRY_SIZE) if end else None
        os.ftruncate(self._log_fd, end)
        read_s = self.read_s
        if got is not None:
            pos = end - ENTRY_SIZE
            _, second, _ = got
            last, count = self._slot(second)
            if second >= read_s and last < pos:
                self._link(second, pos, count + 1)
        self._waiting = sum(
            count
            for second, _, count in SLOT.iter_unpack(self._map[HEADER.size :])
            if second >= read_s
        )

    def flush(self) -> None:
        """Make the wheel and its log durable (a power loss; a crash of the process loses
        nothing written)."""
        self._map.flush()
        os.fsync(self._log_fd)

    def close(self) -> None:
        self._map.close()
        os.close(self._wheel_fd)
        os.close(self._log_fd)
