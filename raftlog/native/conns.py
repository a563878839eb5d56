"""Bounds on the inbound connections of the Raft peer port: a cap, and a deadline each.

Every accepted connection gets a :class:`Slot` whose ``deadline`` says when it is closed
unless it makes progress: the handshake must finish within ``handshake_s``, an
authenticated connection must start a frame within ``idle_s`` of the last one (members
send Raft messages every heartbeat, or a keepalive), and a frame that started must
complete within ``frame_s``. The engine moves a slot's deadline as the connection
progresses (one float store per frame); :meth:`InboundConnections.sweep`, called a few
times a second while any connection is open, aborts the ones past their deadline. Time
this process did not run (a sweep that comes late: SIGSTOP, a blocked loop) does not count
against the peers.
Above ``max_connections`` a new connection is closed at once.

The other way, :class:`OutboundDeadline` decides when this member's own connection to a
peer is dead: nothing heard from that peer (on any of its connections to us, keepalives
included) for ``silence_s``. A black-holed connection gives neither an error nor an
end-of-file; without this the dialler would write into it until TCP gives up.

Nothing here touches sockets: a slot holds the callable that aborts its connection, so
the table is unit-tested with fakes. What it closes is logged at most once per
``log_every_s`` per reason (with the count since the last line): an outsider opening
thousands of connections does not flood the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: why a slot is waiting, and what its deadline is for (used in the log lines)
HANDSHAKE = "did not finish the handshake in time"
IDLE = "sent no frame in time"
FRAME = "did not complete a frame in time"


class RateLimitedLog:
    """One WARNING per reason per ``every_s``, counting the occurrences in between."""

    def __init__(self, every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._every_s = every_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._pending: dict[str, int] = {}

    def warning(self, reason: str, message: str, *args: object) -> bool:
        """Log ``message % args`` unless ``reason`` was logged within ``every_s`` (then count
        it for the next line). Returns whether it logged."""
        now = self._clock()
        last = self._last.get(reason)
        if last is not None and now - last < self._every_s:
            self._pending[reason] = self._pending.get(reason, 0) + 1
            return False
        self._last[reason] = now
        skipped = self._pending.pop(reason, 0)
        if skipped:
            message += " (and %d more like it since the last such line)"
            args = (*args, skipped)
        log.warning(message, *args)
        if len(self._last) > 1024:  # reasons are a few constants; bound it anyway
            self._last.clear()
        return True


class Slot:
    """One inbound connection: how to abort it and until when it may stay as it is."""

    __slots__ = ("abort", "address", "deadline", "waiting_for")

    def __init__(self, abort: Callable[[], None], deadline: float) -> None:
        self.abort = abort
        self.deadline = deadline
        self.waiting_for = HANDSHAKE
        #: the member it authenticated as ("" during the handshake)
        self.address = ""


class InboundConnections:
    def __init__(
        self,
        max_connections: int,
        handshake_s: float,
        idle_s: float,
        frame_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        log_every_s: float = 10.0,
    ) -> None:
        self.max_connections = max_connections
        self.handshake_s = handshake_s
        self.idle_s = idle_s
        self.frame_s = frame_s
        self.clock = clock
        self.warn = RateLimitedLog(log_every_s, clock)
        self._slots: set[Slot] = set()

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def sweep_interval_s(self) -> float:
        """How often :meth:`sweep` should run: a fraction of the shortest timeout."""
        return min(1.0, max(0.01, min(self.handshake_s, self.idle_s, self.frame_s) / 5))

    def open(self, abort: Callable[[], None], peer: str = "") -> Slot | None:
        """A slot for a new connection, or None (and a rate-limited warning) when the
        cap is reached: the caller closes that connection at once."""
        if len(self._slots) >= self.max_connections:
            self.warn.warning(
                "cap",
                "the Raft peer port holds %d connections, the most allowed "
                "(peer_max_connections); closed a new one from %s",
                len(self._slots),
                peer or "?",
            )
            return None
        slot = Slot(abort, self.clock() + self.handshake_s)
        self._slots.add(slot)
        return slot

    def close(self, slot: Slot) -> None:
        self._slots.discard(slot)

    def last_heard(self, address: str) -> float | None:
        """When a frame from ``address`` last started or ended on any of its connections
        (None: none authenticated). Read off the deadlines, nothing stored per frame."""
        heard = None
        for slot in self._slots:
            if slot.address != address:
                continue
            if slot.waiting_for is IDLE:
                at = slot.deadline - self.idle_s
            elif slot.waiting_for is FRAME:
                at = slot.deadline - self.frame_s
            else:
                continue
            if heard is None or at > heard:
                heard = at
        return heard

    def sweep(self, now: float | None = None, late_s: float = 0.0) -> int:
        """Abort every connection past its deadline; return how many.

        ``late_s`` is how much later than planned this sweep runs. While this process did
        not run (SIGSTOP, a loop blocked by a slow disk) it read no connection: what the
        peers sent meanwhile waits in the socket buffers, so that time is not their silence.
        Every deadline first moves by ``late_s``: a connection is closed only if it was
        past its deadline when the sweep was due."""
        now = self.clock() if now is None else now
        if late_s > 0:
            for slot in self._slots:
                slot.deadline += late_s
        expired = [s for s in self._slots if s.deadline <= now]
        for slot in expired:
            self._slots.discard(slot)
            self.warn.warning(
                slot.waiting_for, "closed a Raft peer connection that %s", slot.waiting_for
            )
            try:
                slot.abort()
            except Exception as exc:  # a transport already gone: nothing left to close
                log.debug("aborting a peer connection: %s", exc)
        return len(expired)


class OutboundDeadline:
    """When to give up this member's connection to a peer: checked on each keepalive
    beat (every ``beat_s``). Dead once nothing was heard from the peer for ``silence_s``
    since the connection opened; a live peer is heard at least every keepalive (its own
    connection to us carries them). A beat that comes late (this process did not run)
    skips the check once: what the peer sent meanwhile waits unread in our buffers."""

    __slots__ = ("_beat_s", "_due", "_opened", "silence_s")

    def __init__(self, opened: float, silence_s: float, beat_s: float) -> None:
        self._opened = opened
        self.silence_s = silence_s
        self._beat_s = beat_s
        self._due = opened + beat_s

    def beat(self, now: float, last_heard: float | None) -> bool:
        """True: the connection is dead (close it and dial again)."""
        late = now - self._due > self._beat_s
        self._due = now + self._beat_s
        if late:
            return False
        heard = self._opened if last_heard is None else max(last_heard, self._opened)
        return now - heard > self.silence_s
