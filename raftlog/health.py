"""A node's health: transient I/O faults on its durable paths, and how it leaves them.

ENOSPC, EMFILE, EIO (and their kin) on the Raft log, the change log or a snapshot are
states, not deaths (docs/operations.md, "Durability"; as etcd keeps serving reads under its
NOSPACE alarm): the path that met the error reports it here, retries with a :class:`Backoff`, and
clears it when a retry succeeds. The node is then::

    OK          nothing failing
    NOSPACE     a durable write met ENOSPC/EDQUOT: new writes are refused (etcd's NOSPACE
                alarm, "mvcc: database space exceeded"); reads keep their guarantees
    IO_ERROR    another OSError (EIO, EMFILE, ...): the node retries; writes wait

Each source (``raft-log``, ``change-log``, ``snapshot``) is tracked on its own; the node's
state is the worst of them (NOSPACE over IO_ERROR over OK). Logging is one WARNING when a
source enters a fault, one INFO when it leaves, and a reminder every ``reminder_s`` while
it lasts; never a traceback for the errnos in :data:`KNOWN_ERRNOS` (an unknown errno gets
its traceback once, on entering).

Thread-safe (one lock), no I/O of its own besides logging: the engine's loop, the apply
thread, the segment flusher and the snapshot writer all report here; the server reads
:meth:`Health.status` for ``/health``, the metrics and ``etcdctl alarm list``.
"""

from __future__ import annotations

import enum
import errno
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "KNOWN_ERRNOS",
    "NOSPACE_ERRNOS",
    "WRITE_SOURCES",
    "Backoff",
    "Fault",
    "Health",
    "State",
    "errno_name",
]

log = logging.getLogger(__name__)

#: Errnos that mean "the disk (or quota) is full".
NOSPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: Errnos that are expected under faults: logged in one line, without a traceback.
KNOWN_ERRNOS = NOSPACE_ERRNOS | {errno.EMFILE, errno.ENFILE, errno.EIO}
#: Sources whose NOSPACE refuses new writes (a failing snapshot alone does not: it is
#: retried on later commits, which refused writes would never bring).
WRITE_SOURCES = frozenset({"raft-log", "change-log", "change-log-sync"})
#: How each source is named in log lines and ``/health``.
LABELS = {
    "raft-log": "Raft log",
    "change-log": "change log",
    "change-log-sync": "change log's fdatasync",
    "snapshot": "snapshot",
}
#: Seconds between reminders while a fault lasts.
REMINDER_S = 30.0


class State(enum.IntEnum):
    """Ordered by severity: the node reports the worst state of its sources."""

    OK = 0
    IO_ERROR = 1
    NOSPACE = 2


def errno_name(exc: OSError) -> str:
    """``ENOSPC`` for an OSError with errno 28; ``OSError`` without an errno."""
    if exc.errno is None:
        return type(exc).__name__
    return errno.errorcode.get(exc.errno, f"errno {exc.errno}")


def _state_of(exc: OSError) -> State:
    return State.NOSPACE if exc.errno in NOSPACE_ERRNOS else State.IO_ERROR


@dataclass(frozen=True, slots=True)
class Fault:
    """One source's current fault."""

    source: str  # raft-log | change-log | snapshot
    state: State
    kind: str  # the errno name, e.g. ENOSPC
    cause: str  # the error's text
    since: float  # wall-clock seconds (time.time) when it began
    started: float  # monotonic seconds when it began (for durations)

    def describe(self) -> str:
        return f"{self.state.name} ({self.kind}) on the {_label(self.source)}: {self.cause}"


class Health:
    """The faults of one node's durable paths (see the module docstring)."""

    def __init__(
        self,
        reminder_s: float = REMINDER_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._reminder_s = reminder_s
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._faults: dict[str, Fault] = {}
        self._reminded: dict[str, float] = {}  # source -> when it was last logged
        self._nospace_writes = False  # cached: read on every proposal, lock-free

    # ---------------------------------------------------------------- reporting
    def fault(self, source: str, exc: OSError) -> bool:
        """``source`` failed with ``exc`` (again); True if it was not failing before."""
        now = self._clock()
        state = _state_of(exc)
        kind = errno_name(exc)
        with self._lock:
            old = self._faults.get(source)
            if old is not None and old.state == state and old.kind == kind:
                remind = now - self._reminded.get(source, now) >= self._reminder_s
                if remind:
                    self._reminded[source] = now
                fault, entered = old, False
            else:
                fault = Fault(source, state, kind, str(exc), self._wall(), now)
                if old is not None:  # the cause changed: keep when the trouble began
                    fault = Fault(source, state, kind, str(exc), old.since, old.started)
                self._faults[source] = fault
                self._reminded[source] = now
                self._update()
                remind, entered = False, True
        if entered:
            log.warning(
                "degraded: %s; %s",
                fault.describe(),
                _advice(fault),
                exc_info=exc if exc.errno not in KNOWN_ERRNOS else None,
            )
        elif remind:
            log.warning(
                "still degraded after %.0fs: %s; %s",
                now - fault.started,
                fault.describe(),
                _advice(fault),
            )
        return entered and old is None

    def clear(self, source: str) -> bool:
        """``source`` works again; True if it was failing (logged once, at INFO)."""
        if source not in self._faults:  # cheap check first: called after every success
            return False
        with self._lock:
            fault = self._faults.pop(source, None)
            self._reminded.pop(source, None)
            self._update()
        if fault is None:
            return False
        log.info(
            "recovered: the %s works again after %.1fs in %s (%s)",
            _label(source),
            self._clock() - fault.started,
            fault.state.name,
            fault.kind,
        )
        return True

    def _update(self) -> None:  # lock held
        self._nospace_writes = any(
            f.state == State.NOSPACE and f.source in WRITE_SOURCES for f in self._faults.values()
        )

    # ---------------------------------------------------------------- reading
    @property
    def refuses_writes(self) -> bool:
        """True while a write path is out of space: new proposals are refused."""
        return self._nospace_writes

    @property
    def state(self) -> State:
        with self._lock:
            return max((f.state for f in self._faults.values()), default=State.OK)

    def faults(self) -> list[Fault]:
        """The current faults, worst first."""
        with self._lock:
            return sorted(self._faults.values(), key=lambda f: (-f.state, f.source))

    def reason(self) -> str:
        """One line for ``/health`` and errors: "" when OK."""
        return "; ".join(f.describe() for f in self.faults())


def _label(source: str) -> str:
    return LABELS.get(source, source)


def _advice(fault: Fault) -> str:
    if fault.state == State.NOSPACE:
        if fault.source in WRITE_SOURCES:
            return "writes are refused until space returns (retrying)"
        return "retrying on later commits"
    return "retrying"


class Backoff:
    """Delays for retrying a failed operation: ``first_s``, doubling, at most ``max_s``.

    ``due(now)`` says whether the next retry may run; ``failed(now)`` schedules the next one;
    ``reset()`` after a success.
    """

    def __init__(self, first_s: float = 0.1, max_s: float = 1.0) -> None:
        self._first_s = first_s
        self._max_s = max_s
        self._delay_s = 0.0
        self._next = 0.0

    @property
    def failing(self) -> bool:
        return self._delay_s > 0

    def failed(self, now: float) -> float:
        """A retry (or the first try) failed at ``now``; returns the delay to the next."""
        self._delay_s = self._first_s if self._delay_s == 0 else min(self._delay_s * 2, self._max_s)
        self._next = now + self._delay_s
        return self._delay_s

    def due(self, now: float) -> bool:
        return now >= self._next

    def reset(self) -> None:
        self._delay_s = 0.0
        self._next = 0.0
