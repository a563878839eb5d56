"""The Redis replicator: one process of a job, active while it holds the job's lease.

Everything else in this package is sans-I/O or a thin driver; this module wires them::

    ReplicaLink (driver.py: socket, ACK clock, event spool)
      └─ events ─▶ RdbParser + CommandReplay (rdb/)  ─┐
                   EventBuilder (events.py, routing) ◀┘─▶ OutMessages ─▶ Sink.submit
    Watermark (checkpoint.py) ◀── confirmations ──┘
      ├─▶ the ACK clock's confirmed offset (what the master sees)
      └─▶ CheckpointStore.commit (metaledger Offsets, fenced by the ActiveRole's lease)

One pass of :meth:`RedisReplicator.run_active` lasts while the link, the sink and the lease
hold; any failure (a send the sink gave up on, a broken link, a protocol error, the lease
lost) ends it, and the next pass starts again from the last *committed* checkpoint: PSYNC
``replid offset+1`` (``+CONTINUE``: the stream resumes at a command boundary outside any
transaction, in the checkpoint's db) or a full sync with SNAPSHOT markers. Messages sent after
the checkpoint and before the failure are sent again: duplicates only within the in-flight
window, never a gap (docs/redis-replicator.md, "Acks and checkpoints").

The checkpoint's ``generation`` counts full syncs, so a new history (a master restarted after
kill -9, a backlog overflow) still moves the stored position forward (checkpoint.py).

A little over 500 lines: one job's lease, sync and checkpoint loop share their state (the
protocol itself is sans-I/O in :mod:`replicator.redis.protocol`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from nameserver.client import Client, ClientError, LeaseLost
from replicator.lease import ActiveRole, Fence, watch_lease
from replicator.redis.checkpoint import Boundary, Checkpoint, CheckpointStore, Watermark
from replicator.redis.cluster import ClusterResolver, parse_shard
from replicator.redis.commands import CommandTable
from replicator.redis.config import RedisReplicatorConfig, Source, load_command_table, make_sink
from replicator.redis.driver import ReplicaLink
from replicator.redis.errors import RedisReplicatorError
from replicator.redis.events import Batch, EventBuilder
from replicator.redis.metrics import RedisMetrics
from replicator.redis.protocol import (
    Continue,
    Event,
    FullSync,
    RdbBegin,
    RdbChunk,
    RdbEnd,
    ReplicaConfig,
    StreamCommand,
)
from replicator.redis.rdb import NeedData, RdbParser
from replicator.redis.rdb.commands import CommandReplay
from replicator.sinks.base import OutMessage, Sink
from replicator.sinks.errors import SinkError
from replicator.status import StatusPublisher

__all__ = ["RedisReplicator"]

log = logging.getLogger(__name__)

#: snapshot messages sent together (one ``Sink.submit_many``, one confirmation): about a
#: 256 KiB read of 512-byte strings; well under the sink's ``max_in_flight``
SNAPSHOT_RUN = 512

#: before the first full sync there is no history: its replid is a placeholder, never stored
NO_REPLID = "?"


class _Restart(Exception):
    """This pass is over; the next one starts from the committed checkpoint."""


class RedisReplicator:
    """``await run()`` until ``stop()``: campaign, then replicate while active."""

    def __init__(
        self,
        config: RedisReplicatorConfig,
        sink_factory: Callable[[RedisReplicatorConfig, Client], Sink] | None = None,
        metrics: RedisMetrics | None = None,
    ) -> None:
        config.validate()
        self.config = config
        self.metrics = metrics or RedisMetrics(config.job)
        self._sink_factory = sink_factory or make_sink
        self._stop = asyncio.Event()
        self.client = Client(
            config.endpoints, timeout_s=config.client_timeout_s, **config.client_options
        )
        self.role = ActiveRole(
            self.client, "redis", config.job, config.worker, ttl_s=config.lease_ttl_s
        )
        self.store = CheckpointStore(self.client, config.job)
        self.status = StatusPublisher(self.client, "redis", config.job)
        self.passes = 0
        self.last_error: str | None = None
        self.resolver: ClusterResolver | None = None
        if config.cluster_shard is not None:
            src = config.source
            self.resolver = ClusterResolver(
                (src.host, src.port), parse_shard(config.cluster_shard), src.username, src.password
            )
        # the current pass's parts (None between passes)
        self._pass: _Pass | None = None

    async def run(self) -> None:
        try:
            while not self._stop.is_set():
                fence = await self._campaign()
                if fence is None:
                    return
                try:
                    self.passes += 1
                    self.metrics.pass_started()
                    await self._active_pass(fence)
                except (
                    _Restart,
                    LeaseLost,
                    RedisReplicatorError,
                    SinkError,
                    ClientError,
                    OSError,
                    TimeoutError,
                ) as exc:
                    if self._stop.is_set():  # Ctrl-C or SIGTERM: routine
                        log.info("replication pass %d stopped", self.passes)
                    else:
                        # a restart's reason is its message; an error's, its class too
                        why = (
                            str(exc)
                            if isinstance(exc, _Restart)
                            else f"{type(exc).__name__}: {exc}"
                        )
                        self.last_error = why
                        log.warning("replication pass %d ended: %s", self.passes, why)
                self.metrics.pass_ended()
                if not self.role.active:
                    await asyncio.to_thread(self.role.release)
                if not self._stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.config.retry_delay_s):
                            await self._stop.wait()
        finally:
            await asyncio.to_thread(self.role.release)
            self.client.close()

    def stop(self) -> None:
        self._stop.set()
        if self._pass is not None:
            self._pass.fail(_Restart("stopping"))

    async def _campaign(self) -> Fence | None:
        """Until this worker is the active one (or stop). A campaign that fails (its lease
        expired while it waited, the cluster out of reach) starts over after the retry delay:
        a standby stays one through a fault of the cluster."""
        if self.role.active:
            return self.role.fence
        while not self._stop.is_set():
            log.info("worker %s campaigns for job %s", self.config.worker, self.config.job)
            task = asyncio.create_task(asyncio.to_thread(self.role.acquire))
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not task.done():
                # the campaign blocks in gRPC: it ends when this worker wins or the client closes
                self.client.close()
                with contextlib.suppress(BaseException):
                    await task
                return None
            try:
                fence = task.result()
            except (LeaseLost, ClientError, OSError, TimeoutError) as exc:
                self.last_error = f"campaign: {type(exc).__name__}: {exc}"
                log.warning("worker %s: %s", self.config.worker, self.last_error)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.config.retry_delay_s):
                        await self._stop.wait()
                continue
            log.info("worker %s is active for job %s", self.config.worker, self.config.job)
            return fence
        return None

    async def _active_pass(self, fence: Fence) -> None:
        cfg = self.config
        cp = await asyncio.to_thread(self.store.load)
        source = await asyncio.to_thread(self.current_source)
        table = await asyncio.to_thread(load_command_table, source)
        sink = self._sink_factory(cfg, self.client)
        await sink.start()
        p = _Pass(self, fence, cp, sink, table, source)
        self._pass = p
        try:
            await p.run()
        finally:
            self._pass = None
            await p.close()

    def current_source(self) -> Source:
        """Where this pass connects: ``--source``, or a cluster shard's master now."""
        src = self.config.source
        if self.resolver is None:
            return src
        m = self.resolver.resolve()  # ShardUnavailable ends the pass: resolved again next one
        return Source(m.host, m.port, src.username, src.password)


