"""Group commit and propose-and-wait: concurrent requests become one consensus item.

A proposer sends at once when nothing of its own is in flight, and otherwise gathers
everything that arrives meanwhile into the next item (at most ``max_item_requests``
requests or ``max_item_bytes``); under load the next item gathers for a window sized by
how many requests wait at once. Each caller waits, with a deadline, until its request is
applied on this node. Linearizable reads share one read barrier: the engine's ReadIndex
where it has one, else a ``noop`` entry through the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from raftlog.entry import Entry, encode_item, encode_request
from raftlog.errors import NoSpaceError, ProposeError, UnknownOutcomeError
from raftlog.health import State
from raftlog.log.base import LogBase
from raftlog.log.contracts import Applied
from raftlog.wait import run_on, running_loop

log = logging.getLogger(__name__)

PEAK_PERIOD_S = 0.2
#: Never shorter: a short window makes small items, whose CPU per request then keeps the
#: load from filling them (windows sized by the last item's size stayed short that way,
#: at a third of the throughput).
WINDOW_FLOOR_S = 0.003
#: Linearizable reads confirm their read index by ReadIndex (a heartbeat round, nothing
#: written) whenever the engine can, not only while the node is degraded; measured in
#: bench/results/ (docs/performance.md) (get at 64 clients against the barrier entry).
READ_INDEX_ALWAYS = True


class GroupCommit(LogBase):
    """Proposing (one item for many requests), waiting for apply, read barriers."""

    async def propose(
        self,
        entries: Sequence[Entry],
        timeout_s: float,
        client_id: str | None = None,
        seq: int | None = None,
        even_if_full: bool = False,
    ) -> Applied:
        """Propose one request and wait until it is applied on this node.

        While this node's disk is full its writes are refused (NoSpaceError), unless
        ``even_if_full``: a request about that very disk (a NOSPACE alarm), which the
        other members can commit while this one cannot apply it.

        Raises a :class:`~raftlog.errors.ProposeError` when consensus refused it
        (``retriable`` says whether to try again) and :class:`UnknownOutcomeError`
        when ``timeout_s`` passed: the request may still be applied later.
        """
        if (
            self.health.refuses_writes
            and not even_if_full
            and any(e.type != "noop" for e in entries)
        ):
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
        bench/results/ (docs/performance.md))."""
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
