"""The master's HA server: streams its commit log to slaves and counts their acks.

RocketMQ 5 auto-switch HA (its ``store/ha/autoswitch/AutoSwitchHAConnection.java``):
per connection the slave sends its handshake (broker id), the master answers with its max
offset and epoch list, the slave's first ack fixes where streaming starts (0 = the master's
oldest byte, or the start of its last file when the slave asked ``isSyncFromLastFile``; an
offset past the master's end closes the connection). Then data frames of at most 32 KiB
(``haTransferBatchSize``) that never cross an epoch boundary or a segment end, and an empty
frame as heartbeat when nothing was sent for ``heartbeat_interval`` s. A connection that
reads nothing for ``idle_timeout`` s is closed.

Acks drive ``wait_for`` (futures resolved as acks arrive, no polling) and the per-slave
``SlaveState``. ``confirm_offset`` (``AutoSwitchHAService.computeConfirmOffset``): the minimum ack
over the ``sync_state_set`` members (slave ids, the master itself excluded; ``in_sync`` gives them
as the group knows them at that moment), the log end when there are none, unchanged while a
member is disconnected, never lowered. It goes to the slaves in every frame, and slaves serve
consumers up to it: a member that just joined must count at once, or the offset would run past
what it holds and, never lowered, stay there. The send path calls
``notify_appended`` after each append (from the loop or any thread) to wake the streams.
``on_connect`` hears of each slave whose connection is set up (the in-sync set keeper
checks at once: a new master's slaves join as soon as they are there).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import heapq
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from broker.ha.deadlines import set_ha_socket_options
from broker.ha.epochs import EpochEntry, EpochFile, entry_for
from broker.ha.errors import HAError, HAProtocolError
from broker.ha.protocol import (
    DataFrame,
    SlaveAck,
    SlaveHandshake,
    SlaveStreamDecoder,
    encode_data,
    encode_master_handshake,
)
from broker.ha.stream import Deadline, next_event
from broker.store import MessageStore, StoreError

log = logging.getLogger(__name__)

TRANSFER_BATCH_BYTES = 32 * 1024


@dataclass
class SlaveState:
    broker_id: int
    acked: int = -1  # the last max offset the slave reported (-1: none yet)
    connected: bool = False
    caught_up_at: float = 0.0  # time.monotonic() of the last ack that reached the master's end
    address: str = ""


def frame_plan(
    offset: int, end: int, segment_size: int, epochs: Sequence[EpochEntry], batch: int
) -> tuple[EpochEntry, int]:
    """The epoch entry for the bytes at ``offset`` and how many to send in one frame: at most
    ``batch``, not past ``end``, the segment's end or the next epoch's start."""
    found = entry_for(epochs, offset)
    if found is None:  # bytes older than the first epoch (or no epochs): epoch 0
        entry, nxt = EpochEntry(0, 0), (epochs[0].start_offset if epochs else None)
    else:
        entry, nxt = found
    limit = min(end, offset - offset % segment_size + segment_size, offset + batch)
    if nxt is not None:
        limit = min(limit, nxt)
    return entry, max(0, limit - offset)


#: One send waiting for acks: (offset, sequence number, future); kept in a heap by offset
#: per (count, among), so an ack resolves the waiters it satisfies without a scan of all.
_Waiter = tuple[int, int, "asyncio.Future[bool]"]
_WaitKey = tuple[int, "frozenset[int] | None"]


def _write(conn: _Conn, data: bytes) -> None:
    """Write to a slave's connection; one the other task or the peer closed is a closed
    connection (uvloop raises RuntimeError for a write to a closed transport, which
    ``_accept`` would log as a bug), seen under a partition in the network fault harness."""
    if conn.writer.is_closing():
        raise ConnectionResetError(f"the connection to slave {conn.broker_id} is closed")
    conn.writer.write(data)


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


class _Conn:
    def __init__(self, broker_id: int, writer: asyncio.StreamWriter, end: int) -> None:
        self.broker_id = broker_id
        self.writer = writer
        self.wake = asyncio.Event()
        self.last_transfer_max = end  # the master's end when it last sent data


class HAMaster:
    """One per master replica: ``await start()``, then ``port`` is the bound port."""

    def __init__(
        self,
        store: MessageStore,
        host: str,
        port: int,
        epochs: EpochFile,
        *,
        heartbeat_interval: float = 1.0,
        idle_timeout: float = 5.0,
        batch_bytes: int = TRANSFER_BATCH_BYTES,
        on_connect: Callable[[int], None] | None = None,
        in_sync: Callable[[], Collection[int]] | None = None,
    ) -> None:
        self.store = store
        #: the in-sync slaves as the group knows them now, read for each confirm offset
        #: (None: :attr:`sync_state_set`, which its owner sets)
        self.in_sync = in_sync
        #: told a slave's id once its connection is set up (handshake and first ack)
        self.on_connect = on_connect
        self.host = host
        self.port = port
        self.epochs = epochs
        self.heartbeat_interval = heartbeat_interval
        self.idle_timeout = idle_timeout
        self.batch_bytes = batch_bytes
        self.sync_state_set: frozenset[int] = frozenset()  # slave ids; set by the quorum role
        self._confirm = store.log.end_offset
        self._slaves: dict[int, SlaveState] = {}
        self._conns: dict[int, _Conn] = {}
        self._waiters: dict[_WaitKey, list[_Waiter]] = {}  # heaps by offset
        self._seq = 0
        # the waiters' deadlines, earliest first, under one timer (a timer per send costs
        # more than the rest of its wait); resolved waiters leave from the front lazily
        self._deadlines: collections.deque[tuple[float, _Waiter]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._last_frame: tuple[tuple[int, int, EpochEntry, int, int], bytes, int] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    # -- life cycle -----------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        for heap in self._waiters.values():
            for _offset, _seq, fut in heap:
                if not fut.done():
                    fut.set_result(False)
        self._waiters.clear()
        self._deadlines.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- what the send path and the quorum role read --------------------------------
    def slaves(self) -> dict[int, SlaveState]:
        return {k: replace(v) for k, v in self._slaves.items()}

    def slave_states(self) -> Mapping[int, SlaveState]:
        """The live states behind :meth:`slaves`, not copied: read them at once, never
        change or keep them (the send path reads them for every message)."""
        return self._slaves

    @property
    def confirm_offset(self) -> int:
        end = self.store.log.end_offset
        members = self.sync_state_set if self.in_sync is None else self.in_sync()
        if not members:
            self._confirm = max(self._confirm, end)
        elif all(m in self._slaves and self._slaves[m].connected for m in members):
            low = min([end, *(self._slaves[m].acked for m in members)])
            self._confirm = max(self._confirm, low)
        return self._confirm

    def notify_appended(self, end: int | None = None) -> None:
        """New bytes are in the commit log (up to ``end``): wake the streams. Any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if threading.get_ident() == self._loop_thread:
            self._wake_all()
        else:
            loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        for conn in self._conns.values():
            conn.wake.set()

    def _count(self, offset: int, among: frozenset[int] | None) -> int:
        n = 0
        for s in self._slaves.values():  # a loop, not sum(generator): once per send
            if s.acked >= offset and (among is None or s.broker_id in among):
                n += 1
        return n

    def _reach(self, count: int, among: frozenset[int] | None) -> int | None:
        """The highest offset ``count`` slaves (of ``among``) have acked; None if fewer
        than ``count`` slaves are known."""
        acks = sorted(
            (s.acked for s in self._slaves.values() if among is None or s.broker_id in among),
            reverse=True,
        )
        return acks[count - 1] if len(acks) >= count else None

    async def wait_for(
        self,
        offset: int,
        count: int,
        timeout_s: float,
        among: Collection[int] | None = None,
    ) -> bool:
        """True once ``count`` slaves (of ``among``, if given) have acked ``offset`` or more;
        False at ``timeout_s``. An ack counts even if its connection has closed since."""
        group = frozenset(among) if among is not None else None
        if count <= 0 or self._count(offset, group) >= count:
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        key = (count, group)
        self._seq += 1
        waiter = (offset, self._seq, fut)
        heapq.heappush(self._waiters.setdefault(key, []), waiter)
        self._add_deadline(loop, loop.time() + timeout_s, waiter)
        try:
            return await fut
        finally:
            if not fut.done() or fut.cancelled() or not fut.result():  # else _on_ack took it
                self._forget(key, waiter)

    def _add_deadline(
        self, loop: asyncio.AbstractEventLoop, deadline: float, waiter: _Waiter
    ) -> None:
        queue = self._deadlines
        while queue and queue[0][1][2].done():
            queue.popleft()
        if queue and deadline < queue[-1][0]:  # a shorter timeout than an earlier wait's
            bisect.insort(queue, (deadline, waiter), key=lambda d: d[0])
        else:
            queue.append((deadline, waiter))
        timer = self._timer
        if timer is None or deadline < timer.when():
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(queue[0][0], self._expire_due)

    def _expire_due(self) -> None:
        """The timer: every waiter whose deadline passed gets False; re-armed for the next."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        queue = self._deadlines
        while queue and (queue[0][1][2].done() or queue[0][0] <= now):
            _expire(queue.popleft()[1][2])
        if queue:
            self._timer = loop.call_at(queue[0][0], self._expire_due)

    def _forget(self, key: _WaitKey, waiter: _Waiter) -> None:
        heap = self._waiters.get(key)
        if heap is not None and waiter in heap:  # a timeout: rare, a linear removal is fine
            heap.remove(waiter)
            heapq.heapify(heap)
            if not heap:
                del self._waiters[key]

    def _on_ack(self, conn: _Conn, offset: int) -> None:
        state = self._slaves[conn.broker_id]
        state.acked = offset
        if offset >= conn.last_transfer_max:
            state.caught_up_at = time.monotonic()
        if not self._waiters:
            return
        for key, heap in list(self._waiters.items()):
            reach = self._reach(*key)
            if reach is None or heap[0][0] > reach:
                continue
            while heap and heap[0][0] <= reach:
                fut = heapq.heappop(heap)[2]
                if not fut.done():
                    fut.set_result(True)
            if not heap:
                del self._waiters[key]

    # -- one connection -------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = writer.get_extra_info("peername")
        set_ha_socket_options(writer, self.idle_timeout)
        try:
            await self._serve(reader, writer, f"{peer[0]}:{peer[1]}" if peer else "?")
        except (HAError, StoreError, OSError, TimeoutError) as e:
            log.warning("HA connection from %s closed: %s", peer, e)
        except Exception:  # a bug must cost this connection only, never the broker
            log.exception("HA connection from %s failed", peer)
        except asyncio.CancelledError:
            # stop(): end as a finished handler. Python 3.11's start_server calls
            # task.exception() on a cancelled handler and logs the CancelledError as an error
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _next(
        self, reader: asyncio.StreamReader, dec: SlaveStreamDecoder
    ) -> SlaveHandshake | SlaveAck:
        return await next_event(reader, dec, self.idle_timeout, "slave")

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str
    ) -> None:
        dec = SlaveStreamDecoder()
        hello = await self._next(reader, dec)
        if not isinstance(hello, SlaveHandshake):  # the decoder's first phase yields one
            raise HAProtocolError("the slave did not start with a handshake")
        end = self.store.log.end_offset
        writer.write(encode_master_handshake(end, self.epochs.entries))
        await writer.drain()
        first = await self._next(reader, dec)
        if not isinstance(first, SlaveAck):
            raise HAProtocolError("the slave's handshake was not followed by an ack")
        start = first.offset
        if start == 0:
            segs = self.store.log.segments()
            start = (
                segs[-1].start if hello.sync_from_last_file and segs else self.store.log.min_offset
            )
        if start > self.store.log.end_offset or start < self.store.log.min_offset:
            raise HAProtocolError(
                f"slave {hello.broker_id} reports {first.offset}, outside this master's log "
                f"[{self.store.log.min_offset}, {self.store.log.end_offset}]"
            )
        conn = _Conn(hello.broker_id, writer, end)
        old = self._conns.get(hello.broker_id)
        if old is not None:  # the slave reconnected before its old connection timed out
            old.writer.close()
        self._conns[hello.broker_id] = conn
        state = self._slaves.setdefault(hello.broker_id, SlaveState(hello.broker_id))
        state.connected, state.address = True, address
        self._on_ack(conn, first.offset)
        if self.on_connect is not None:
            self.on_connect(hello.broker_id)
        tasks = {
            asyncio.create_task(self._stream(conn, start)),
            asyncio.create_task(self._read_acks(reader, dec, conn)),
        }
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # raises what ended the connection
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self._conns.get(hello.broker_id) is conn:
                del self._conns[hello.broker_id]
                state.connected = False

    async def _read_acks(
        self, reader: asyncio.StreamReader, dec: SlaveStreamDecoder, conn: _Conn
    ) -> None:
        idle = Deadline(self.idle_timeout, conn.writer.transport.abort)
        try:
            while True:
                ev = await next_event(reader, dec, self.idle_timeout, "slave", idle)
                if not isinstance(ev, SlaveAck):
                    raise HAProtocolError("a second slave handshake")
                self._on_ack(conn, ev.offset)
        finally:
            idle.cancel()

    def _frame(self, offset: int, n: int, entry: EpochEntry) -> tuple[bytes, int]:
        """The encoded data frame of ``n`` bytes at ``offset`` and how many it carries. The
        slaves' streams mostly send the same frame one after the other: the last one is
        kept and reused while nothing it was made of changed (the log not truncated since,
        which is read before the bytes are)."""
        key = (offset, n, entry, self.confirm_offset, self.store.log.cuts)
        last = self._last_frame
        if last is not None and last[0] == key:
            return last[1], last[2]
        data = self.store.read_log(offset, n)
        encoded = encode_data(DataFrame(offset, entry.epoch, entry.start_offset, key[3], data))
        self._last_frame = (key, encoded, len(data))
        return encoded, len(data)

    async def _stream(self, conn: _Conn, offset: int) -> None:
        seg_size = self.store.config.segment_size
        beat = Deadline(self.heartbeat_interval, conn.wake.set, repeat=True)
        try:
            while True:
                end = self.store.log.end_offset
                entry, n = frame_plan(offset, end, seg_size, self.epochs.entries, self.batch_bytes)
                if n > 0:
                    encoded, sent = self._frame(offset, n, entry)
                    _write(conn, encoded)
                    conn.last_transfer_max = end
                    await conn.writer.drain()
                    offset += sent
                    beat.push()
                    continue
                state = self._slaves[conn.broker_id]
                if state.acked >= end:
                    state.caught_up_at = time.monotonic()
                conn.wake.clear()
                if self.store.log.end_offset > offset:
                    continue
                if beat.is_due():  # nothing sent for heartbeat_interval s
                    hb = DataFrame(offset, entry.epoch, entry.start_offset, self.confirm_offset)
                    _write(conn, encode_data(hb))
                    await conn.writer.drain()
                    beat.push()
                    continue
                await conn.wake.wait()  # an append, or the heartbeat's deadline
        finally:
            beat.cancel()
