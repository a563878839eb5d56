"""The replicated metadata log: consensus + apply thread + change-log segments.

Data flow::

    propose(entries) ─▶ group commit ─▶ ConsensusEngine ──commit──▶ sink (count, enqueue)
      (one request)     (concurrent requests                          │
                         become one item)           apply thread ◀────┘
                                        │  decode item; number its requests on from the last offset
                                        │  de-duplicate (client_id, seq)
                                        │  StateMachine.apply(offset, term, entries) → effects, result
                                        │  effects → SegmentLog (offset, sub-index)
                                        │  StateMachine.publish()  (new image visible)
                                        └▶ Wait.trigger_many(results) → proposers answered

Offsets number requests, 1, 2, 3, ... without gaps, the same on every node: the
consensus engine's index is internal (an item carries many requests; the engine's
own no-ops carry none). Group commit: a proposer sends at once when nothing of
its own is in flight, and otherwise gathers everything that arrives meanwhile
into the next item (at most ``max_item_requests`` requests or ``max_item_bytes``).

Faults (docs/operations.md, "Durability"): an OSError while appending the change log (ENOSPC,
EIO...) is transient: the apply group, already applied to the pending state, waits with its records
and results until the append succeeds (retried with backoff on the apply thread; an inline
group is handed to it), reported to :attr:`ReplicatedLog.health`. While the node is out
of space, proposals other than read barriers are refused with :class:`NoSpaceError`;
linearizable reads confirm their read index by the engine's ReadIndex where it has one
(the native engine: a heartbeat round, nothing written, so they work on a full disk) and
by a barrier entry otherwise (PySyncObj). Any
other exception on the apply path is a bug or damage: it is logged once, with its
traceback, and ``on_fatal(reason)`` is called (the server exits non-zero); this node
applies nothing more meanwhile.

The parts, each owning its fields, are built and wired here: :class:`GroupCommit`
(proposing, waiting), :class:`Apply` (numbering, applying, the apply offset),
:class:`ReadBarrier` and, once snapshots are enabled, :class:`SnapshotDuties` (the
engine's snapshot hooks). They share the :class:`~raftlog.wait.Wait` registry (group
commit registers, apply answers) and the node's :class:`~raftlog.health.Health`.

Three offsets per node: ``end_offset`` (last request in this node's log,
committed or not), ``commit_offset`` (known replicated to a majority),
``apply_offset`` (built into the image). ``apply <= commit <= end`` holds at
every moment they are read together through :meth:`ReplicatedLog.offsets`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from raftlog.consensus import ConsensusEngine, EngineStatus
from raftlog.entry import item_count
from raftlog.health import Health
from raftlog.log.apply import Apply
from raftlog.log.contracts import ApplyObserver, Offsets, SnapshotSink, StateMachine
from raftlog.log.group_commit import (
    BUSY_ITEM_REQUESTS,
    WINDOW_PER_REQUEST_S,
    GroupCommit,
)
from raftlog.log.read_barrier import ReadBarrier
from raftlog.log.snapshot_duties import SnapshotDuties
from raftlog.segments import SegmentLog
from raftlog.wait import Wait


class ReplicatedLog:
    """The replicated metadata log: propose, apply, snapshot; the three offsets."""

    def __init__(
        self,
        engine: ConsensusEngine,
        state_machine: StateMachine,
        segments: SegmentLog,
        node_id: str,
        apply_batch_max: int = 1024,
        max_item_requests: int = 512,
        max_item_bytes: int = 4 * 1024 * 1024,
        batch_window_s: float = 0.002,
        max_in_flight: int = 1,
        busy_item_requests: int = BUSY_ITEM_REQUESTS,
        apply_on_loop: bool = False,
        window_per_request_s: float = WINDOW_PER_REQUEST_S,
        health: Health | None = None,
        on_fatal: Callable[[str], None] | None = None,
        refusals: tuple[type[Exception], ...] = (),
    ) -> None:
        """``apply_on_loop``: when the engine reports commits on the event loop this log
        was started on (:class:`~raftlog.native.engine.NativeEngine` with ``shared_loop``),
        apply them right there instead of handing them to the apply thread, which then
        only takes what must not block the loop (installing a snapshot) and what queues
        behind it.

        ``health``: where transient I/O faults are reported (default: the engine's own
        ``health`` when it has one, else a new one); the segments report there too.
        ``on_fatal(reason)``: called once, from any thread, when this node cannot go on
        (a bug or damage on the apply path); the server exits non-zero. Without it the
        node only stops applying.

        ``refusals``: the exceptions the state machine raises for a request's own mistakes
        (logged at DEBUG; any other exception from ``apply`` at WARNING). Either way the
        request's result is an :class:`~raftlog.log.contracts.ApplyFailure` carrying it."""
        if health is None:
            engine_health = getattr(engine, "health", None)
            health = engine_health if isinstance(engine_health, Health) else Health()
        self.health = health
        segments.health = health
        self._engine = engine
        self._sm = state_machine
        self._segments = segments
        wait = Wait()
        self._group_commit = GroupCommit(
            engine.propose,
            wait,
            health,
            f"{node_id}/{uuid.uuid4().hex[:12]}",
            max_item_requests=max_item_requests,
            max_item_bytes=max_item_bytes,
            batch_window_s=batch_window_s,
            max_in_flight=max_in_flight,
            busy_item_requests=busy_item_requests,
            window_per_request_s=window_per_request_s,
        )
        self._apply = Apply(
            state_machine,
            segments,
            wait,
            health,
            apply_batch_max=apply_batch_max,
            apply_on_loop=apply_on_loop,
            refusals=refusals,
            on_fatal=on_fatal,
        )
        read_index = getattr(engine, "read_index", None)
        self._read_barrier = ReadBarrier(
            self._group_commit.propose,
            read_index if callable(read_index) else None,
            health,
            lambda: self._apply.committed_offset,
        )
        self._snapshots: SnapshotDuties | None = None
        # the parts' entry points, bound once: no extra call on the way to them
        self.propose = self._group_commit.propose
        self.read_barrier = self._read_barrier.read_barrier
        self.wait_applied = self._apply.wait_applied
        self.apply_committed = self._apply.apply_committed

    def enable_snapshots(
        self,
        sink: SnapshotSink,
        engine_base_offset: int,
        every_bytes: int = 0,
        segment_retention_s: float = 0.0,
        segment_archive_dir: str | None = None,
    ) -> None:
        """Let the engine take and install snapshots through ``sink`` (before ``start``).

        ``engine_base_offset`` is the last offset inside the engine's current snapshot
        (0 if it has none): the engine replays its log from there. ``every_bytes`` > 0 also
        asks for a snapshot once that many bytes of items were committed since the last
        one (the engine's own trigger counts items). Segments wholly covered by every kept
        snapshot are deleted once ``segment_retention_s`` old, or moved to
        ``segment_archive_dir``.
        """
        self._snapshots = SnapshotDuties(
            sink,
            self._apply,
            self._sm,
            self._segments,
            self.health,
            self._engine.force_snapshot,
            segment_retention_s=segment_retention_s,
            segment_archive_dir=segment_archive_dir,
        )
        self._apply.number_after(engine_base_offset)
        self._apply.count_snapshot_bytes(every_bytes, self._snapshots.due_by_bytes)

    def start(self) -> None:
        self._apply.start()
        self._engine.start(self._apply.on_commit, self._snapshots)

    def set_on_fatal(self, on_fatal: Callable[[str], None] | None) -> None:
        """See ``on_fatal`` in the constructor."""
        self._apply.set_on_fatal(on_fatal)

    def stop(self) -> None:
        self._engine.stop()
        self._apply.stop()
        self._segments.close()

    @property
    def client_id(self) -> str:
        return self._group_commit.client_id

    @property
    def items_proposed(self) -> int:
        """Consensus items this node proposed (group-commit statistics)."""
        return self._group_commit.items_proposed

    @property
    def requests_proposed(self) -> int:
        """Requests in them."""
        return self._group_commit.requests_proposed

    @property
    def groups_applied(self) -> int:
        """Apply groups this node applied (each published once; see :class:`Apply`)."""
        return self._apply.groups_applied

    @property
    def requests_applied(self) -> int:
        """Requests in them (de-duplicated ones included)."""
        return self._apply.requests_applied

    def offsets(self) -> Offsets:
        """The three offsets, read in an order that keeps ``apply <= commit <= end``.

        ``apply`` is read first: it only grows, and never passes the last offset
        handed to the apply thread, which is committed by definition and is this
        node's ``commit``. ``end`` adds the requests of the items in this node's log
        after that one (committed or not).
        """
        apply = self._apply.apply_offset
        commit = self._apply.committed_offset
        end = commit + sum(item_count(data) for data in self._engine.uncommitted())
        return Offsets(end, commit, apply, self._segments.flushed_offset)

    def engine_status(self) -> EngineStatus:
        return self._engine.status()

    def term(self) -> int:
        return self._engine.term()

    @property
    def apply_offset(self) -> int:
        return self._apply.apply_offset

    @property
    def last_stamp_ms(self) -> int:
        """The timestamp of the last request applied here: the clock of the leader that
        appended it (0: nothing applied since start)."""
        return self._apply.last_stamp_ms

    @property
    def segments(self) -> SegmentLog:
        return self._segments

    @property
    def last_snapshot_path(self) -> str:
        """The snapshot this node wrote last ("" if none)."""
        return self._snapshots.last_snapshot_path if self._snapshots is not None else ""

    def set_observer(self, observer: ApplyObserver | None) -> None:
        """Tell ``observer`` about every apply group from now on (set it before ``start``)."""
        self._apply.set_observer(observer)
