"""Where the replicator may resume: the confirmed low watermark, and its fenced commit.

Two pieces, the first sans-I/O:

- :class:`Watermark` follows the replication stream's *boundaries* in order (the end offset
  of every command outside MULTI/EXEC, of every EXEC, and of a full sync's snapshot), each
  with the messages that must be confirmed by the sink before it counts. Confirmations come
  back in any order (queues are independent); :meth:`Watermark.safe` is the last boundary
  with everything up to it confirmed. That is the offset the 1-second ``REPLCONF ACK`` clock
  reports and the only one ever checkpointed, so the master never believes we hold what the
  broker does not, and a restart never skips a write.
- :class:`CheckpointStore` keeps ``(replid, offset, db)`` in metaledger as a fenced offset
  commit (``Offsets`` service: the active replicator's election lease and its token). A paused
  old active that lost its lease is refused by the server (NOT_FOUND / "stale
  fencing_token"), whatever it believes.

Offsets of a new replication history (a full sync after the master lost its backlog, or a
master restarted by kill -9) start lower than the old ones, and the ``Offsets`` service
refuses a position that moves backwards unless an operator resets it. So the stored
``position`` is ``generation << 48 | offset``: every full sync starts a new generation, and a
partial resync (``+CONTINUE``) keeps it. 2**48 bytes (256 TiB) of one history is far beyond
any Redis replication offset seen in practice.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, replace
from typing import Protocol

from nameserver.client import CommittedOffset, NotFound, OffsetWrite
from replicator.redis.errors import ConfigError

__all__ = [
    "GENERATION_SHIFT",
    "Boundary",
    "Checkpoint",
    "CheckpointStore",
    "OffsetsClient",
    "Watermark",
]

GENERATION_SHIFT = 48
_MAX_OFFSET = (1 << GENERATION_SHIFT) - 1


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A resume point: ``PSYNC replid offset+1`` continues right after it, and ``db`` is the
    database selected there (a ``+CONTINUE`` stream sends no ``SELECT``)."""

    replid: str
    offset: int
    db: int = 0
    generation: int = 0
    #: the replid of the full sync this history began with ("" = ``replid``): PSYNC2 renames
    #: (``+CONTINUE <newid>``) change ``replid`` but not the history, whose offsets go on
    history: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.offset <= _MAX_OFFSET:
            raise ConfigError("offset", f"{self.offset} is outside [0, 2**48)")
        if self.db < 0:
            raise ConfigError("db", f"{self.db} is negative")
        if self.generation < 0:
            raise ConfigError("generation", f"{self.generation} is negative")
        if not self.history:  # a history begins under the replid of its full sync
            object.__setattr__(self, "history", self.replid)

    @property
    def position(self) -> int:
        """What the ``Offsets`` service compares: never lower for a later checkpoint."""
        return self.generation << GENERATION_SHIFT | self.offset

    def encode(self) -> bytes:
        return json.dumps(
            {
                "replid": self.replid,
                "offset": self.offset,
                "db": self.db,
                "gen": self.generation,
                "hist": self.history,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Checkpoint:
        try:
            d = json.loads(data)
            replid = str(d["replid"])
            history = str(d.get("hist", replid))
            return cls(replid, int(d["offset"]), int(d["db"]), int(d.get("gen", 0)), history)
        except (ValueError, KeyError, TypeError) as exc:
            msg = f"stored checkpoint {data[:80]!r} is unreadable: {exc}"
            raise ConfigError("checkpoint", msg) from exc

    def psync_args(self) -> tuple[str, int]:
        """The ``PSYNC`` arguments that resume right after this checkpoint."""
        return self.replid, self.offset + 1


@dataclass(slots=True)
class Boundary:
    """A point of the stream a restart may resume from, and the messages still unconfirmed
    before it (those sent since the previous boundary)."""

    checkpoint: Checkpoint
    outstanding: int
    #: an open boundary (a full sync's snapshot, still being parsed) is never safe
    sealed: bool = True
    #: when the caller added it (its clock; the replication lag in seconds is its age)
    at: float = 0.0


class Watermark:
    """The confirmed low watermark over the stream's boundaries (sans-I/O, single-threaded).

    ::

        w = Watermark(Checkpoint(replid, 100))
        b = w.add(Checkpoint(replid, 130, db=0), messages=2)   # a command split in two messages
        w.add(Checkpoint(replid, 144), messages=0)              # a PING: nothing to confirm
        w.confirm(b); w.safe().offset                           # 100: one message outstanding
        w.confirm(b); w.safe().offset                           # 144
    """

    def __init__(self, start: Checkpoint) -> None:
        self._safe = start
        self._pending: deque[Boundary] = deque()

    def add(
        self, checkpoint: Checkpoint, messages: int, sealed: bool = True, at: float = 0.0
    ) -> Boundary:
        """A new boundary after every earlier one, with ``messages`` to confirm before it.
        An unsealed one (a snapshot still being sent) takes more with :meth:`grow` and
        counts only after :meth:`seal`."""
        if messages < 0:
            raise ValueError(f"messages {messages} is negative")
        last = self._pending[-1].checkpoint if self._pending else self._safe
        if checkpoint.position < last.position:
            raise ValueError(f"boundary {checkpoint} is before {last}")
        b = Boundary(checkpoint, messages, sealed, at)
        self._pending.append(b)
        self._advance()
        return b

    def confirm(self, boundary: Boundary, messages: int = 1) -> None:
        """``messages`` of ``boundary``'s messages were confirmed by the sink."""
        if messages > boundary.outstanding:
            raise ValueError(f"{messages} confirmations for {boundary.outstanding} outstanding")
        boundary.outstanding -= messages
        self._advance()

    def grow(self, boundary: Boundary, messages: int = 1) -> None:
        """``messages`` more to confirm before an unsealed ``boundary``."""
        if boundary.sealed:
            raise ValueError(f"boundary {boundary.checkpoint} is sealed")
        boundary.outstanding += messages

    def seal(self, boundary: Boundary) -> None:
        boundary.sealed = True
        self._advance()

    def rename(self, replid: str) -> None:
        """``+CONTINUE <newid>``: the same history under a new id (PSYNC2); offsets go on."""
        self._safe = replace(self._safe, replid=replid, history=self._safe.history)
        for b in self._pending:
            cp = b.checkpoint
            b.checkpoint = replace(cp, replid=replid, history=cp.history)

    def _advance(self) -> None:
        while self._pending and self._pending[0].sealed and self._pending[0].outstanding == 0:
            self._safe = self._pending.popleft().checkpoint

    def safe(self) -> Checkpoint:
        return self._safe

    def oldest_pending_at(self) -> float | None:
        """``at`` of the oldest boundary not yet safe (None when everything is)."""
        return self._pending[0].at if self._pending else None

    @property
    def pending(self) -> int:
        """Boundaries not yet safe."""
        return len(self._pending)

    def unconfirmed(self) -> int:
        """Messages sent and not yet confirmed."""
        return sum(b.outstanding for b in self._pending)


class OffsetsClient(Protocol):
    """What :class:`CheckpointStore` needs of ``nameserver.client.Client``."""

    def offsets_fetch(self, job: str, partition: str) -> CommittedOffset: ...

    def offsets_commit(
        self,
        job: str,
        partition: str,
        offset: bytes,
        *,
        lease_id: int,
        fencing_token: int,
        position: int = 0,
        expected_version: int = 0,
        epoch: int = 0,
        keepalive: bool = False,
    ) -> OffsetWrite: ...


class CheckpointStore:
    """One Redis source's checkpoint in metaledger: ``Offsets`` record (job, ``redis``).

    ``commit`` is fenced by the caller's lease and token (its election's leader key); the
    server refuses it once that lease is gone or a newer holder committed. Errors are the
    client library's (``NotFound``, ``FailedPrecondition``, ``Unavailable``) and mean the
    caller must stop sending: it is no longer the active replicator, or cannot prove it is.
    """

    PARTITION = "redis"

    def __init__(self, client: OffsetsClient, job: str) -> None:
        if not job:
            raise ConfigError("job", "is empty")
        self._client = client
        self.job = job
        self._committed: Checkpoint | None = None

    def load(self) -> Checkpoint | None:
        """The stored checkpoint, or None when this job has none yet."""
        try:
            stored = self._client.offsets_fetch(self.job, self.PARTITION)
        except NotFound:
            return None
        cp = Checkpoint.decode(stored.offset)
        self._committed = cp
        return cp

    @property
    def committed(self) -> Checkpoint | None:
        return self._committed

    def commit(self, cp: Checkpoint, lease_id: int, token: int) -> bool:
        """Store ``cp`` unless it is what was last stored; True when a commit was sent."""
        if cp == self._committed:
            return False
        self._client.offsets_commit(
            self.job,
            self.PARTITION,
            cp.encode(),
            lease_id=lease_id,
            fencing_token=token,
            position=cp.position,
        )
        self._committed = cp
        return True
