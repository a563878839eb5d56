"""Group commit and propose-and-wait: concurrent requests become one consensus item.

A proposer sends at once when nothing of its own is in flight, and otherwise gathers
everything that arrives meanwhile into the next item (at most ``max_item_requests``
requests or ``max_item_bytes``); under load the next item gathers for a window sized by
how many requests wait at once. Each caller waits, with a deadline, until its request is
applied on this node: :class:`GroupCommit` registers it in the :class:`~raftlog.wait.Wait`
it shares with apply, which answers it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from raftlog.clock import LOG_CLOCK, stamp_ms, take_over
from raftlog.consensus import ProposeCallback
from raftlog.deadlines import DeadlineSweep
from raftlog.entry import Entry, decode_item, encode_item, encode_request, stamp_item
from raftlog.errors import NoSpaceError, ProposeError, UnknownOutcomeError
from raftlog.health import Health
from raftlog.log.contracts import Applied
from raftlog.wait import Wait, running_loop

log = logging.getLogger(__name__)

#: An item with this many requests means the proposer is busy: it then keeps one item in
#: flight, not ``max_in_flight``, so items fill up. On a 2-core machine one item in flight
#: always meant ~22 requests per item instead of ~13 and ~55 µs less server CPU per put at
#: 64 clients, but 22% fewer puts/s at 16 clients (bench/results/; docs/performance.md); with this rule 16
#: clients keep pipelining.
BUSY_ITEM_REQUESTS = 10
#: Under load a consensus item gathers requests for this long per request waiting at once
#: (the most seen over the last one or two ``PEAK_PERIOD_S``), from ``WINDOW_FLOOR_S`` up
#: to the server's ``batch_window_ms``: ~1.8 ms at 16 clients, the 3 ms cap from 28 on.
#: Why per request waiting (bench/results/; docs/performance.md): the best fixed window
#: differed with the load (16 clients against 64 on 2 cores), and how many requests wait at
#: once told the loads apart where item sizes did not. The server's default cap is 3 ms, the
#: best at 64 clients since its extra gRPC accepts; on the AMD host of 2026-12-07 the best at
#: 16 clients was near the ~1.8 ms this rule gives them
#: (bench/results/group-commit-window-2026-12-07.md).
WINDOW_PER_REQUEST_S = 0.00011
PEAK_PERIOD_S = 0.2
#: Never shorter: a short window makes small items, whose CPU per request then keeps the
#: load from filling them (windows sized by the last item's size stayed short that way,
#: at a third of the throughput). At 3 ms, as it was, every window was 3 ms from 2 clients
#: to 64; at 1 ms, 16 clients gather for ~1.8 ms: 1.11-1.22x the puts/s at 16, 1.20x at 8,
#: 1.28x at 4, 32 and 64 the same (bench.compare_etcd, both trees interleaved, 2026-12-07);
#: halving this and the per-request share as well cost more CPU per put for less.
WINDOW_FLOOR_S = 0.001
#: A proposed item that got no answer by then no longer holds up the next one.
IN_FLIGHT_TIMEOUT_S = 5.0


def leader_stamp(data: bytes) -> bytes:
    """An item a follower forwarded, stamped with this (the leader's) clock: the engine's
    ``stamp_forwarded`` (``NativeConfig``). Time then enters the log from the leader only."""
    return stamp_item(data, stamp_ms())


def leader_takes_over(newest_item: bytes) -> None:
    """The native engine's ``on_lead``: this node became leader and ``newest_item`` is the
    newest normal item in its log. The log's time is taken from its stamps before this
    node stamps anything (:func:`raftlog.clock.take_over`); an item that does not decode
    gives none."""
    if not newest_item:
        return
    try:
        requests = decode_item(newest_item, 0, 0)
    except Exception:  # not an item (an older format): the applied stamps still hold
        return
    take_over(max((r[0].timestamp_ms for r in requests if r), default=0))


class GroupCommit:
    """Proposing (one item for many requests) and waiting for apply; owns what is
    pending, what is in flight and the batch window (all on the proposers' loop)."""

    def __init__(
        self,
        propose_item: Callable[[bytes, ProposeCallback], None],
        wait: Wait,
        health: Health,
        client_id: str,
        max_item_requests: int,
        max_item_bytes: int,
        batch_window_s: float,
        max_in_flight: int,
        busy_item_requests: int,
        window_per_request_s: float,
    ) -> None:
        """``propose_item``: the engine's ``propose``; ``wait``: the registry apply
        answers; ``health``: while it refuses writes, proposals are refused."""
        self._propose_item = propose_item
        self._wait = wait
        self._health = health
        self._client_id = client_id
        self._seq = itertools.count(1)
        self._deadlines = DeadlineSweep(self._expire)
        self._max_item_requests = max_item_requests
        self._max_item_bytes = max_item_bytes
        self._batch_window_s = batch_window_s
        self._max_in_flight = max(1, max_in_flight)
        self._busy_item_requests = busy_item_requests
        self._window_per_request_s = window_per_request_s
        self._window_elapsed = False  # a window closed while max_in_flight items were out
        self._last_item_requests = 0  # requests in the item last sent (load detector)
        self._window_timer: asyncio.TimerHandle | None = None
        # the most requests waiting at once in this period and the one before: how many
        # clients keep requests coming (a long window only helps when there are many)
        self._waiting_peak = 0
        self._waiting_peak_before = 0
        self._peak_period_ends = 0.0
        self._pending: list[tuple[bytes, tuple[str, int]]] = []
        #: the log clock's epoch when the oldest pending request was stamped (None: none
        #: pending): an item holding a request stamped before a takeover measured the
        #: log's time gets this node's stamp (:meth:`_send_item`)
        self._stamped_epoch: int | None = None
        self._pending_bytes = 0
        self._outstanding: set[int] = set()  # items proposed and not yet answered
        self._item_seq = 0
        self._in_flight_timeout_s = IN_FLIGHT_TIMEOUT_S
        self._loop: asyncio.AbstractEventLoop | None = None
        self.items_proposed = 0  # group-commit statistics of this node's proposals
        self.requests_proposed = 0

    @property
    def client_id(self) -> str:
        return self._client_id

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
            self._health.refuses_writes
            and not even_if_full
            and any(e.type != "noop" for e in entries)
        ):
            # read barriers (noop) still go through: reads keep their guarantees
            raise NoSpaceError(f"database space exceeded: {self._health.reason()}")
        cid = client_id or self._client_id
        s = seq if seq is not None else next(self._seq)
        if not self._pending:
            self._stamped_epoch = LOG_CLOCK.epoch
        data = encode_request(entries, cid, s, stamp_ms())
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

        item = encode_item([data for data, _ in batch])
        if self._stamped_epoch is not None and self._stamped_epoch != LOG_CLOCK.epoch:
            # stamped before this node took over (an hour from the log's time, maybe): the
            # item carries its clock now, as a forward to it would
            item = stamp_item(item, stamp_ms())
        if not self._pending:
            self._stamped_epoch = None
        self._propose_item(item, on_proposed)

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
