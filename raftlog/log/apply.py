"""Apply: committed items into the state machine, their effects into the change log.

The engine hands each committed item to :meth:`Apply.on_commit` on its own thread; the
item's requests are numbered on from the last offset and applied either inline on the
event loop (the engine runs there and nothing is queued) or by the apply thread. One
group: decode, de-duplicate by (client id, seq), ``StateMachine.apply`` each request into
the pending state (a request that raises becomes a no-op whose result is an
:class:`~raftlog.log.contracts.ApplyFailure` carrying the exception; the log goes on),
append the effects to the change-log segments, publish the new image, answer the
proposers. A change log that cannot take a group (ENOSPC, EIO...) stalls it, retried with
backoff on the apply thread; any other exception here stops this node (``on_fatal``).

Snapshot duties put their work in the same order through :meth:`Apply.at_commit_point`
and :meth:`Apply.jump_to`: a :class:`Marker` in the apply queue runs when everything
committed before it is applied.

A little over 500 lines: the apply loop, its stall-and-retry path and the snapshot markers
share the loop's state.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from raftlog.clock import note_applied_stamp
from raftlog.entry import Effect, decode_item, item_count
from raftlog.errors import UnknownOutcomeError
from raftlog.health import Backoff, Health
from raftlog.log.contracts import (
    Applied,
    ApplyFailure,
    ApplyObserver,
    Captured,
    Change,
    StateMachine,
)
from raftlog.segments import SegmentLog
from raftlog.wait import Wait, run_on, running_loop

log = logging.getLogger(__name__)

#: How many (client_id, seq) pairs are remembered per client for de-duplication.
DEDUP_WINDOW = 4096
#: How many clients are remembered (least recently applied are forgotten first).
DEDUP_CLIENTS = 10_000


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
    """A non-item in the apply queue: ``run()`` once everything before it is applied
    (take a snapshot here, or install one)."""

    run: Callable[[], None]


class Apply:
    """The apply path: inline on the loop or on the apply thread, one group at a time. Owns
    the numbering of committed items (the commit offset), the apply offset and what waits
    for it, the apply queue and the de-duplication sessions."""

    def __init__(
        self,
        state_machine: StateMachine,
        segments: SegmentLog,
        wait: Wait,
        health: Health,
        apply_batch_max: int,
        apply_on_loop: bool,
        refusals: tuple[type[Exception], ...],
        on_fatal: Callable[[str], None] | None,
    ) -> None:
        """``wait``: the proposers' registry, answered with each group's results. The rest
        as in :class:`~raftlog.log.replicated.ReplicatedLog`."""
        self._sm = state_machine
        self._segments = segments
        self._wait = wait
        self._health = health
        self._apply_batch_max = apply_batch_max
        self._apply_on_loop = apply_on_loop
        self._refusals = refusals
        self._on_fatal = on_fatal
        self._observer: ApplyObserver | None = None
        self._stopping = threading.Event()
        self._queue: queue.SimpleQueue[tuple[int, int, bytes] | Marker | Group | None] = (
            queue.SimpleQueue()
        )
        self._apply_offset = state_machine.last_offset
        self._enqueued_offset = self._apply_offset
        #: the timestamp of the last request applied (0: none since start): the clock of
        #: the leader that appended it (see :attr:`last_stamp_ms`)
        self._last_stamp_ms = 0
        self._sessions: OrderedDict[str, OrderedDict[int, int]] = OrderedDict()
        self._apply_thread: threading.Thread | None = None
        self._apply_error: BaseException | None = None
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
        # the snapshot trigger by bytes (engine thread): see count_snapshot_bytes
        self._snapshot_every_bytes = 0
        self._bytes_since_snapshot = 0
        self._snapshot_due: Callable[[], bool] | None = None
        #: apply groups finished and the requests in them (the apply path's batching: a
        #: group's fixed cost, the publish and the change-log write, is paid once a group)
        self.groups_applied = 0
        self.requests_applied = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start the apply thread; with ``apply_on_loop``, apply inline on the running loop."""
        if self._apply_on_loop:
            self._apply_loop = running_loop()
            if self._apply_loop is not None:
                self._loop_thread = threading.get_ident()
        self._apply_thread = threading.Thread(target=self._run_apply, name="apply", daemon=True)
        self._apply_thread.start()

    def stop(self) -> None:
        self._stopping.set()  # an apply group waiting for the disk gives up
        self._queue.put(None)
        if self._apply_thread is not None:
            self._apply_thread.join(timeout=10)

    def set_on_fatal(self, on_fatal: Callable[[str], None] | None) -> None:
        self._on_fatal = on_fatal

    def set_observer(self, observer: ApplyObserver | None) -> None:
        self._observer = observer

    @property
    def apply_offset(self) -> int:
        """The last offset built into the published state."""
        return self._apply_offset

    @property
    def last_stamp_ms(self) -> int:
        """The ``timestamp_ms`` of the last request applied here (0: none since start): the
        clock of the leader that appended it, as this node last heard it. Keepers compare it
        with their own clock (:mod:`nameserver.state.duties`)."""
        return self._last_stamp_ms

    @property
    def committed_offset(self) -> int:
        """The last offset handed to apply (committed by definition)."""
        return self._enqueued_offset

    def number_after(self, offset: int) -> None:
        """The next committed item's requests are numbered from ``offset + 1`` (the engine
        replays its log from a snapshot that ends there)."""
        self._enqueued_offset = offset

    def count_snapshot_bytes(self, every_bytes: int, due: Callable[[], bool]) -> None:
        """Call ``due()`` (engine thread) once ``every_bytes`` of items committed since the
        last snapshot; True: it asked for one, and the count starts afresh."""
        self._snapshot_every_bytes = every_bytes
        self._snapshot_due = due

    def restart_snapshot_bytes(self) -> None:
        """A snapshot is being taken: count the bytes from here (engine thread)."""
        self._bytes_since_snapshot = 0

    # ------------------------------------------------------------------ the commit path
    def on_commit(self, index: int, term: int, data: bytes) -> None:
        """The engine's commit sink."""
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
                and self._snapshot_due is not None
                and self._snapshot_due()
            ):
                self._bytes_since_snapshot = 0

    def at_commit_point(self, marker: Marker) -> None:
        """Run ``marker`` once everything committed so far is applied: at once when this
        thread runs the log's loop and nothing is queued (after what waits inline), else
        on the apply thread, in order."""
        if self._apply_here():
            self._apply_inline()  # what committed before the marker, first
        if self._apply_here():  # (still: an inline group may have stalled on the disk)
            marker.run()  # a capture and a thread start: cheap
        else:
            self._enqueue(marker)

    def jump_to(self, last_offset: int, marker: Marker) -> None:
        """A snapshot ending at ``last_offset`` replaces the state: the items committed
        from now on are numbered after it, and ``marker`` installs it on the apply thread
        (never the loop: reading a big snapshot must not stall it), after the items
        committed before."""
        self._enqueued_offset = last_offset
        if self._inline:
            self._apply_inline()  # the items committed before it go first
        self._enqueue(marker)

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
            except Stalled as stalled:
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

    def _enqueue(self, item: tuple[int, int, bytes] | Marker | Group) -> None:
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
                if isinstance(item, Marker):
                    item.run()
                    self._done(1)
                    continue
                if isinstance(item, Group):  # stalled on the loop: retried here
                    self._finish_group(item, may_block=True)
                    self._done(1)
                    continue
                first = item[0]
                group = [item]
                pending_marker: Marker | Group | None = None
                while len(group) < self._apply_batch_max:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        self._apply_group(group)
                        return
                    if isinstance(nxt, (Marker, Group)):
                        pending_marker = nxt
                        break
                    group.append(nxt)
                self._apply_group(group)
                if isinstance(pending_marker, Group):
                    self._finish_group(pending_marker, may_block=True)
                elif pending_marker is not None:
                    pending_marker.run()
                # only now may the loop apply inline again: everything before is applied
                self._done(len(group) + (pending_marker is not None))
        except Stopped:
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

    def apply_committed(self, group: list[tuple[int, int, bytes]]) -> None:
        """Apply ``group`` (``(first offset, term, item)`` triples, in log order) on the
        calling thread, exactly as the apply thread applies a committed group. For tools that
        drive the apply path without consensus (``bench/apply_bench.py``); a log whose engine
        runs applies through its own threads and must not be fed this way."""
        self._apply_group(group)

    def _apply_group(self, group: list[tuple[int, int, bytes]], may_block: bool = True) -> None:
        """Apply a group; ``may_block``: wait out change-log faults here (the apply thread),
        else raise :class:`Stalled` with the group's outcome (the loop)."""
        self._finish_group(self._compute_group(group), may_block)

    def _compute_group(self, group: list[tuple[int, int, bytes]]) -> Group:
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
                if requests and requests[-1]:
                    self._last_stamp_ms = requests[-1][0].timestamp_ms
                    note_applied_stamp(self._last_stamp_ms)  # never stamped below
            except Exception as exc:
                # Its count is whatever its first four bytes say (up to 2**32 - 1): the
                # offsets it numbered are skipped as one no-op range, never one by one.
                count = item_count(data)
                log.error(
                    "offsets %d..%d: not a metaledger item (%s); applied as no-ops",
                    first,
                    first + count - 1,
                    exc,
                )
                last = max(last, first + count - 1)
                continue
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
                    # a refusal is the request's own (a client's mistake, answered to it):
                    # not worth a line per node
                    level = logging.DEBUG if isinstance(exc, self._refusals) else logging.WARNING
                    log.log(level, "offset %d rejected by the state machine: %s", offset, exc)
                    effects, result = (), ApplyFailure(exc)
                if effects:
                    ts = entries[0].timestamp_ms
                    if offset > seg_last:
                        n = len(effects)
                        if n == 1:  # a put: no generator for one record
                            records.append((offset, 0, effects[0].encode(term, ts, 1)))
                        else:
                            records.extend(
                                (offset, sub, eff.encode(term, ts, n))
                                for sub, eff in enumerate(effects)
                            )
                    if observer is not None:
                        changes.append(_change(offset, term, ts, effects))
                results.append((key, Applied(offset, result)))
        return Group(records, results, last, changes, published)

    def _finish_group(self, done: Group, may_block: bool) -> None:
        """Append the group's records to the change log, then publish and answer."""
        if done.records and not self._append_changes(done.records, may_block):
            raise Stalled(done)
        self._sm.publish()
        self._apply_offset = done.last
        self.groups_applied += 1
        self.requests_applied += len(done.results)
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
                self._health.fault("change-log", exc)
                if not may_block:
                    return False
                backoff = backoff or Backoff()
                if self._stopping.wait(backoff.failed(time.monotonic())):
                    raise Stopped from None
                continue
            self._health.clear("change-log")
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

    def install(self, last_offset: int, last_term: int, effects: Sequence[Effect]) -> None:
        """Apply thread: the state machine loaded a snapshot ending at ``last_offset``;
        ``effects`` turn the old state into it. They go to the change log, then the new
        state is published and becomes the applied one."""
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
        if self._offset_waiters:
            self._release_offset_waiters()

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

    def _release_offset_waiters(self) -> None:
        applied = self._apply_offset
        with self._offset_lock:
            ready = [(o, f) for o, f in self._offset_waiters if o <= applied]
            if not ready:
                return
            self._offset_waiters = [(o, f) for o, f in self._offset_waiters if o > applied]
        for _, fut in ready:
            run_on(fut.get_loop(), _set_done, fut)


#: Change's slot descriptors' setters, in field order (see _change)
_CH_OFFSET, _CH_TERM, _CH_TS, _CH_EFFECTS = (
    getattr(Change, f.name).__set__ for f in fields(Change)
)


def _change(offset: int, term: int, timestamp_ms: int, effects: Sequence[Effect]) -> Change:
    """``Change(...)`` at a quarter of the cost of its frozen ``__init__`` (one per request
    on every node's apply path; :func:`raftlog.entry._entry` does the same)."""
    change: Change = object.__new__(Change)
    _CH_OFFSET(change, offset)
    _CH_TERM(change, term)
    _CH_TS(change, timestamp_ms)
    _CH_EFFECTS(change, effects)
    return change


class Stalled(Exception):
    """The change log refused a group on the loop: the apply thread takes it over."""

    def __init__(self, group: Group) -> None:
        super().__init__("the change log cannot take the group now")
        self.group = group


class Stopped(Exception):
    """The log stops while an apply group waits for the disk."""


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
