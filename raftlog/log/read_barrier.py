"""Read barriers: a linearizable read index, shared by the readers that ask at once.

The engine's ReadIndex confirms it where the engine has one (the native engine: a
heartbeat round, nothing written, so reads work on a full disk), else a ``noop`` entry
through the log does (PySyncObj).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from raftlog.consensus import ProposeCallback
from raftlog.entry import Entry
from raftlog.errors import ProposeError, UnknownOutcomeError
from raftlog.health import Health, State
from raftlog.log.contracts import Applied
from raftlog.wait import run_on

#: Linearizable reads confirm their read index by ReadIndex (a heartbeat round, nothing
#: written) whenever the engine can, not only while the node is degraded; measured in
#: bench/results/ (docs/performance.md) (get at 64 clients against the barrier entry).
READ_INDEX_ALWAYS = True


class ReadBarrier:
    """One read barrier in flight at a time; the readers that arrive meanwhile share the
    next (all on the readers' loop)."""

    def __init__(
        self,
        propose: Callable[[Sequence[Entry], float], Awaitable[Applied]],
        read_index: Callable[[ProposeCallback], None] | None,
        health: Health,
        committed_offset: Callable[[], int],
    ) -> None:
        """``propose``: group commit's (for a barrier entry); ``read_index``: the engine's,
        None if it has none; ``committed_offset()``: the last offset handed to apply (read
        on the engine's thread when it confirms a read index)."""
        self._propose = propose
        self._engine_read_index = read_index
        self._health = health
        self._committed_offset = committed_offset
        self._barrier_next: asyncio.Future[int] | None = None  # the next barrier's readers
        self._barrier_task: asyncio.Task[None] | None = None
        self._barrier_inflight = False

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
                        offset = (await self._propose([Entry(type="noop")], timeout_s)).offset
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
        if self._engine_read_index is None:
            return False
        return READ_INDEX_ALWAYS or self._health.state != State.OK

    async def _read_index(self, timeout_s: float) -> int:
        """The engine's ReadIndex (§6.4), translated to the offsets this log numbers:
        the engine answers once it has handed this node every entry up to the read index
        (to :meth:`~raftlog.log.apply.Apply.on_commit`), so the offset handed to apply at
        that moment covers every write acknowledged before the call (offsets number
        requests; the Raft index is the engine's, and its no-ops and configuration entries
        carry none)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        fut.add_done_callback(_retrieve)

        def on_read(index: int | None, err: ProposeError | None) -> None:
            # engine thread: everything up to ``index`` went through on_commit
            if err is not None:
                run_on(loop, _settle_error, fut, err)
            else:
                run_on(loop, _settle_result, fut, self._committed_offset())

        assert self._engine_read_index is not None
        self._engine_read_index(on_read)
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
