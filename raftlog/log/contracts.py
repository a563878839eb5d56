"""What the replicated log drives and hands back: the state machine, the apply observer
and the snapshot sink it is given, and the results it gives proposers."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from raftlog.entry import Effect, Entry


class StateMachine(Protocol):
    """What the apply thread drives. Implementations import nothing from consensus or gRPC."""

    @property
    def last_offset(self) -> int:
        """Offset of the last applied item (0 if none): items at or below it are skipped."""

    def apply(
        self, offset: int, term: int, entries: Sequence[Entry]
    ) -> tuple[Sequence[Effect], Any]:
        """Apply one log item into the pending state; return its effects and a result.

        Deterministic: no clocks, randomness or I/O. Either applies the whole item or
        raises leaving the pending state unchanged (the item then becomes a no-op whose
        result is the :class:`ApplyFailure`).
        """

    def publish(self) -> None:
        """Make everything applied so far visible to readers (a new image)."""

    def capture(self) -> Captured:
        """The published state, cheaply (an immutable image): what a snapshot writes."""

    def load(self, last_offset: int, last_term: int, records: Iterable[Record]) -> list[Effect]:
        """Replace the state with a snapshot's records; return the effects that turn the
        old state into the new one (puts of changed keys, deletes of vanished ones), so the
        change log stays a valid last-write-wins log across the jump."""


#: A snapshot record: (type, key, value).
Record = tuple[str, bytes, bytes]


class Captured(Protocol):
    last_offset: int
    last_term: int

    def records(self) -> Iterable[Record]:
        """Every record of the captured state (may be called more than once)."""


class ApplyObserver(Protocol):
    """Told, on the apply thread, what each apply group changed (the watch hub). Both calls
    come after the new image is published and the effects are in the change-log segments;
    they must be cheap (hand the work to another thread or loop) and must not raise."""

    def on_applied(self, before: Captured, last_offset: int, changes: list[Change]) -> None:
        """One apply group: ``before`` is the state published before it, ``last_offset`` the
        group's last offset (the new apply offset), ``changes`` its offsets with effects."""

    def on_installed(self, offset: int) -> None:
        """A snapshot from the leader replaced the state at ``offset``: the changes between
        the previous apply offset and ``offset`` are not known one by one."""


@dataclass(frozen=True, slots=True)
class Change:
    """The effects of one applied offset, as the observer sees them."""

    offset: int
    term: int
    timestamp_ms: int
    effects: Sequence[Effect]


class SnapshotSink(Protocol):
    """Where snapshots go (the nameserver wires a :class:`snapshots.FileSnapshotStore`)."""

    def write(self, captured: Captured, raft_index: int, engine_meta: bytes) -> str:
        """Write a snapshot of ``captured``; return its path. Runs on the snapshot thread."""

    def publish(self, path: str) -> None:
        """Make ``path`` the engine's snapshot (what its log is compacted behind)."""

    def read(self, path: str) -> tuple[int, int, bytes, Iterable[Record]]:
        """(last_offset, last_term, engine_meta, records) of a verified snapshot file."""

    def adopt(self, path: str) -> str:
        """Keep a snapshot file received from the leader; return where it now lives."""

    def header(self, path: str) -> tuple[int, bytes]:
        """(last_offset, engine_meta) from a snapshot's header only (cheap)."""

    def retention_offset(self) -> int:
        """Change-log segments wholly below this offset may be deleted."""

    def verify(self, path: str) -> str | None:
        """Check a whole snapshot file as :meth:`read` does; None when it verifies, else
        what is wrong (naming the file and the byte). Raises OSError."""


@dataclass(frozen=True)
class Applied:
    """What a proposer gets back: where its item landed and the state machine's result."""

    offset: int
    result: Any
    duplicate: bool = False


@dataclass(frozen=True)
class ApplyFailure:
    """The state machine raised ``error`` on a request; every node raised the same (apply is
    deterministic). The log passes the exception through untouched: what it means to a
    client is the caller's to say."""

    error: Exception


@dataclass(frozen=True)
class Offsets:
    end_offset: int
    commit_offset: int
    apply_offset: int
    flushed_offset: int
