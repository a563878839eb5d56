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

import asyncio
import contextlib
import gc
import itertools
import logging
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from raftlog.consensus import ConsensusEngine, EngineStatus
from raftlog.deadlines import DeadlineSweep
from raftlog.entry import Effect, Entry, decode_item, encode_item, encode_request, item_count
from raftlog.errors import NoSpaceError, ProposeError, UnknownOutcomeError
from raftlog.health import Backoff, Health, State
from raftlog.segments import SegmentLog
from raftlog.wait import Wait, run_on, running_loop

log = logging.getLogger(__name__)

#: How many (client_id, seq) pairs are remembered per client for de-duplication.
DEDUP_WINDOW = 4096
#: How many clients are remembered (least recently applied are forgotten first).
DEDUP_CLIENTS = 10_000
#: An item with this many requests means the proposer is busy: it then keeps one item in
#: flight, not ``max_in_flight``, so items fill up. On a 2-core machine one item in flight
#: always meant ~22 requests per item instead of ~13 and ~55 µs less server CPU per put at
#: 64 clients, but 22% fewer puts/s at 16 clients (README, Performance); with this rule 16
#: clients keep pipelining.
BUSY_ITEM_REQUESTS = 10
#: Under load a consensus item gathers requests for this long per request waiting at once
#: (the most seen over the last one or two ``PEAK_PERIOD_S``), from ``WINDOW_FLOOR_S`` up
#: to the server's ``batch_window_ms``: with a 6 ms cap, the floor at 16 clients and ~6 ms
#: at 64. Measured on 2 cores (README, Performance): fixed windows were best at 2-3 ms for
#: 16 clients and at 6 ms for 64; how many requests wait at once tells the two apart, item
#: sizes did not. Since the server's extra gRPC accepts, 3 ms is best at 64 too, and the
#: server's default cap is 3 (the rule is for longer caps).
WINDOW_PER_REQUEST_S = 0.00011
PEAK_PERIOD_S = 0.2
#: Never shorter: a short window makes small items, whose CPU per request then keeps the
#: load from filling them (windows sized by the last item's size stayed short that way,
#: at a third of the throughput).
WINDOW_FLOOR_S = 0.003
#: After a snapshot failed for lack of space (or any I/O error), the next is not tried
#: before this (the engine asks again on every commit).
SNAPSHOT_RETRY_S = 10.0
#: Linearizable reads confirm their read index by ReadIndex (a heartbeat round, nothing
#: written) whenever the engine can, not only while the node is degraded; measured in
#: the README's Performance section (get at 64 clients against the barrier entry).
READ_INDEX_ALWAYS = True


@contextlib.contextmanager
def gc_paused(freeze: bool = False) -> Iterator[None]:
    """No automatic cyclic garbage collection inside (the previous setting after).

    Restoring a snapshot allocates a few million objects that all survive: the collector,
    triggered every 700 allocations, would scan the growing heap over and over (a third
    of the CPU of a 1M-key restore) to find no garbage: these objects form no cycles.
    ``freeze``: move every object alive at the end out of the collector's generations
    (``gc.freeze``), or the first collection after the pause scans them all at once (a
    stall of ~300 ms for 1M keys), and every full collection after it again.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        if freeze:
            gc.freeze()
    finally:
        if was_enabled:
            gc.enable()


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


@dataclass(frozen=True)
class Applied:
    """What a proposer gets back: where its item landed and the state machine's result."""

    offset: int
    result: Any
    duplicate: bool = False


@dataclass(frozen=True)
class ApplyFailure:
    """The state machine raised on an item; every node raised the same (apply is deterministic).

    ``code`` is the raised error's ``code`` attribute when it has one (the state machine's
    own status name, e.g. ``NOT_FOUND``), else ""."""

    message: str
    code: str = ""


@dataclass(frozen=True)
class Offsets:
    end_offset: int
    commit_offset: int
    apply_offset: int
    flushed_offset: int


