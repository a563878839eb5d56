"""The state the replicated log's parts share.

:class:`raftlog.log.replicated.ReplicatedLog` is one object; its jobs live in mixins over
:class:`LogBase`, one module each: group commit and propose-and-wait
(:mod:`raftlog.log.group_commit`), apply, on the apply thread or inline on the loop
(:mod:`raftlog.log.apply`), and snapshot duties (:mod:`raftlog.log.snapshot_duties`).
Every field is set here, in one place; the methods one part calls on another are declared
here for the type checker. :class:`Group` and :class:`Marker` are what the apply queue
holds besides committed items.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raftlog.consensus import ConsensusEngine
from raftlog.deadlines import DeadlineSweep
from raftlog.health import Health
from raftlog.log.contracts import (
    Applied,
    ApplyObserver,
    Captured,
    Change,
    SnapshotSink,
    StateMachine,
)
from raftlog.segments import SegmentLog
from raftlog.wait import Wait

#: An item with this many requests means the proposer is busy: it then keeps one item in
#: flight, not ``max_in_flight``, so items fill up. On a 2-core machine one item in flight
#: always meant ~22 requests per item instead of ~13 and ~55 µs less server CPU per put at
#: 64 clients, but 22% fewer puts/s at 16 clients (bench/results/; docs/performance.md); with this rule 16
#: clients keep pipelining.
BUSY_ITEM_REQUESTS = 10
#: Under load a consensus item gathers requests for this long per request waiting at once
#: (the most seen over the last one or two ``PEAK_PERIOD_S``), from ``WINDOW_FLOOR_S`` up
#: to the server's ``batch_window_ms``: with a 6 ms cap, the floor at 16 clients and ~6 ms
#: at 64. Measured on 2 cores (bench/results/; docs/performance.md): fixed windows were best at 2-3 ms for
#: 16 clients and at 6 ms for 64; how many requests wait at once tells the two apart, item
#: sizes did not. Since the server's extra gRPC accepts, 3 ms is best at 64 too, and the
#: server's default cap is 3 (the rule is for longer caps).
WINDOW_PER_REQUEST_S = 0.00011
PEAK_PERIOD_S = 0.2
#: Never shorter: a short window makes small items, whose CPU per request then keeps the
#: load from filling them (windows sized by the last item's size stayed short that way,
#: at a third of the throughput).
WINDOW_FLOOR_S = 0.003


@dataclass(frozen=True)
class Group:
    """An apply group applied to the pending state, not yet in the change log."""

    records: list[tuple[int, int, bytes]]
    results: list[tuple[tuple[str, int], Applied]]
    last: int
    changes: list[Change]
    published: Captured | None


@dataclass(frozen=True)
class Marker:
    """A non-item in the apply queue: take a snapshot here, or install one."""

    kind: str  # "take" | "load"
    raft_index: int
    engine_meta: bytes
    offset: int  # take: the offset the state must be at; load: the snapshot's last offset
    path: str = ""


class LogBase:
    """The fields of one replicated log (see the module docstring)."""

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
        self._on_fatal = on_fatal
        self._refusals = refusals
        self._stopping = threading.Event()
        self._snapshot_retry_at = 0.0
        self._engine = engine
        self._sm = state_machine
        self._segments = segments
        self._node_id = node_id
        self._apply_batch_max = apply_batch_max
        self._max_item_requests = max_item_requests
        self._max_item_bytes = max_item_bytes
        self._batch_window_s = batch_window_s
        self._max_in_flight = max(1, max_in_flight)
        self._busy_item_requests = busy_item_requests
        self._window_elapsed = False  # a window closed while max_in_flight items were out
        self._last_item_requests = 0  # requests in the item last sent (load detector)
        self._window_timer: asyncio.TimerHandle | None = None
        self._window_per_request_s = window_per_request_s
        # the most requests waiting at once in this period and the one before: how many
        # clients keep requests coming (a long window only helps when there are many)
        self._waiting_peak = 0
        self._waiting_peak_before = 0
        self._peak_period_ends = 0.0
        # group commit (touched on the proposers' loop only)
        self._pending: list[tuple[bytes, tuple[str, int]]] = []
        self._pending_bytes = 0
        self._outstanding: set[int] = set()  # items proposed and not yet answered
        self._item_seq = 0
        self._in_flight_timeout_s = 5.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.items_proposed = 0  # group-commit statistics of this node's proposals
        self.requests_proposed = 0
        self._client_id = f"{node_id}/{uuid.uuid4().hex[:12]}"
        self._seq = itertools.count(1)
        self._queue: queue.SimpleQueue[tuple[int, int, bytes] | Marker | Group | None] = (
            queue.SimpleQueue()
        )
        self._snapshot_sink: SnapshotSink | None = None
        self._observer: ApplyObserver | None = None
        self._snapshot_state = "idle"  # idle | writing | done | failed (read by the engine)
        self._snapshot_thread: threading.Thread | None = None
        self.last_snapshot_path = ""
        self._installed_offset = 0  # the last snapshot installed from the leader
        self._snapshot_every_bytes = 0
        self._bytes_since_snapshot = 0
        self._segment_retention_s = 0.0
        self._segment_archive_dir: str | None = None
        self.snapshot_durations_s: list[float] = []
        self._wait = Wait()
        self._deadlines = DeadlineSweep(self._expire)
        self._apply_offset = state_machine.last_offset
        self._enqueued_offset = self._apply_offset
        self._sessions: OrderedDict[str, OrderedDict[int, int]] = OrderedDict()
        self._apply_thread: threading.Thread | None = None
        self._apply_error: BaseException | None = None
        self._apply_on_loop = apply_on_loop
        self._loop_thread: int | None = None  # the thread of the loop start() ran on
        self._apply_loop: asyncio.AbstractEventLoop | None = None
        # committed on the loop, applied by the next callback as one group (a follower
        # catching up gets hundreds of items in one engine pass: one publish, not hundreds)
        self._inline: list[tuple[int, int, bytes]] = []
        self._inline_scheduled = False
        # items and markers handed to the apply thread and not yet done with; while there
        # are any, later ones queue behind them (order), else the loop applies inline
        self._backlog = 0
        self._backlog_lock = threading.Lock()
        # apply-offset waiters, touched on their loops only
        self._offset_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._offset_lock = threading.Lock()
        # read barriers (one loop)
        self._barrier_next: asyncio.Future[int] | None = None  # the next barrier's readers
        self._barrier_task: asyncio.Task[None] | None = None
        self._barrier_inflight = False

    if TYPE_CHECKING:  # implemented by the parts (see the module docstring)

        def _expire(
            self, key: tuple[str, int], fut: asyncio.Future[Any], timeout_s: float
        ) -> None: ...
        def _on_commit(self, index: int, term: int, data: bytes) -> None: ...
        def _run_apply(self) -> None: ...
        def _apply_here(self) -> bool:
            raise NotImplementedError

        def _apply_inline(self) -> None: ...
        def _enqueue(self, item: tuple[int, int, bytes] | Marker | Group) -> None: ...
        def _append_changes(self, records: list[tuple[int, int, bytes]], may_block: bool) -> bool:
            raise NotImplementedError

        def _release_offset_waiters(self) -> None: ...
        def _on_marker(self, marker: Marker) -> None: ...