class _Pass:
    """One active pass: the link, the builder, the watermark; ends at the first failure."""

    def __init__(
        self,
        owner: RedisReplicator,
        fence: Fence,
        cp: Checkpoint | None,
        sink: Sink,
        table: CommandTable,
        source: Source,
    ) -> None:
        cfg = owner.config
        self.owner = owner
        self.source = source
        self.fence = fence
        self.sink = sink
        self.start_cp = cp
        start = cp or Checkpoint(NO_REPLID, 0)
        self.generation = start.generation
        self.replid = start.replid  # the history the link is in now
        self.watermark = Watermark(start)
        self.builder = EventBuilder(
            cfg.topic,
            sink.queue_count(cfg.topic),
            start.replid,
            start.db,
            start.offset,
            table,
            history=start.history,
        )
        self.link = ReplicaLink(
            source.host,
            source.port,
            self.on_event,
            self.confirmed_offset,
            ReplicaConfig(
                password=cfg.source.password,
                username=cfg.source.username,
                capa_eof=cfg.capa_eof,
                capa_psync2=cfg.capa_psync2,
                resume=None if cp is None else (cp.replid, cp.offset),
            ),
            read_timeout_s=cfg.read_timeout_s,
            spool_dir=cfg.spool_dir,
            spool_memory_bytes=cfg.spool_memory_bytes,
        )
        self._failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._commit_now = asyncio.Event()
        self._rdb: RdbParser | None = None
        self._replay: CommandReplay | None = None
        self._rdb_db = 0
        self._snapshot: Boundary | None = None
        self.rdb_bytes = 0
        self.rdb_size: int | None = None
        self.sent = 0
        self.confirmed = 0
        self.full_syncs = 0
        self.continues = 0

    # ---- the ACK clock's view --------------------------------------------------------

    def confirmed_offset(self) -> int:
        """The confirmed offset in the link's current history (0 before anything of it)."""
        safe = self.watermark.safe()
        if safe.replid != self.replid or safe.generation != self.generation:
            return 0
        return safe.offset

    # ---- events ----------------------------------------------------------------------

    async def on_event(self, event: Event) -> None:
        if isinstance(event, StreamCommand):
            await self._emit(self.builder.on_command(event.argv, event.start, event.end))
        elif isinstance(event, RdbChunk):
            await self._rdb_feed(event.data)
        elif isinstance(event, FullSync):
            await self._full_sync(event)
        elif isinstance(event, RdbEnd):
            await self._rdb_end()
        elif isinstance(event, RdbBegin):
            self.rdb_size = event.size
            self.owner.metrics.rdb_begin(event.size)
        elif isinstance(event, Continue):
            self.continues += 1
            self.owner.metrics.partial_resync()
            if event.replid:
                # PSYNC2: the same history under a new id; persist it at once
                self.builder.on_continue(self.builder.boundary, self.builder.db, event.replid)
                self.watermark.rename(event.replid)
                self.replid = event.replid
                self._commit_now.set()
            log.info("partial resync: +CONTINUE (replid %s)", self.replid)
        # GetAck: nothing to do here (the driver answered GETACK)

    async def _full_sync(self, event: FullSync) -> None:
        self.full_syncs += 1
        self.owner.metrics.full_sync()
        log.info("full sync: replid %s offset %d", event.replid, event.offset)
        if self.start_cp is not None or self.full_syncs > 1 or self.replid != NO_REPLID:
            self.generation += 1
        self.replid = event.replid
        self._snapshot = self.watermark.add(
            Checkpoint(event.replid, event.offset, 0, self.generation),
            0,
            sealed=False,
            at=time.monotonic(),  # the lag of a sync in progress is its age
        )
        self._rdb, self._replay, self._rdb_db = RdbParser(), CommandReplay(), 0
        self.rdb_bytes = 0
        # a new id each time: the same replid and offset may come again, in another key order
        snapshot_id = f"{self.generation}.{os.urandom(6).hex()}"
        await self._emit(self.builder.begin_snapshot(event.replid, event.offset, snapshot_id))

    async def _rdb_feed(self, data: bytes) -> None:
        assert self._rdb is not None and self._replay is not None
        self.rdb_bytes += len(data)
        self.owner.metrics.rdb_received(len(data))
        self._rdb.feed(data)
        await self._rdb_drain()

    async def _rdb_drain(self) -> None:
        """Every command the bytes fed so far give, sent in runs of up to
        :data:`SNAPSHOT_RUN` messages (one ``submit_many`` and one confirmation each; the
        sends overlap the parse of the next chunk): what :meth:`_emit` does for a snapshot
        entry, without a Batch a command (every one counts toward the same unsealed snapshot
        boundary)."""
        rdb, replay, snapshot = self._rdb, self._replay, self._snapshot
        assert rdb is not None and replay is not None
        assert snapshot is not None, "RDB data outside a full sync"
        next_event, commands = rdb.next_event, replay.commands
        entry = self.builder.snapshot_messages
        run: list[OutMessage] = []
        while not isinstance(ev := next_event(), NeedData):
            for argv in commands(ev):
                if argv[0] == b"SELECT":
                    self._rdb_db = int(argv[1])
                    continue
                run += entry(self._rdb_db, argv)
            if len(run) >= SNAPSHOT_RUN:
                await self._send_run(run, snapshot)
                run = []
        if run:
            await self._send_run(run, snapshot)

    async def _send_run(self, messages: list[OutMessage], boundary: Boundary) -> None:
        """Snapshot messages in one ``submit_many``, confirmed to ``boundary`` together."""
        if self._failed.done():
            self._failed.result()  # raises why the pass failed
        self.watermark.grow(boundary, len(messages))
        self.owner.role.check()  # a worker that lost its lease sends nothing more
        future = await self.sink.submit_many(messages)
        self.sent += len(messages)
        self.owner.metrics.sent(len(messages))
        confirmed = functools.partial(self._confirmed, boundary=boundary, messages=len(messages))
        future.add_done_callback(confirmed)

    async def _rdb_end(self) -> None:
        assert self._rdb is not None and self._snapshot is not None
        self._rdb.close()
        await self._rdb_drain()
        await self._emit(self.builder.end_snapshot())
        # after the snapshot's last message is submitted: a scrape that sees the full sync
        # done sees every one of its messages counted (it once saw 4 short, on a busy machine)
        self.owner.metrics.rdb_end()
        self.watermark.seal(self._snapshot)
        self._snapshot, self._rdb, self._replay = None, None, None
        self._commit_now.set()

    async def _emit(self, batch: Batch) -> None:
        if self._failed.done():
            self._failed.result()  # raises why the pass failed
        if batch.boundary >= 0 and self._snapshot is None:
            cp = Checkpoint(
                batch.replid, batch.boundary, batch.db, self.generation, self.builder.history
            )
            boundary = self.watermark.add(cp, len(batch.messages), at=time.monotonic())
        else:
            assert self._snapshot is not None, "a batch without a checkpoint outside a snapshot"
            boundary = self._snapshot
            self.watermark.grow(boundary, len(batch.messages))
        if batch.messages:
            await self._send(batch.messages, boundary)

    async def _send(self, messages: Sequence[OutMessage], boundary: Boundary) -> None:
        role, submit = self.owner.role, self.sink.submit
        confirmed = functools.partial(self._confirmed, boundary=boundary)
        metrics = self.owner.metrics
        for msg in messages:
            role.check()  # a worker that lost its lease sends nothing more
            future = await submit(msg)
            # counted as it goes: a big transaction waiting for the sink's capacity shows
            # what it has in flight already (status, metrics)
            self.sent += 1
            metrics.sent(1)
            future.add_done_callback(confirmed)

    def _confirmed(
        self, future: asyncio.Future[int], boundary: Boundary, messages: int = 1
    ) -> None:
        """A ``submit`` future (one message) or a ``submit_many`` one (``messages``)."""
        if future.cancelled():
            self.fail(_Restart("a send was cancelled"))
            return
        error = future.exception()
        if error is not None:
            self.fail(error)
            return
        self.confirmed += messages
        self.owner.metrics.confirmed(messages)
        self.watermark.confirm(boundary, messages)

    def fail(self, error: BaseException) -> None:
        if not self._failed.done():
            self._failed.set_exception(error)

    # ---- the pass --------------------------------------------------------------------

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self.link.run(), name="redis-link"),
            asyncio.create_task(self._committer(), name="redis-checkpoint"),
            asyncio.create_task(self._publisher(), name="redis-status"),
            asyncio.create_task(self._lease_watch(), name="redis-lease"),
        ]
        if self.owner.resolver is not None:
            tasks.append(asyncio.create_task(self._follow(), name="redis-cluster-follow"))
        self._failed.add_done_callback(lambda f: f.exception())  # retrieved: no warning
        try:
            waiter = asyncio.ensure_future(self._failed)
            done, _ = await asyncio.wait({*tasks, waiter}, return_when=asyncio.FIRST_COMPLETED)
            for t in tasks:
                if t in done:
                    exc = t.exception()
                    raise exc if exc is not None else _Restart(f"{t.get_name()} ended")
            self._failed.result()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # what is confirmed by now is safe to keep (if this worker still may)
            with contextlib.suppress(LeaseLost, ClientError):
                await self._commit()

    async def close(self) -> None:
        await self.link.close()
        await self.sink.close()

    async def _follow(self) -> None:
        """A cluster shard: end the pass once another node is the shard's master. The old
        one drops its replicas when it follows the new one, but a partitioned old master can
        keep the link alive (pings) for as long as the partition lasts (cluster.py)."""
        resolver = self.owner.resolver
        assert resolver is not None
        here = (self.source.host, self.source.port)
        while True:
            await asyncio.sleep(self.owner.config.cluster_check_interval_s)
            moved = await asyncio.to_thread(resolver.moved, here)
            if moved is not None:
                raise _Restart(f"the shard's master is now {moved.host}:{moved.port}")

    async def _lease_watch(self) -> None:
        """End the pass once the lease may have run out, whether or not anything is sent
        then: the sink resends on its own, and only the pass's end (which closes the sink,
        dropping what its connections hold) stops it. A worker cut off metaledger and the
        broker used to keep its pass, and its sink's requests, until the heal."""
        await watch_lease(self.owner.role.expires_at)

    async def _committer(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.owner.config.commit_interval_s):
                    await self._commit_now.wait()
            self._commit_now.clear()
            await self._commit()

    async def _commit(self) -> None:
        safe = self.watermark.safe()
        if safe.replid == NO_REPLID or safe == self.owner.store.committed:
            return
        self.owner.role.check()
        await asyncio.to_thread(
            self.owner.store.commit, safe, self.fence.lease_id, self.fence.token
        )

    async def _publisher(self) -> None:
        while True:
            status = self.status()
            self.owner.metrics.observe(status)
            ok = await asyncio.to_thread(self.owner.status.publish, self.fence, status)
            if not ok:
                raise LeaseLost(f"job {self.owner.config.job} has another active worker")
            await asyncio.sleep(self.owner.config.status_interval_s)

    def status(self) -> dict[str, Any]:
        safe = self.watermark.safe()
        committed = self.owner.store.committed
        parsed = self.link.protocol.offset
        oldest = self.watermark.oldest_pending_at()
        return {
            "worker": self.owner.config.worker,
            "source": str(self.source),
            "cluster_shard": self.owner.config.cluster_shard,
            "topic": self.owner.config.topic,
            "replid": self.replid,
            "phase": self.link.protocol.phase.value,
            "parsed_offset": parsed,
            "confirmed_offset": safe.offset if safe.replid == self.replid else 0,
            "acked_offset": self.link.acked,
            "checkpoint_offset": committed.offset if committed else None,
            "lag_bytes": max(parsed - safe.offset, 0) if safe.replid == self.replid else parsed,
            "lag_s": round(time.monotonic() - oldest, 3) if oldest is not None else 0.0,
            "rdb_bytes": self.rdb_bytes,
            "rdb_size": self.rdb_size,
            "sent": self.sent,
            "confirmed": self.confirmed,
            "in_flight": self.sent - self.confirmed,
            "spooled_bytes": self.link.spooled_bytes,
            "full_syncs": self.full_syncs,
            "passes": self.owner.passes,
            "last_error": self.owner.last_error,
        }
