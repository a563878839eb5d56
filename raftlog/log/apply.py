"""Apply: committed items into the state machine, their effects into the change log.

The engine hands each committed item to :meth:`Apply._on_commit` on its own thread; the
item's requests are numbered on from the last offset and applied either inline on the
event loop (the engine runs there and nothing is queued) or by the apply thread. One
group: decode, de-duplicate by (client id, seq), ``StateMachine.apply`` each request into
the pending state (a request that raises becomes a no-op whose result is an
:class:`~raftlog.log.contracts.ApplyFailure` carrying the exception; the log goes on),
append the effects to the change-log segments, publish the new image, answer the
proposers. A change log that cannot take a group (ENOSPC, EIO...) stalls it, retried with
backoff on the apply thread; any other exception here stops this node (``on_fatal``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import OrderedDict

from raftlog.entry import decode_item, item_count
from raftlog.health import Backoff
from raftlog.log.base import Group, LogBase, Marker
from raftlog.log.contracts import Applied, ApplyFailure, Change
from raftlog.wait import run_on

log = logging.getLogger(__name__)

#: How many (client_id, seq) pairs are remembered per client for de-duplication.
DEDUP_WINDOW = 4096
#: How many clients are remembered (least recently applied are forgotten first).
DEDUP_CLIENTS = 10_000


class Apply(LogBase):
    """The apply path: inline on the loop or on the apply thread, one group at a time."""

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
                    self._on_marker(item)
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
                    self._on_marker(pending_marker)
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
                        records.extend(
                            (offset, sub, eff.encode(term, ts, n))
                            for sub, eff in enumerate(effects)
                        )
                    if observer is not None:
                        changes.append(Change(offset, term, ts, effects))
                results.append((key, Applied(offset, result)))
        return Group(records, results, last, changes, published)

    def _finish_group(self, done: Group, may_block: bool) -> None:
        """Append the group's records to the change log, then publish and answer."""
        if done.records and not self._append_changes(done.records, may_block):
            raise Stalled(done)
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
                    raise Stopped from None
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
