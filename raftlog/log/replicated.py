"""The replicated metadata log: consensus + apply thread + change-log segments.

Data flow (DESIGN.md §3)::

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

Faults (issue 14): an OSError while appending the change log (ENOSPC, EIO...) is
transient: the apply group, already applied to the pending state, waits with its records
and results until the append succeeds (retried with backoff on the apply thread; an inline
group is handed to it), reported to :attr:`ReplicatedLog.health`. While the node is out
of space, proposals other than read barriers are refused with :class:`NoSpaceError`;
linearizable reads confirm their read index by the engine's ReadIndex where it has one
(the native engine: a heartbeat round, nothing written, so they work on a full disk) and
by a barrier entry otherwise (PySyncObj). Any
other exception on the apply path is a bug or damage: it is logged once, with its
traceback, and ``on_fatal(reason)`` is called (the server exits non-zero); this node
applies nothing more meanwhile.

Three offsets per node: ``end_offset`` (last request in this node's log,
committed or not), ``commit_offset`` (known replicated to a majority),
``apply_offset`` (built into the image). ``apply <= commit <= end`` holds at
every moment they are read together through :meth:`ReplicatedLog.offsets`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from raftlog.consensus import EngineStatus
from raftlog.entry import item_count
from raftlog.log.apply import Apply
from raftlog.log.base import LogBase
from raftlog.log.contracts import ApplyObserver, Offsets
from raftlog.log.group_commit import GroupCommit
from raftlog.log.snapshot_duties import SnapshotDuties
from raftlog.segments import SegmentLog
from raftlog.wait import running_loop


class ReplicatedLog(GroupCommit, Apply, SnapshotDuties, LogBase):
    """The replicated metadata log: propose, apply, snapshot; the three offsets."""

    def start(self) -> None:
        if self._apply_on_loop:
            self._apply_loop = running_loop()
            if self._apply_loop is not None:
                self._loop_thread = threading.get_ident()
        self._apply_thread = threading.Thread(target=self._run_apply, name="apply", daemon=True)
        self._apply_thread.start()
        self._engine.start(self._on_commit, self if self._snapshot_sink is not None else None)

    def set_on_fatal(self, on_fatal: Callable[[str], None] | None) -> None:
        """See ``on_fatal`` in the constructor."""
        self._on_fatal = on_fatal

    def stop(self) -> None:
        self._engine.stop()
        self._stopping.set()  # an apply group waiting for the disk gives up
        self._queue.put(None)
        if self._apply_thread is not None:
            self._apply_thread.join(timeout=10)
        self._segments.close()

    @property
    def client_id(self) -> str:
        return self._client_id

    def offsets(self) -> Offsets:
        """The three offsets, read in an order that keeps ``apply <= commit <= end``.

        ``apply`` is read first: it only grows, and never passes the last offset
        handed to the apply thread, which is committed by definition and is this
        node's ``commit``. ``end`` adds the requests of the items in this node's log
        after that one (committed or not).
        """
        apply = self._apply_offset
        commit = self._enqueued_offset
        end = commit + sum(item_count(data) for data in self._engine.uncommitted())
        return Offsets(end, commit, apply, self._segments.flushed_offset)

    def engine_status(self) -> EngineStatus:
        return self._engine.status()

    def term(self) -> int:
        return self._engine.term()

    @property
    def apply_offset(self) -> int:
        return self._apply_offset

    @property
    def segments(self) -> SegmentLog:
        return self._segments

    def set_observer(self, observer: ApplyObserver | None) -> None:
        """Tell ``observer`` about every apply group from now on (set it before ``start``)."""
        self._observer = observer
