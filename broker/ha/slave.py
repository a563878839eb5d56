"""The slave's HA client: copies the master's commit log byte for byte.

RocketMQ 5 auto-switch HA (its ``store/ha/autoswitch/AutoSwitchHAClient.java``), per
connection: (1) drop any incomplete tail past the last dispatched record; (2) connect and
send the 16-byte handshake with this replica's broker id; (3) on the master's epoch list,
cut commit log and epoch file back to the consistent point (no local epochs: the log is
emptied and copying starts at the master's oldest byte; no consistent point: refuse,
NoConsistentPoint) and ack that offset; (4) per data frame, which must start at the log's
end, record the frame's epoch if it is new, append the bytes with
``store.append_replicated``, set ``confirm_offset = min(frame's confirm offset, own end)``
and ack the new end (once for all the data frames one read brought in). An ack also goes out every ``heartbeat_interval`` s; nothing read for
``idle_timeout`` s closes the connection. Any failure closes it and the client reconnects
after a backoff doubling from ``backoff_initial_s`` to ``backoff_max_s``.

What an ack promises follows the store's flush mode. Under ``SYNC_FLUSH`` a slave acks only
bytes it has fsynced (one fdatasync per read's worth of frames, before its ack; the
handshake's ack and the heartbeats' too), so a master's quorum of acks means "durable on a
quorum" and a power cut of every replica loses nothing acknowledged. Under ``ASYNC_FLUSH`` it
acks bytes it has written but not fsynced, as RocketMQ's does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from broker.ha.deadlines import set_ha_socket_options
from broker.ha.epochs import EpochFile, consistent_point
from broker.ha.errors import HAError, HAProtocolError, NoConsistentPoint
from broker.ha.protocol import (
    DataFrame,
    MasterHandshake,
    MasterStreamDecoder,
    NeedData,
    SlaveHandshake,
    encode_ack,
    encode_slave_handshake,
)
from broker.ha.stream import Deadline, next_event
from broker.store import FlushMode, MessageStore, StoreError

log = logging.getLogger(__name__)

#: a connect to the master's HA port gives up after this (then the backoff, then a new SYN)
CONNECT_TIMEOUT_S = 1.0


class HAClient:
    """One per slave replica: ``await start()`` copies until ``await stop()``."""

    def __init__(
        self,
        store: MessageStore,
        epochs: EpochFile,
        broker_id: int,
        master_ha: tuple[str, int],
        *,
        heartbeat_interval: float = 1.0,
        idle_timeout: float = 5.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 1.0,
        sync_from_last_file: bool = False,
    ) -> None:
        self.store = store
        self.epochs = epochs
        self.broker_id = broker_id
        self.master_ha = master_ha
        self.heartbeat_interval = heartbeat_interval
        self.idle_timeout = idle_timeout
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.sync_from_last_file = sync_from_last_file
        self.connected = False
        self.confirm_offset = 0
        #: the offset the last ack carried (under SYNC_FLUSH: fsynced up to there)
        self.acked_offset = 0
        self.sessions = 0  # connections that got past the handshake
        self.last_error: str | None = None
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._stopping.clear()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.connected = False

    async def _run(self) -> None:
        delay = self.backoff_initial_s
        while not self._stopping.is_set():
            sessions = self.sessions
            try:
                await self._session()
            except (HAError, StoreError, OSError, TimeoutError) as e:
                self.last_error = f"{type(e).__name__}: {e}"
                log.warning("HA client of broker %d: %s", self.broker_id, self.last_error)
            except Exception as e:  # a bug: report it and keep trying, as for a lost master
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("HA client of broker %d failed", self.broker_id)
            finally:
                self.connected = False
            if self.sessions != sessions:
                delay = self.backoff_initial_s
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stopping.wait()
            delay = min(delay * 2, self.backoff_max_s)

    async def _session(self) -> None:
        if self.store.log.end_offset > self.store.dispatched_offset:
            self.store.truncate(self.store.dispatched_offset)  # a record cut by the last frame
        host, port = self.master_ha
        # a fresh SYN each second, not the kernel's 1 s, 3 s, 7 s retransmissions: a master
        # cut off is reached again about a second after the heal
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port), min(self.idle_timeout, CONNECT_TIMEOUT_S)
        )
        set_ha_socket_options(writer, self.idle_timeout)
        beats: asyncio.Task[None] | None = None
        idle: Deadline | None = None
        try:
            writer.write(
                encode_slave_handshake(
                    SlaveHandshake(self.broker_id, self.sync_from_last_file, False)
                )
            )
            await writer.drain()
            dec = MasterStreamDecoder()
            hello = await self._next(reader, dec)
            if not isinstance(hello, MasterHandshake):
                raise HAProtocolError("a data frame before the master's handshake")
            dec.start(self._truncate_to(hello))
            if dec.offset is None:
                self.acked_offset = 0
            writer.write(encode_ack(await self._durable_end() if dec.offset is not None else 0))
            await writer.drain()
            self.connected = True
            self.sessions += 1
            beats = asyncio.create_task(self._heartbeats(writer))
            idle = Deadline(self.idle_timeout, writer.transport.abort)
            while True:
                frame: MasterHandshake | DataFrame | NeedData = await next_event(
                    reader, dec, self.idle_timeout, "master", idle
                )
                ack = False
                while not isinstance(frame, NeedData):  # every frame already received, one ack
                    if not isinstance(frame, DataFrame):
                        raise HAProtocolError("a second master handshake")
                    self._apply(frame)
                    ack = ack or not frame.is_heartbeat
                    frame = dec.next_event()
                if ack:
                    writer.write(encode_ack(await self._durable_end()))
                    await writer.drain()
        finally:
            if idle is not None:
                idle.cancel()
            if beats is not None:
                beats.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await beats
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _durable_end(self) -> int:
        """The offset to ack: the log's end, fsynced first under SYNC_FLUSH."""
        if self.store.config.flush_mode is FlushMode.SYNC_FLUSH:
            end = await asyncio.to_thread(self.store.log.flush)
        else:
            end = self.store.log.end_offset
        self.acked_offset = end
        return end

    async def _next(
        self, reader: asyncio.StreamReader, dec: MasterStreamDecoder
    ) -> MasterHandshake | DataFrame:
        return await next_event(reader, dec, self.idle_timeout, "master")

    def _truncate_to(self, hello: MasterHandshake) -> int | None:
        """Cut the log and the epochs to where they agree with the master; the offset to
        copy from (None: the log is empty and takes the master's first byte). What the log
        no longer holds is not confirmed here any more (consumers read up to the confirm
        offset; bytes copied anew past the cut are confirmed by the frames bringing them)."""
        try:
            return self._cut_to(hello)
        finally:
            self.confirm_offset = min(self.confirm_offset, self.store.log.end_offset)

    def _cut_to(self, hello: MasterHandshake) -> int | None:
        local = self.epochs.entries
        end = self.store.log.end_offset
        if not local:
            if end > self.store.log.min_offset:
                log.warning(
                    "broker %d has a log but no epochs: emptied to copy anew", self.broker_id
                )
                self.store.truncate(self.store.log.min_offset)
            return None
        point = consistent_point(local, end, hello.epochs, hello.max_offset)
        if point is None:
            raise NoConsistentPoint(
                f"no epoch of {list(local)} starts where the master's {list(hello.epochs)} do"
            )
        if point < end:
            log.info("broker %d truncates its log from %d to %d", self.broker_id, end, point)
            self.store.truncate(point)
        self.epochs.truncate_suffix(point)
        if self.store.log.end_offset == self.store.log.min_offset:
            return None
        return point

    def _apply(self, frame: DataFrame) -> None:
        if frame.data:
            if frame.epoch < self.epochs.last_epoch:
                raise HAProtocolError(
                    f"data of epoch {frame.epoch} after local epoch {self.epochs.last_epoch}"
                )
            if frame.epoch > self.epochs.last_epoch:
                self.epochs.append(frame.epoch, frame.epoch_start)
            self.store.append_replicated(frame.offset, frame.data)
        self.confirm_offset = min(frame.confirm_offset, self.store.log.end_offset)

    async def _heartbeats(self, writer: asyncio.StreamWriter) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            writer.write(encode_ack(self.acked_offset))
            await writer.drain()
