"""One worker of a RocketMQ replication job (``metaledger replicate rocketmq``).

Several workers may run one ``--job``. Each joins the job (a lease and a key under
``/replicators/rocketmq/<job>/workers/``, :mod:`replicator.rocketmq.assign`), and every
``refresh_s`` it lists the source queues of the replicated topics and the live workers and
takes the queues rendezvous hashing gives it: it claims each (a key on its lease whose create
revision is the queue's fencing token), loads the queue's committed record and starts a
:class:`~replicator.rocketmq.source.QueueReplication`. A queue that hashing moves elsewhere
(a worker joined) is stopped, drained (its in-flight messages confirmed, a few seconds at
most), committed and released; a worker that dies loses its lease and with it its claims,
and the survivors take its queues from the committed offsets. A worker paused past its lease
wakes unable to send (``Membership.check`` before every send) and unable to commit (the
server refuses the fence). Its claims go with its lease, so a pass ends at the lease's
deadline whatever blocks it (a pull or a send in flight, idle; ``watch_lease``): the queues
are cancelled and the sink closed, aborting its connections, so nothing it holds reaches the
destination in another worker's claim.

Every ``commit_interval_s`` each queue's watermark and offset-syncs are committed to
metaledger's ``Offsets`` (job = ``--job``, partition ``<topic>/<broker>/<queue id>``,
position = the next source offset), and the worker's status is published under
``/replicators/rocketmq/<job>/w/<worker>/status`` for ``metaledger replicate status``.

A *pass* is one sink (the codec producer to the destination) and the queues running on it.
A pass ends when the sink failed a message that is not dismissed (the queues restart from
their committed offsets after a backoff), when a destination topic's queue count changed,
or at shutdown (drained, committed, released). The job-wide connectors (heartbeats, topic
config, group offset checkpoints; :mod:`replicator.rocketmq.connectors`) run in the worker
whose name sorts first among the live ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nameserver.client import Client, ClientError, NotFound, remoting_tls
from replicator.lease import Fence, watch_lease
from replicator.rocketmq.assign import Membership, assignment
from replicator.rocketmq.checkpoint import QueueCheckpoint
from replicator.rocketmq.client import ClusterClient, ReadQueue, read_queues
from replicator.rocketmq.config import HEARTBEAT_TOPIC, RocketMQReplicatorConfig
from replicator.rocketmq.connectors import JobConnectors
from replicator.rocketmq.errors import ConfigError, RocketMQError, TopicNotFound
from replicator.rocketmq.metrics import RocketMQMetrics
from replicator.rocketmq.source import QueueReplication, RateLimiter
from replicator.sinks.errors import SinkError
from replicator.sinks.rocketmq import RocketMQSink, RocketMQSinkConfig
from replicator.status import PREFIX, StatusPublisher

__all__ = ["RocketMQReplicator", "status_key"]

log = logging.getLogger(__name__)

DRAIN_S = 5.0


def status_key(job: str, worker: str) -> str:
    return f"{PREFIX}rocketmq/{job}/w/{worker}/status"


@dataclass(frozen=True)
class SourceQueue:
    queue: ReadQueue
    index: int
    dest_topic: str
    heartbeat: bool
    mapping: str  # "same" or "hash" (config.dest_queue)
    #: the source topic's write queue total: what config sync grows the destination to
    source_writes: int = 0


class RocketMQReplicator:
    def __init__(
        self, config: RocketMQReplicatorConfig, metrics: RocketMQMetrics | None = None
    ) -> None:
        config.validate()
        self.config = config
        self.metrics = metrics
        tls = remoting_tls(config.client_options)
        self.source = ClusterClient(
            config.source_namesrv, namesrv_tls=tls if config.source_namesrv_tls else None
        )
        self.dest = ClusterClient(
            config.dest_namesrv,
            credentials=config.session_credentials(),
            namesrv_tls=tls if config.dest_namesrv_tls else None,
        )
        self.client = Client(config.endpoints, timeout_s=10, **config.client_options)
        self.membership = Membership(self.client, config.job, config.worker, config.lease_ttl_s)
        self.limiter = RateLimiter(config.rate_limit)
        self.tasks: dict[str, QueueReplication] = {}
        self.connectors = JobConnectors(config, self.client, self.source, self.dest)
        self._stop = asyncio.Event()
        self._failure: str | None = None
        self._wake = asyncio.Event()
        self._publisher = StatusPublisher(self.client, "rocketmq", config.job)
        self._publisher.key = status_key(config.job, config.worker)
        self.passes = 0
        self._in_pass = False  # a pass's loop publishes the status; else the duties do

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    # --- the worker ------------------------------------------------------------------

    async def run(self) -> None:
        await asyncio.to_thread(self.membership.join)
        duties = asyncio.create_task(self._duties(), name="job connectors")
        backoff = 1.0
        try:
            await self._resolve_cluster_names()
            while not self._stop.is_set():
                self._failure = None
                try:
                    if not self.membership.alive:
                        # lost the lease (paused, partitioned): join again as a new member
                        log.warning(
                            "rejoining job %s: %s",
                            self.config.job,
                            self.membership.lost_reason or "lease expired",
                        )
                        await asyncio.to_thread(self.membership.leave)
                        await asyncio.to_thread(self.membership.join)
                    await self._pass()
                except (SinkError, RocketMQError, ClientError, OSError) as exc:
                    self._failure = f"{type(exc).__name__}: {exc}"
                if self._stop.is_set():
                    break
                if self._failure is None:
                    backoff = 1.0
                    continue
                log.warning("pass ended: %s; restarting in %.0f s", self._failure, backoff)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(backoff):
                        await self._stop.wait()
                backoff = min(backoff * 2, 10.0)
        finally:
            duties.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await duties
            await self.connectors.close()
            await self.source.close()
            await self.dest.close()
            await asyncio.to_thread(self.membership.leave)
            self.client.close()

    async def _resolve_cluster_names(self) -> None:
        """Loop prevention needs both names: from the config, else from the nameservers.
        Two clusters of one name (two fresh deployments are both ``DefaultCluster``) are told
        apart by their nameservers (``config.trail_names``), unless they share a broker: then
        they are one cluster, a ConfigError naming the flags."""
        config = self.config
        while True:
            try:
                if not config.source_cluster:
                    config.source_cluster = await self.source.cluster_name()
                if not config.dest_cluster:
                    config.dest_cluster = await self.dest.cluster_name()
                if config.source_cluster == config.dest_cluster:
                    await self._check_two_clusters()
                return
            except ConfigError:
                raise
            except (RocketMQError, OSError) as exc:
                log.warning("cluster names not known yet (%s); retrying", exc)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(2.0):
                        await self._stop.wait()
                if self._stop.is_set():
                    return

    async def _check_two_clusters(self) -> None:
        config = self.config
        source = {a for g in await self.source.brokers() for a in g.addrs.values()}
        shared = source & {a for g in await self.dest.brokers() for a in g.addrs.values()}
        if shared:
            raise ConfigError(
                f"--source-namesrv {config.source_namesrv} and --dest-namesrv"
                f" {config.dest_namesrv} serve the same RocketMQ cluster"
                f" {config.source_cluster!r} (brokers {', '.join(sorted(shared))}):"
                " replicate between two clusters"
            )
        log.info(
            "both clusters are named %s: loop prevention calls them %s and %s",
            config.source_cluster,
            *config.trail_names,
        )

    async def _pass(self) -> None:
        config = self.config
        queues = await self._discover()
        dest_topics = sorted({q.dest_topic for q in queues.values()})
        await self.connectors.ensure_dest_topics(
            {q.queue.topic: q.dest_topic for q in queues.values()}
        )
        sink = RocketMQSink(
            RocketMQSinkConfig(
                topics=tuple(dest_topics) or (HEARTBEAT_TOPIC,),
                producer_group=f"replicator-{config.job}",
                max_in_flight=config.max_in_flight,
            ),
            self.dest,
        )
        self.passes += 1
        await sink.start()
        self._in_pass = True
        try:
            await self._within_lease(sink, self._run_pass(sink, queues))
        finally:
            self._in_pass = False
            await self._stop_all(drain=self._failure is None)
            await sink.close()

    async def _within_lease(self, sink: RocketMQSink, body: Awaitable[None]) -> None:
        """Run a pass's ``body`` until it ends or the worker's lease may have run out. Then
        the queues stop at once and the sink closes, aborting its connections: a cut off
        worker's pass used to end only when a queue next tried to send, a pull failed or a
        commit was refused, and its sink resent on its own meanwhile."""
        run = asyncio.ensure_future(body)
        watch = asyncio.ensure_future(watch_lease(self.membership.expires_at))
        try:
            await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not run.done():
                self._failed(f"{watch.exception()}")
                log.warning("pass ended at the lease's deadline: %s", self._failure)
                for rep in self.tasks.values():
                    if rep.task is not None:
                        rep.task.cancel()
                await sink.close()
        finally:
            run.cancel()
            watch.cancel()
            await asyncio.wait({run, watch})
        if not run.cancelled():
            run.result()

    async def _run_pass(self, sink: RocketMQSink, queues: dict[str, SourceQueue]) -> None:
        config = self.config
        await self._rebalance(sink, queues)
        next_refresh = time.monotonic() + config.refresh_s
        while not self._stop.is_set() and self._failure is None:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(config.commit_interval_s):
                    await self._wake.wait()
            await self._commit_all()
            await self._publish()
            if time.monotonic() >= next_refresh and self._failure is None:
                known = queues.keys()
                queues = await self._discover()
                grown = {queues[p].queue.topic for p in queues.keys() - known}
                if grown and config.sync_config:
                    # new source queues: grow the destination topic first (config
                    # sync), so they start in a pass that has its new queue count
                    try:
                        await self.connectors.sync_config(grown)
                    except (RocketMQError, OSError) as exc:
                        log.warning("config sync of %s: %s", sorted(grown), exc)
                for q in queues.values():
                    if q.dest_topic not in sink.topics:
                        await self.connectors.ensure_dest_topics({q.queue.topic: q.dest_topic})
                        await sink.add_topic(q.dest_topic)
                if await self._dest_changed(sink):
                    log.info("a destination topic's queues changed: new pass")
                    break
                await self._rebalance(sink, queues)
                next_refresh = time.monotonic() + config.refresh_s

    async def _discover(self) -> dict[str, SourceQueue]:
        """The source queues this job replicates, by partition."""
        config = self.config
        if config.topics:
            topics = list(config.topics)
        else:
            topics = [t for t in await self.source.topics() if config.wants(t)]
        if config.heartbeats:
            topics.append(HEARTBEAT_TOPIC)
        out: dict[str, SourceQueue] = {}
        for topic in topics:
            try:
                route = await self.source.route(topic)
            except TopicNotFound:
                if topic != HEARTBEAT_TOPIC:
                    log.warning("source topic %s does not exist (yet)", topic)
                continue
            dest_topic = config.dest_topic(topic)
            # an orderly topic maps queue i to queue i whatever --queue-map says
            orderly = bool(route.order_topic_conf) or any(q.order for q in route.queues)
            mapping = "same" if orderly else config.queue_map
            writes = sum(d.write_queue_nums for d in route.queues)
            for i, q in enumerate(read_queues(route)):
                out[q.partition] = SourceQueue(
                    q, i, dest_topic, topic == HEARTBEAT_TOPIC, mapping, writes
                )
        return out

    async def _dest_changed(self, sink: RocketMQSink) -> bool:
        for topic in sink.topics:
            try:
                n = len(await self.dest.write_queues(topic))
            except (RocketMQError, OSError):
                continue
            if n and n != sink.queue_count(topic):
                return True
        return False

    # --- queues: take, run, give back ------------------------------------------------

    async def _rebalance(self, sink: RocketMQSink, queues: dict[str, SourceQueue]) -> None:
        workers = await asyncio.to_thread(self.membership.workers)
        mine = set(assignment(workers, sorted(queues), self.config.worker))
        for partition in [p for p in self.tasks if p not in mine]:
            await self._stop_queue(partition, drain=True, release=True)
        for partition in sorted(mine - self.tasks.keys()):
            sq = queues[partition]
            n = sink.queue_count(sq.dest_topic)
            if (
                self.config.sync_config
                and self.config.queue_map == "same"
                and n <= sq.index
                and n < sq.source_writes
            ):
                # config sync is growing the destination topic like the source: queue i
                # waits for destination queue i (a new pass) rather than going to i mod n
                # now (a source with fewer write than read queues, shrinking, maps i mod n)
                log.info("%s: waiting for the destination topic to grow", partition)
                continue
            fence = await asyncio.to_thread(self.membership.claim, partition)
            if fence is None:
                continue  # its previous owner has not let go yet: next refresh
            try:
                ckpt = await self._load(sq)
            except (ClientError, RocketMQError, OSError) as exc:
                log.warning("%s: could not load its offset (%s); next refresh", partition, exc)
                await asyncio.to_thread(self.membership.release, partition)
                continue
            n = sink.queue_count(sq.dest_topic)
            feeds = [sq.index % n] if sq.mapping == "same" else list(range(n))
            if not set(feeds) <= set(ckpt.feeds):
                # translation must know every queue this one sends to before the first send
                ckpt.feed(feeds)
                if not await self._commit_record(partition, fence, ckpt):
                    await asyncio.to_thread(self.membership.release, partition)
                    continue
            rep = QueueReplication(
                sq.queue, sq.index, sq.dest_topic, fence, ckpt, sq.heartbeat, sq.mapping
            )
            rep.task = asyncio.create_task(
                rep.run(
                    self.config,
                    self.source,
                    sink,
                    self.limiter,
                    self.membership.check,
                    self._failed,
                ),
                name=f"replicate {partition}",
            )
            rep.task.add_done_callback(self._task_done(partition))
            self.tasks[partition] = rep
            log.info("%s: replicating from offset %d", partition, ckpt.next_offset)

    async def _load(self, sq: SourceQueue) -> QueueCheckpoint:
        try:
            committed = await asyncio.to_thread(
                self.client.offsets_fetch, self.config.job, sq.queue.partition
            )
        except NotFound:
            start = await self.source.min_offset(sq.queue)
            return QueueCheckpoint(next_offset=start, dest_topic=sq.dest_topic)
        ckpt = QueueCheckpoint.decode(committed.offset)
        if ckpt.dest_topic != sq.dest_topic:
            # renamed: the syncs were offsets of another topic
            ckpt = QueueCheckpoint(ckpt.next_offset, ckpt.dismissed, sq.dest_topic)
        return ckpt

    def _task_done(self, partition: str) -> Callable[[asyncio.Task[None]], None]:
        def done(task: asyncio.Task[None]) -> None:
            if task.cancelled():
                return
            exc = task.exception()
            if exc is not None:
                self._failed(f"{partition}: {type(exc).__name__}: {exc}")

        return done

    def _failed(self, reason: str) -> None:
        if self._failure is None:
            self._failure = reason
        self._wake.set()

    async def _stop_queue(self, partition: str, drain: bool, release: bool) -> None:
        rep = self.tasks.pop(partition)
        if rep.task is not None:
            rep.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await rep.task
        if drain:
            deadline = time.monotonic() + DRAIN_S
            while rep.watermark.in_flight and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        if not self.membership.alive:
            # its claims went with the lease: a commit would be refused (or wait out the
            # client's timeout on an unreachable metaledger), and there is nothing to release
            return
        await self._commit(rep)
        if release:
            await asyncio.to_thread(self.membership.release, partition)

    async def _stop_all(self, drain: bool) -> None:
        for partition in list(self.tasks):
            await self._stop_queue(partition, drain=drain, release=True)

    # --- commits and status ----------------------------------------------------------

    async def _commit_all(self) -> None:
        for rep in list(self.tasks.values()):
            await self._commit(rep)

    async def _commit(self, rep: QueueReplication) -> None:
        ckpt = rep.next_checkpoint()
        if ckpt is None:
            return
        if await self._commit_record(rep.partition, rep.fence, ckpt):
            rep.committed(ckpt)
        else:
            self._failed(f"{rep.partition}: commit refused")

    async def _commit_record(self, partition: str, fence: Fence, ckpt: QueueCheckpoint) -> bool:
        """One fenced commit; False (logged) when the server refused it: this worker no
        longer holds the queue (its lease expired, or another worker claimed it since)."""
        try:
            await asyncio.to_thread(
                self.client.offsets_commit,
                self.config.job,
                partition,
                ckpt.encode(),
                lease_id=fence.lease_id,
                fencing_token=fence.token,
                position=ckpt.next_offset,
            )
        except ClientError as exc:
            log.warning("%s: commit refused (%s): this worker no longer owns it", partition, exc)
            return False
        return True

    def status(self) -> dict[str, object]:
        now_ms = int(time.time() * 1000)
        queues = [rep.status(now_ms) for _, rep in sorted(self.tasks.items())]
        return {
            "worker": self.config.worker,
            "source": self.config.source_namesrv,
            "dest": self.config.dest_namesrv,
            "source_cluster": self.config.source_cluster,
            "dest_cluster": self.config.dest_cluster,
            "passes": self.passes,
            "last_failure": self._failure or "",
            "queues": queues,
            "heartbeat": self.connectors.heartbeat_status(),
            "leader": self.connectors.leading,
        }

    async def _publish(self) -> None:
        doc = self.status()
        if self.metrics is not None:
            self.metrics.observe(doc)
        try:
            await asyncio.to_thread(self._publisher.publish, self.membership.fence, doc)
        except ClientError as exc:
            log.debug("status not published: %s", exc)

    # --- job-wide duties -------------------------------------------------------------

    async def _duties(self) -> None:
        while not self._stop.is_set():
            try:
                workers = await asyncio.to_thread(self.membership.workers)
                leading = bool(workers) and workers[0] == self.config.worker
                await self.connectors.tick(leading)
                if not self._in_pass:
                    # no pass publishes (the destination down at start, a backoff): the
                    # status and metrics still show the link and the failure
                    await self._publish()
            except (ClientError, RocketMQError, SinkError, OSError) as exc:
                log.warning("job connectors: %s", exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._stop.wait()