class ReplicatedLog:
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
        node only stops applying."""
        if health is None:
            engine_health = getattr(engine, "health", None)
            health = engine_health if isinstance(engine_health, Health) else Health()
        self.health = health
        segments.health = health
        self._on_fatal = on_fatal
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
        self._queue: queue.SimpleQueue[tuple[int, int, bytes] | _Marker | _Group | None] = (
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

    # ---------------------------------------------------------------- lifecycle
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

    # ---------------------------------------------------------------- offsets
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

    # ---------------------------------------------------------------- propose
    async def propose(
        self,
        entries: Sequence[Entry],
        timeout_s: float,
        client_id: str | None = None,
        seq: int | None = None,
    ) -> Applied:
        """Propose one request and wait until it is applied on this node.

        Raises a :class:`~raftlog.errors.ProposeError` when consensus refused it
        (``retriable`` says whether to try again) and :class:`UnknownOutcomeError`
        when ``timeout_s`` passed: the request may still be applied later.
        """
        if self.health.refuses_writes and any(e.type != "noop" for e in entries):
            # read barriers (noop) still go through: reads keep their guarantees
            raise NoSpaceError(f"database space exceeded: {self.health.reason()}")
        cid = client_id or self._client_id
        s = seq if seq is not None else next(self._seq)
        data = encode_request(entries, cid, s, int(time.time() * 1000))
        key = (cid, s)
        fut = self._wait.register(key)
        loop = self._loop = asyncio.get_running_loop()
        waiting = len(self._wait)
        if waiting > self._waiting_peak:
            self._waiting_peak = waiting
        self._pending.append((data, key))
        self._pending_bytes += len(data)
        if self._window_timer is None:
            if not self._outstanding:
                self._send_item()
            elif len(self._outstanding) < self._in_flight_limit() and self._batch_window_s > 0:
                # pipelining: while items are out, the next one gathers for a window
                self._open_window()
        self._deadlines.add(loop, timeout_s, key, fut)  # one sweep, not a timer per request
        try:
            result: Applied = await fut
        except BaseException:
            self._wait.cancel(key)  # e.g. the caller went away: forget the waiter
            raise
        return result

    def _send_item(self) -> None:
        """Propose everything pending (up to the item limits) as one consensus item."""
        take, size = 0, 0
        for data, _ in self._pending:
            if take and (
                take >= self._max_item_requests or size + len(data) > self._max_item_bytes
            ):
                break
            take += 1
            size += len(data)
        batch, self._pending = self._pending[:take], self._pending[take:]
        self.items_proposed += 1
        self.requests_proposed += take
        self._pending_bytes -= size
        keys = [key for _, key in batch]
        self._last_item_requests = take
        self._window_elapsed = False
        self._item_seq += 1
        item_seq = self._item_seq
        self._outstanding.add(item_seq)
        loop = self._loop
        assert loop is not None
        # PySyncObj can drop a forwarded item's callback (e.g. when a snapshot from the
        # leader replaces the log under it): never let one lost callback stop group commit
        loop.call_later(self._in_flight_timeout_s, self._in_flight_expired, item_seq)

        def on_proposed(offset: int | None, err: ProposeError | None) -> None:
            # engine thread
            if err is not None:
                for key in keys:
                    self._wait.fail(key, err)
            if running_loop() is loop:  # an engine on our own loop
                # later, not now (run_on): the next item must not be proposed from
                # inside the engine's own pass
                loop.call_soon(self._on_item_done, item_seq)
                return
            try:
                loop.call_soon_threadsafe(self._on_item_done, item_seq)
            except RuntimeError:  # loop closed
                pass

        self._engine.propose(encode_item([data for data, _ in batch]), on_proposed)

    def _on_item_done(self, item_seq: int) -> None:
        if item_seq not in self._outstanding:
            return
        self._outstanding.discard(item_seq)
        self._maybe_send()

    def _maybe_send(self) -> None:
        if (
            not self._pending
            or self._window_timer is not None
            or len(self._outstanding) >= self._in_flight_limit()
        ):
            return
        if (
            not self._window_elapsed
            and self._batch_window_s > 0
            and (self._last_item_requests > 1 or len(self._pending) > 1)
            and len(self._pending) < self._max_item_requests
        ):
            # Under load (the last item, or what waits now, holds several requests): let
            # the next item gather for a short window. Fewer, fuller items cost less per
            # request everywhere (consensus messages, fsyncs, apply groups); a lone writer
            # never waits.
            self._open_window()
            return
        self._send_item()

    def _in_flight_limit(self) -> int:
        # A busy proposer (its last item was full) keeps one item out: the next one gathers
        # while it commits, and fewer, fuller items cost less CPU per request everywhere.
        # Below that, pipelining keeps latency low.
        if self._last_item_requests >= self._busy_item_requests:
            return 1
        return self._max_in_flight

    def _open_window(self) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        if now >= self._peak_period_ends:
            self._waiting_peak_before, self._waiting_peak = self._waiting_peak, len(self._wait)
            self._peak_period_ends = now + PEAK_PERIOD_S
        self._window_timer = loop.call_later(self._window_s(), self._window_closed)

    def _window_s(self) -> float:
        """How long the next item gathers: in proportion to the most requests waiting at
        once lately (``WINDOW_PER_REQUEST_S``), from ``WINDOW_FLOOR_S`` up to
        ``batch_window_s``. More clients means longer: fuller items cost less CPU per
        request on every node; fewer means shorter, for latency (the rule is measured in
        the README's Performance section)."""
        load = max(self._waiting_peak, self._waiting_peak_before)
        floor = min(self._batch_window_s, WINDOW_FLOOR_S)
        return min(self._batch_window_s, max(floor, self._window_per_request_s * load))

    def _window_closed(self) -> None:
        self._window_timer = None
        if not self._pending:
            return
        if len(self._outstanding) < self._in_flight_limit():
            self._send_item()
        else:
            self._window_elapsed = True  # the next answered item sends at once

    def _in_flight_expired(self, item_seq: int) -> None:
        if item_seq in self._outstanding:
            log.warning(
                "a proposed item got no answer in %.0fs; sending the next",
                self._in_flight_timeout_s,
            )
            self._on_item_done(item_seq)

    def _expire(self, key: tuple[str, int], fut: asyncio.Future[Any], timeout_s: float) -> None:
        self._wait.cancel(key)
        if not fut.done():
            fut.set_exception(
                UnknownOutcomeError(
                    f"not applied within {timeout_s:.1f}s; the write may still be applied"
                )
            )

    async def wait_applied(self, offset: int, timeout_s: float) -> None:
        """Wait until this node's apply offset reaches ``offset``."""
        if self._apply_offset >= offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._offset_lock:
            self._offset_waiters.append((offset, fut))
        if self._apply_offset >= offset:  # raced with the apply thread
            self._release_offset_waiters()
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            raise UnknownOutcomeError(
                f"apply offset {self._apply_offset} did not reach {offset} within {timeout_s:.1f}s"
            ) from None

    async def read_barrier(self, timeout_s: float) -> int:
        """A linearizable read index: returns an offset that this node has applied and
        that includes every write acknowledged before the call.

        Concurrent callers share one barrier entry (a ``noop`` through the log, which
        followers forward to the leader) and one future: a caller that arrives while a
        barrier is in flight waits for the next one, which starts after it arrived. The
        barrier's proposal carries the deadline (``timeout_s``), so no caller needs a
        timer of its own.
        """
        loop = asyncio.get_running_loop()
        fut = self._barrier_next
        if fut is None:
            fut = self._barrier_next = loop.create_future()
            fut.add_done_callback(_retrieve)
        if not self._barrier_inflight:
            self._barrier_inflight = True
            # kept: the loop holds tasks weakly
            self._barrier_task = loop.create_task(self._run_barriers(timeout_s))
        return await asyncio.shield(fut)  # a caller that goes away leaves the others be

    async def _run_barriers(self, timeout_s: float) -> None:
        try:
            while self._barrier_next is not None:
                fut, self._barrier_next = self._barrier_next, None
                try:
                    if self._uses_read_index():
                        offset = await self._read_index(timeout_s)
                    else:
                        offset = (await self.propose([Entry(type="noop")], timeout_s)).offset
                except Exception as exc:
                    if not fut.done():
                        fut.set_exception(exc)
                    continue
                if not fut.done():
                    fut.set_result(offset)
        finally:
            self._barrier_inflight = False

    def _uses_read_index(self) -> bool:
        """Confirm reads by ReadIndex rather than a barrier entry: when the engine can
        (the native one), always with :data:`READ_INDEX_ALWAYS`, else while this node is
        degraded (a barrier entry cannot be persisted on a full disk)."""
        if not callable(getattr(self._engine, "read_index", None)):
            return False
        return READ_INDEX_ALWAYS or self.health.state != State.OK

    async def _read_index(self, timeout_s: float) -> int:
        """The engine's ReadIndex (§6.4), translated to the offsets this log numbers:
        the engine answers once it has handed this node every entry up to the read index
        (``_on_commit``), so the offset enqueued at that moment covers every write
        acknowledged before the call (offsets number requests; the Raft index is the
        engine's, and its no-ops and configuration entries carry none)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        fut.add_done_callback(_retrieve)

        def on_read(index: int | None, err: ProposeError | None) -> None:
            # engine thread: everything up to ``index`` went through _on_commit
            if err is not None:
                run_on(loop, _settle_error, fut, err)
            else:
                run_on(loop, _settle_result, fut, self._enqueued_offset)

        self._engine.read_index(on_read)  # type: ignore[attr-defined]
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            raise UnknownOutcomeError(
                f"the read index was not confirmed within {timeout_s:.1f}s"
            ) from None

    # ---------------------------------------------------------------- snapshots
    def enable_snapshots(
        self,
        sink: SnapshotSink,
        engine_base_offset: int,
        every_bytes: int = 0,
        segment_retention_s: float = 0.0,
        segment_archive_dir: str | None = None,
    ) -> None:
        """Let the engine take and install snapshots through ``sink``.

        ``engine_base_offset`` is the last offset inside the engine's current snapshot
        (0 if it has none): the engine replays its log from there. ``every_bytes`` > 0 also
        asks for a snapshot once that many bytes of items were committed since the last
        one (the engine's own trigger counts items). Segments wholly covered by every kept
        snapshot are deleted once ``segment_retention_s`` old, or moved to
        ``segment_archive_dir``.
        """
        self._snapshot_sink = sink
        self._enqueued_offset = engine_base_offset
        self._snapshot_every_bytes = every_bytes
        self._segment_retention_s = segment_retention_s
        self._segment_archive_dir = segment_archive_dir

    # EngineSnapshots, for the consensus engine
    def take(self, raft_index: int, engine_meta: bytes) -> None:
        self.snapshot_take(raft_index, engine_meta)

    def state(self) -> str:
        # 'done' and 'failed' are reported once: the engine then starts afresh
        state = self._snapshot_state
        if state in ("done", "failed"):
            self._snapshot_state = "idle"
        return state

    def load(self, path: str) -> bytes:
        return self.snapshot_load(path)

    def engine_meta(self, path: str) -> bytes:
        assert self._snapshot_sink is not None
        return self._snapshot_sink.header(path)[1]

    def snapshot_take(self, raft_index: int, engine_meta: bytes) -> None:
        """Engine thread: snapshot the state as of the last item handed over (cheap)."""
        if time.monotonic() < self._snapshot_retry_at:
            self._snapshot_state = "failed"  # the last one failed (I/O): not yet again
            return
        self._snapshot_state = "writing"
        self._bytes_since_snapshot = 0
        marker = _Marker("take", raft_index, engine_meta, self._enqueued_offset)
        if self._apply_here():
            self._apply_inline()  # what committed before the marker, first
        if self._apply_here():  # (still: an inline group may have stalled on the disk)
            self._on_marker(marker)  # a capture and a thread start: cheap
        else:
            self._enqueue(marker)

    def snapshot_state(self) -> str:
        return self._snapshot_state

    def snapshot_load(self, path: str) -> bytes:
        """Engine thread: a snapshot file arrived (or is there at start); adopt it, number
        the following items after it, and let the apply thread install it. Returns the
        engine meta stored in it."""
        sink = self._snapshot_sink
        assert sink is not None
        kept = sink.adopt(path)
        last_offset, engine_meta = sink.header(kept)  # the apply thread reads the rest
        self._enqueued_offset = last_offset
        self._installed_offset = max(self._installed_offset, last_offset)
        # always the apply thread: reading a big snapshot must not stall the event loop
        if self._inline:
            self._apply_inline()  # the items committed before it go first
        self._enqueue(_Marker("load", 0, b"", last_offset, kept))
        return engine_meta

    def _on_marker(self, marker: _Marker) -> None:
        sink = self._snapshot_sink
        if sink is None:
            return
        if marker.kind == "take":
            if self._apply_offset != marker.offset:
                log.error(
                    "snapshot at raft index %d: applied %d, expected %d; not taken",
                    marker.raft_index,
                    self._apply_offset,
                    marker.offset,
                )
                self._snapshot_state = "failed"
                return
            captured = self._sm.capture()
            self._snapshot_thread = threading.Thread(
                target=self._write_snapshot,
                args=(sink, captured, marker.raft_index, marker.engine_meta),
                name="snapshot-writer",
                daemon=True,
            )
            self._snapshot_thread.start()
        elif marker.kind == "load":
            if marker.offset <= self._apply_offset:
                log.info("snapshot at offset %d: already applied here", marker.offset)
                return
            with gc_paused(freeze=True):
                last_offset, last_term, _meta, records = sink.read(marker.path)
                effects = self._sm.load(last_offset, last_term, records)
            if last_offset > self._segments.last_offset:
                n = len(effects)
                self._append_changes(
                    [
                        (last_offset, sub, eff.encode(last_term, 0, n))
                        for sub, eff in enumerate(effects)
                    ],
                    may_block=True,
                )
            self._sm.publish()
            self._apply_offset = last_offset
            if self._observer is not None:
                self._observer.on_installed(last_offset)
            log.info(
                "installed the leader's snapshot at offset %d (%d changed records)",
                last_offset,
                len(effects),
            )
            if self._offset_waiters:
                self._release_offset_waiters()

    def _write_snapshot(
        self, sink: SnapshotSink, captured: Captured, raft_index: int, engine_meta: bytes
    ) -> None:
        started = time.monotonic()
        try:
            path = sink.write(captured, raft_index, engine_meta)
            if self._installed_offset >= captured.last_offset:
                # a newer snapshot from the leader replaced the engine's log meanwhile:
                # compacting behind ours now would cut that log; keep the file, skip the rest
                log.info("snapshot at offset %d superseded by the leader's", captured.last_offset)
                self._snapshot_state = "failed"
                return
            sink.publish(path)
            self.last_snapshot_path = path
        except OSError as exc:  # ENOSPC, EIO...: the node goes on; tried again later
            self.health.fault("snapshot", exc)
            self._snapshot_retry_at = time.monotonic() + SNAPSHOT_RETRY_S
            self._snapshot_state = "failed"
            return
        except Exception as exc:
            # e.g. a child writer that failed (its error comes back as text): one line
            # each time, its traceback only the first time
            first = self._snapshot_retry_at == 0.0
            self._snapshot_retry_at = time.monotonic() + SNAPSHOT_RETRY_S
            log.warning(
                "snapshot at offset %d failed: %s; trying again in %.0fs at the earliest",
                captured.last_offset,
                exc,
                SNAPSHOT_RETRY_S,
                exc_info=exc if first else None,
            )
            self._snapshot_state = "failed"
            return
        self.health.clear("snapshot")
        elapsed = time.monotonic() - started
        self.snapshot_durations_s.append(elapsed)
        log.info(
            "snapshot at offset %d (raft index %d) written in %.2fs: %s",
            captured.last_offset,
            raft_index,
            elapsed,
            self.last_snapshot_path,
        )
        # Here, not on the apply thread: unlinking 64 MB segments and syncing the directory
        # took the apply thread (the commit path) 50-90 ms after every big snapshot.
        self._delete_covered_segments(sink.retention_offset())
        self._snapshot_state = "done"

    def _delete_covered_segments(self, before: int) -> None:
        try:
            removed = self._segments.delete_before(
                before, self._segment_retention_s, self._segment_archive_dir
            )
        except (OSError, ValueError):
            log.exception("deleting change-log segments below offset %d failed", before)
            return
        if removed:
            log.info("deleted %d change-log segments below offset %d", removed, before)

    # ---------------------------------------------------------------- apply
    def _on_commit(self, index: int, term: int, data: bytes) -> None:
        # Engine thread: number the item's requests and hand them to apply: the apply
        # thread, or (engine on our loop, nothing queued) a callback right after this pass.
        first = self._enqueued_offset + 1
        self._enqueued_offset += item_count(data)
        if self._apply_here():
            self._inline.append((first, term, data))
            if not self._inline_scheduled:
                assert self._apply_loop is not None
                self._inline_scheduled = True
                self._apply_loop.call_soon(self._apply_inline)
        else:
            self._enqueue((first, term, data))
        if self._snapshot_every_bytes:
            self._bytes_since_snapshot += len(data)
            if (
                self._bytes_since_snapshot >= self._snapshot_every_bytes
                and self._snapshot_state == "idle"
            ):
                self._bytes_since_snapshot = 0
                self._engine.force_snapshot()

    def _apply_here(self) -> bool:
        """Apply on the calling thread: it runs the log's loop, nothing waits in the apply
        thread's queue, and the apply path has not died."""
        return (
            self._loop_thread is not None
            and self._backlog == 0
            and self._apply_error is None
            and threading.get_ident() == self._loop_thread
        )

    def _apply_inline(self) -> None:
        """Apply what committed on the loop so far, in groups of ``apply_batch_max``."""
        self._inline_scheduled = False
        while self._inline and self._apply_error is None:
            group = self._inline[: self._apply_batch_max]
            del self._inline[: len(group)]
            try:
                self._apply_group(group, may_block=False)
            except _Stalled as stalled:
                # the change log cannot take the group now: the apply thread retries it
                # (the loop must not sleep), and everything after queues behind it
                self._enqueue(stalled.group)
                rest, self._inline = self._inline, []
                for item in rest:
                    self._enqueue(item)
                return
            except BaseException as exc:  # a bug or damage: this node cannot go on
                self._inline.clear()
                self._fatal(exc, group[0][0])

    def _enqueue(self, item: tuple[int, int, bytes] | _Marker | _Group) -> None:
        with self._backlog_lock:
            self._backlog += 1
        self._queue.put(item)

    def _done(self, count: int) -> None:
        with self._backlog_lock:
            self._backlog -= count

    def _run_apply(self) -> None:
        first = 0
        try:
            while True:
                item = self._queue.get()
                if item is None or self._apply_error is not None:
                    return  # stopping, or this node cannot go on (on_fatal was called)
                if isinstance(item, _Marker):
                    self._on_marker(item)
                    self._done(1)
                    continue
                if isinstance(item, _Group):  # stalled on the loop: retried here
                    self._finish_group(item, may_block=True)
                    self._done(1)
                    continue
                first = item[0]
                group = [item]
                pending_marker: _Marker | _Group | None = None
                while len(group) < self._apply_batch_max:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        self._apply_group(group)
                        return
                    if isinstance(nxt, (_Marker, _Group)):
                        pending_marker = nxt
                        break
                    group.append(nxt)
                self._apply_group(group)
                if isinstance(pending_marker, _Group):
                    self._finish_group(pending_marker, may_block=True)
                elif pending_marker is not None:
                    self._on_marker(pending_marker)
                # only now may the loop apply inline again: everything before is applied
                self._done(len(group) + (pending_marker is not None))
        except _Stopped:
            return
        except BaseException as exc:  # a bug or damage: this node cannot go on
            self._fatal(exc, first)

    def _fatal(self, exc: BaseException, first: int) -> None:
        """Log once, with the traceback, and tell the owner (the server exits non-zero)."""
        if self._apply_error is not None:
            return
        self._apply_error = exc
        reason = f"apply failed at offsets {first}..: {type(exc).__name__}: {exc}"
        log.critical("%s; this node cannot go on", reason, exc_info=exc)
        if self._on_fatal is not None:
            self._on_fatal(reason)

    def _apply_group(self, group: list[tuple[int, int, bytes]], may_block: bool = True) -> None:
        """Apply a group; ``may_block``: wait out change-log faults here (the apply thread),
        else raise :class:`_Stalled` with the group's outcome (the loop)."""
        self._finish_group(self._compute_group(group), may_block)

    def _compute_group(self, group: list[tuple[int, int, bytes]]) -> _Group:
        """Apply a group into the state machine's pending state (no I/O)."""
        results: list[tuple[tuple[str, int], Applied]] = []
        seg_last = self._segments.last_offset
        last = self._apply_offset
        observer = self._observer
        # the observer needs each change's previous value: the state before the group
        published = self._sm.capture() if observer is not None else None
        changes: list[Change] = []
        # the group's change-log records, appended at once before the image is published
        records: list[tuple[int, int, bytes]] = []
        apply = self._sm.apply
        for first, term, data in group:
            try:
                requests = decode_item(data, first, term)
            except Exception as exc:
                count = item_count(data)
                log.error(
                    "offsets %d..%d: not a metaledger item (%s); applied as no-ops",
                    first,
                    first + count - 1,
                    exc,
                )
                requests = [[] for _ in range(count)]
            for i, entries in enumerate(requests):
                offset = first + i
                if offset <= last:
                    continue  # idempotent replay
                last = offset
                key = (entries[0].client_id, entries[0].seq) if entries else ("", 0)
                earlier = self._first_application(key, offset)
                if earlier is not None:
                    results.append((key, Applied(earlier, None, duplicate=True)))
                    continue
                try:
                    effects, result = apply(offset, term, entries) if entries else ((), None)
                except Exception as exc:
                    # a refusal with a status code is the request's own (a client's mistake,
                    # answered to it): not worth a line per node
                    level = logging.DEBUG if getattr(exc, "code", None) else logging.WARNING
                    log.log(level, "offset %d rejected by the state machine: %s", offset, exc)
                    effects, result = (), ApplyFailure(str(exc), str(getattr(exc, "code", "")))
                if effects:
                    ts = entries[0].timestamp_ms
                    if offset > seg_last:
                        n = len(effects)
                        records.extend(
                            (offset, sub, eff.encode(term, ts, n))
                            for sub, eff in enumerate(effects)
                        )
                    if observer is not None:
                        changes.append(Change(offset, term, ts, effects))
                results.append((key, Applied(offset, result)))
        return _Group(records, results, last, changes, published)

    def _finish_group(self, done: _Group, may_block: bool) -> None:
        """Append the group's records to the change log, then publish and answer."""
        if done.records and not self._append_changes(done.records, may_block):
            raise _Stalled(done)
        self._sm.publish()
        self._apply_offset = done.last
        if self._observer is not None and done.published is not None:
            self._observer.on_applied(done.published, done.last, done.changes)
        self._wait.trigger_many(done.results)
        if self._offset_waiters:
            self._release_offset_waiters()

    def _append_changes(self, records: list[tuple[int, int, bytes]], may_block: bool) -> bool:
        """Append to the change log; an OSError is reported and, with ``may_block``,
        retried with backoff until it succeeds (a failed append leaves the segments as
        they were). False: it failed and may not block."""
        backoff: Backoff | None = None
        while True:
            try:
                self._segments.append_many(records)
            except OSError as exc:
                self.health.fault("change-log", exc)
                if not may_block:
                    return False
                backoff = backoff or Backoff()
                if self._stopping.wait(backoff.failed(time.monotonic())):
                    raise _Stopped from None
                continue
            self.health.clear("change-log")
            return True

    def _first_application(self, key: tuple[str, int], offset: int) -> int | None:
        """Remember (client_id, seq); return the first offset if it was applied before."""
        cid, seq = key
        if not cid:
            return None
        seen = self._sessions.get(cid)
        if seen is None:
            seen = self._sessions[cid] = OrderedDict()
            if len(self._sessions) > DEDUP_CLIENTS:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(cid)
        first = seen.get(seq)
        if first is not None:
            return first
        seen[seq] = offset
        if len(seen) > DEDUP_WINDOW:
            seen.popitem(last=False)
        return None

    def _release_offset_waiters(self) -> None:
        applied = self._apply_offset
        with self._offset_lock:
            ready = [(o, f) for o, f in self._offset_waiters if o <= applied]
            if not ready:
                return
            self._offset_waiters = [(o, f) for o, f in self._offset_waiters if o > applied]
        for _, fut in ready:
            run_on(fut.get_loop(), _set_done, fut)


@dataclass(frozen=True)
class _Group:
    """An apply group applied to the pending state, not yet in the change log."""

    records: list[tuple[int, int, bytes]]
    results: list[tuple[tuple[str, int], Applied]]
    last: int
    changes: list[Change]
    published: Captured | None


class _Stalled(Exception):
    """The change log refused a group on the loop: the apply thread takes it over."""

    def __init__(self, group: _Group) -> None:
        super().__init__("the change log cannot take the group now")
        self.group = group


class _Stopped(Exception):
    """The log stops while an apply group waits for the disk."""


@dataclass(frozen=True)
class _Marker:
    """A non-item in the apply queue: take a snapshot here, or install one."""

    kind: str  # "take" | "load"
    raft_index: int
    engine_meta: bytes
    offset: int  # take: the offset the state must be at; load: the snapshot's last offset
    path: str = ""


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark a shared future's exception seen (its readers may all have gone away)."""
    if not fut.cancelled():
        fut.exception()


def _settle_result(fut: asyncio.Future[int], value: int) -> None:
    if not fut.done():
        fut.set_result(value)


def _settle_error(fut: asyncio.Future[int], err: BaseException) -> None:
    if not fut.done():
        fut.set_exception(err)


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
