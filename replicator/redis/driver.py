"""The one asyncio driver of the replica protocol: a socket, three tasks, nothing clever.

:class:`ReplicaLink` connects to a master, runs :class:`~replicator.redis.protocol.ReplicaProtocol`
and hands every event, in order, to an async consumer. Three tasks share the link:

* the **reader** reads the socket continuously and feeds the protocol. It never waits on the
  consumer: events go to an :class:`~replicator.redis.spool.EventSpool` (memory up to
  ``spool_memory_bytes``, then a spill file in ``spool_dir``; ``pending_events`` counts
  them), so the master never cuts the link for its output-buffer limit and memory stays
  bounded however slow the sink is. It answers
  ``REPLCONF GETACK *`` at once.
* the **ACK timer** sends ``REPLCONF ACK <offset>`` every ``ack_interval_s`` (1 s, as
  ``replicationCron`` does) with ``confirmed_offset()``, the offset the sink has confirmed,
  never what was merely parsed. It never waits on the consumer. The value is clamped to
  ``[0, protocol.offset]``: a confirmed offset from an older epoch (a previous replid with
  higher numbers) must not claim bytes this link has not even read. It also watches the
  link: nothing read for ``read_timeout_s`` (the master pings every 10 s, writes ``\\n``
  every second while it prepares a payload) ends it with ``TimeoutError``.
* the **consumer** task awaits ``consumer(event)`` for each event, one at a time.

The ACK right after ``RdbEnd``: Redis 7.0 holds the command stream back after a diskless
sync until a ``REPLCONF ACK`` arrives *after* its fork child was reaped
(``repl_start_cmd_stream_on_ack``; an ACK before ``checkChildrenDone`` saw the child exit is
ignored). The driver acks at once after ``RdbEnd`` so the stream starts as early as possible (when
the child was already reaped), and the 1-second timer covers the case where it was not. Any value
starts the stream, so that ACK too carries ``confirmed_offset()`` and nothing more: the snapshot's
messages are not confirmed yet, and ``INFO replication`` (and ``WAIT``) must never show the master
an offset the sink does not hold. ``confirmed_offset`` answers in the terms of the link's current
history (0 until something of it is confirmed).

``-LOADING`` / ``-NOMASTERLINK`` / ``-MASTERDOWN`` during the handshake (``MasterNotReady``,
``retriable``) are retried on a new connection after ``retry_delay_s``, up to
``not_ready_retries`` times; no event has reached the consumer by then. Every other error
ends :meth:`ReplicaLink.run`: a ``ProtocolError``/``HandshakeError`` from the protocol,
``ConnectionError`` when the master closes the link (after every event read before it was
delivered), ``TimeoutError``, or whatever the consumer raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Final

from replicator.redis.errors import MasterNotReady, RedisReplicatorError
from replicator.redis.protocol import (
    Event,
    GetAck,
    Phase,
    RdbEnd,
    ReplicaConfig,
    ReplicaProtocol,
)
from replicator.redis.resp import NeedData
from replicator.redis.spool import EventSpool

READ_BYTES: Final = 256 * 1024


Consumer = Callable[[Event], Awaitable[None]]


class ReplicaLink:
    """One replication link to ``host:port``. ``run()`` until it fails or ``close()``."""

    def __init__(
        self,
        host: str,
        port: int,
        consumer: Consumer,
        confirmed_offset: Callable[[], int],
        config: ReplicaConfig | None = None,
        *,
        ack_interval_s: float = 1.0,
        read_timeout_s: float = 60.0,
        connect_timeout_s: float = 10.0,
        retry_delay_s: float = 1.0,
        not_ready_retries: int = 30,
        spool_dir: str | None = None,
        spool_memory_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.host = host
        self.port = port
        self.consumer = consumer
        self.confirmed_offset = confirmed_offset
        self.config = config or ReplicaConfig()
        self.config.validate()
        self.ack_interval_s = ack_interval_s
        self.read_timeout_s = read_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retry_delay_s = retry_delay_s
        self.not_ready_retries = not_ready_retries
        self.protocol = ReplicaProtocol(self.config)
        self.acked: int | None = None
        """The last offset sent in a ``REPLCONF ACK`` (None before the first)."""
        self.spool_dir = spool_dir
        self.spool_memory_bytes = spool_memory_bytes
        self._queue = EventSpool(spool_dir, spool_memory_bytes)
        self._end: BaseException | None = None  # why the reader stopped
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._last_read = time.monotonic()

    @property
    def pending_events(self) -> int:
        """Events read but not yet handed to the consumer."""
        return len(self._queue)

    @property
    def spooled_bytes(self) -> int:
        """Bytes of those events on disk now (the sink is slower than the master)."""
        return self._queue.disk_bytes

    async def run(self) -> None:
        attempts = 0
        while True:
            try:
                await self._run_once()
                return
            except MasterNotReady:
                attempts += 1
                if self._closing or attempts > self.not_ready_retries:
                    raise
                await asyncio.sleep(self.retry_delay_s)
                if self._closing:
                    return
                self.protocol = ReplicaProtocol(self.config)

    async def close(self) -> None:
        """Stop the link; ``run()`` returns."""
        self._closing = True
        for task in self._tasks:
            task.cancel()

    # --- internals ---------------------------------------------------------------------

    async def _run_once(self) -> None:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port), self.connect_timeout_s
        )
        if self._closing:  # close() came while connecting
            writer.close()
            return
        self._last_read = time.monotonic()
        self._queue.discard()
        self._queue = EventSpool(self.spool_dir, self.spool_memory_bytes)
        self._end = None
        self._tasks = [
            asyncio.create_task(self._read(reader, writer), name="redis-replica-read"),
            asyncio.create_task(self._consume(), name="redis-replica-consume"),
            asyncio.create_task(self._ack_timer(writer), name="redis-replica-ack"),
        ]
        try:
            done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_EXCEPTION)
            if not self._closing:
                for task in done:
                    error = None if task.cancelled() else task.exception()
                    if error is not None:
                        raise error
        finally:
            for task in self._tasks:
                task.cancel()
            # their outcomes were read above; a cancellation of run() itself still propagates
            await asyncio.gather(*self._tasks, return_exceptions=True)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Events read before an error still reach the consumer, then the error does."""
        try:
            await self._read_until_closed(reader, writer)
        except (RedisReplicatorError, OSError) as exc:
            self._end = exc
            self._queue.close()
        else:
            proto = self.protocol
            self._end = ConnectionError(
                f"the master {self.host}:{self.port} closed the link in phase "
                f"{proto.phase.value} at offset {proto.offset}"
            )
            self._queue.close()

    async def _read_until_closed(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        proto = self.protocol
        writer.write(proto.data_to_send())
        while True:
            data = await reader.read(READ_BYTES)
            self._last_read = time.monotonic()
            if not data:
                return
            proto.receive_data(data)
            while not isinstance(event := proto.next_event(), NeedData):
                if isinstance(event, RdbEnd | GetAck):
                    self._send_ack(writer)
                self._queue.put(event)
            out = proto.data_to_send()
            if out:
                writer.write(out)

    def _send_ack(self, writer: asyncio.StreamWriter) -> None:
        proto = self.protocol
        offset = max(min(self.confirmed_offset(), proto.offset), 0)
        writer.write(proto.ack(offset))
        self.acked = offset

    async def _ack_timer(self, writer: asyncio.StreamWriter) -> None:
        while True:
            await asyncio.sleep(self.ack_interval_s)
            if time.monotonic() - self._last_read > self.read_timeout_s:
                raise TimeoutError(
                    f"nothing read from {self.host}:{self.port} for {self.read_timeout_s} s "
                    f"(phase {self.protocol.phase.value})"
                )
            if self.protocol.phase is Phase.COMMAND_STREAM:
                self._send_ack(writer)

    async def _consume(self) -> None:
        while True:
            event = await self._queue.get()
            if event is None:
                assert self._end is not None
                raise self._end
            await self.consumer(event)
