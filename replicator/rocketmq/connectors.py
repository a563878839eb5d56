"""The job-wide connectors of RIP-45 beside the source connector: heartbeats, topic config
and consumer-group offset checkpoints. They run in one worker of the job (the one whose name
sorts first among the live workers: :meth:`JobConnectors.tick` is told whether it leads);
all three are idempotent, so a moment with two leaders during a membership change costs a
duplicate heartbeat or write, nothing more.

**Heartbeats** (docs/rocketmq-replicator.md, "Heartbeats"; RIP-45's
RocketMQHeartbeatConnector). Every
``heartbeat_interval_s`` a small JSON message (job, emitting worker, sequence, time) goes
into ``rmq_sys_replicator_heartbeat`` of the *source* cluster; the source connector
replicates that topic like a user topic (its counts kept apart); the leader reads the
destination's heartbeat topic and, for each heartbeat of its own job, records the round trip
(arrival minus emission, one process's clock). The link is *down* when no heartbeat of this job
has arrived for ``heartbeat_down_after`` intervals (counted from when this worker began to
lead while none has: a destination down from the start is a link down).

**Topic config** (item 5; RIP-45's RocketMQConfigConnector). Each replicated topic exists at
the destination with the source's queue numbers and permission: created when missing
(:meth:`ensure_dest_topics`, also called by every pass before its sink starts) and updated
every ``config_interval_s`` when they differ, and at once when the worker finds new source
queues (they wait for the destination to grow: queue i goes to queue i). The permission is
the source's, always readable and writable at the destination (the replicator writes there;
a source turned read-only still has a backlog). A topic spread over several source broker
groups is created with the same totals spread over the destination's masters. The
heartbeat topic gets one queue.

**Group offsets** (item 4; :mod:`replicator.rocketmq.groups`). Every
``checkpoint_interval_s`` each group in ``groups`` is translated through the committed
offset-syncs and the result kept in metaledger (``/replicators/rocketmq/<job>/groups/<g>``);
with ``sync_group_offsets`` the translated offsets are written to the destination brokers
(only forward: a group already further at the destination is left alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from nameserver.client import Client, ClientError
from replicator.rocketmq.checkpoint import CheckpointError
from replicator.rocketmq.client import ClusterClient, ReadQueue
from replicator.rocketmq.config import HEARTBEAT_TOPIC, RocketMQReplicatorConfig
from replicator.rocketmq.errors import RocketMQError, TopicNotFound
from replicator.rocketmq.groups import group_key, sync_group, translate_group
from replicator.rocketmq.wire import PullStatus, TopicSpec
from replicator.sinks.base import OutMessage
from replicator.sinks.errors import SinkError
from replicator.sinks.rocketmq import RocketMQSink, RocketMQSinkConfig
from rmq.codes import PERM_READ, PERM_WRITE

__all__ = ["JobConnectors"]

log = logging.getLogger(__name__)


@dataclass
class HeartbeatState:
    sent: int = 0
    received: int = 0
    first_sent_ms: int = 0
    last_sent_ms: int = 0
    last_seen_ms: int = 0
    rtt_ms: float | None = None
    link_down: bool = False
    #: when this worker began to lead: with nothing received, the link is judged from
    #: then (a destination down from the start is a link down, not an unknown)
    leading_since_ms: int = 0


class JobConnectors:
    def __init__(
        self,
        config: RocketMQReplicatorConfig,
        client: Client,
        source: ClusterClient,
        dest: ClusterClient,
    ) -> None:
        self.config = config
        self.client = client
        self.source = source
        self.dest = dest
        self.leading = False
        self.hb = HeartbeatState()
        self._seq = 0
        self._hb_sink: RocketMQSink | None = None
        self._hb_reader: asyncio.Task[None] | None = None
        self._due: dict[str, float] = {}
        #: destination topics given the replica.of attribute by this worker (dest_read_only)
        self._marked: set[str] = set()

    # --- the leader's clock ----------------------------------------------------------

    async def tick(self, leading: bool) -> None:
        """One round of the duties that are due. Each duty's failure (a cluster or
        metaledger not answering) is logged and leaves the others to run; the link state is
        judged every tick, whatever failed."""
        if leading != self.leading:
            log.info("job connectors %s", "started (this worker leads)" if leading else "stopped")
            self.leading = leading
            self.hb = HeartbeatState(leading_since_ms=int(time.time() * 1000))
            if not leading:
                await self._stop_heartbeats()
        if not leading:
            return
        config = self.config
        duties: list[tuple[str, Callable[[], Awaitable[object]]]] = []
        if config.heartbeats and self._due_now("heartbeat", config.heartbeat_interval_s):
            duties.append(("heartbeat", self._heartbeat))
        if config.sync_config and self._due_now("config", config.config_interval_s):
            duties.append(("config sync", self.sync_config))
        if (
            config.groups
            and config.checkpoint_interval_s
            and self._due_now("groups", config.checkpoint_interval_s)
        ):
            duties.append(("group offsets", self.sync_groups))
        try:
            for name, duty in duties:
                try:
                    await duty()
                except (RocketMQError, SinkError, ClientError, CheckpointError, OSError) as exc:
                    log.warning("job connectors: %s: %s", name, exc)
        finally:
            self._update_link()

    def _due_now(self, what: str, every_s: float) -> bool:
        now = time.monotonic()
        if now < self._due.get(what, 0.0):
            return False
        self._due[what] = now + every_s
        return True

    # --- heartbeats --------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        if self._hb_sink is None:
            await self._ensure_topic(self.source, TopicSpec(HEARTBEAT_TOPIC, 1, 1, 6))
            await self._ensure_topic(self.dest, TopicSpec(HEARTBEAT_TOPIC, 1, 1, 6))
            sink = RocketMQSink(
                RocketMQSinkConfig(
                    topics=(HEARTBEAT_TOPIC,), producer_group=f"replicator-hb-{self.config.job}"
                ),
                self.source,
            )
            await sink.start()
            self._hb_sink = sink
            self._hb_reader = asyncio.create_task(self._read_heartbeats(), name="heartbeats")
        now_ms = int(time.time() * 1000)
        self._seq += 1
        body = json.dumps(
            {
                "job": self.config.job,
                "worker": self.config.worker,
                "seq": self._seq,
                "emitted_ms": now_ms,
                "source": self.config.source_cluster,
                "dest": self.config.dest_cluster,
            },
            separators=(",", ":"),
        ).encode()
        msg = OutMessage(HEARTBEAT_TOPIC, 0, body, "HEARTBEAT", self.config.job, {}, self._seq)
        try:
            await self._hb_sink.submit(msg)
        except SinkError as exc:
            log.warning("heartbeat not sent to the source cluster: %s", exc)
            return
        self.hb.sent += 1
        self.hb.last_sent_ms = now_ms
        if not self.hb.first_sent_ms:
            self.hb.first_sent_ms = now_ms

    async def _read_heartbeats(self) -> None:
        """Follow the destination's heartbeat queues from their end at start."""
        offsets: dict[str, int] = {}
        while True:
            try:
                queues = await self.dest.read_queues(HEARTBEAT_TOPIC)
                for q in queues:
                    if q.partition not in offsets:
                        offsets[q.partition] = await self.dest.max_offset(q)
                await asyncio.gather(*(self._read_one(q, offsets) for q in queues))
            except (RocketMQError, OSError) as exc:
                log.debug("heartbeat reader: %s", exc)
                await asyncio.sleep(1.0)

    async def _read_one(self, q: ReadQueue, offsets: dict[str, int]) -> None:
        result = await self.dest.pull(q, offsets[q.partition], 32, suspend_ms=2_000)
        if result.status is PullStatus.OFFSET_ILLEGAL:
            offsets[q.partition] = result.next_offset
            return
        offsets[q.partition] = max(offsets[q.partition], result.next_offset)
        now_ms = int(time.time() * 1000)
        for m in result.messages:
            try:
                doc = json.loads(m.body)
            except ValueError:
                continue
            if not isinstance(doc, dict) or doc.get("job") != self.config.job:
                continue
            emitted = doc.get("emitted_ms")
            if isinstance(emitted, int) and emitted >= self.hb.first_sent_ms:
                self.hb.received += 1
                self.hb.last_seen_ms = now_ms
                self.hb.rtt_ms = float(now_ms - emitted)

    def _update_link(self) -> None:
        hb = self.hb
        if not self.config.heartbeats or not self.leading:
            hb.link_down = False
            return
        window_ms = self.config.heartbeat_down_after * self.config.heartbeat_interval_s * 1000
        now_ms = int(time.time() * 1000)
        since = hb.last_seen_ms or hb.leading_since_ms or hb.first_sent_ms or now_ms
        down = now_ms - since > window_ms
        if down and not hb.link_down:
            log.error(
                "replication link %s -> %s is DOWN: no heartbeat for %.0f s",
                self.config.source_cluster,
                self.config.dest_cluster,
                (now_ms - since) / 1000,
            )
        elif hb.link_down and not down:
            log.info(
                "replication link %s -> %s is up again",
                self.config.source_cluster,
                self.config.dest_cluster,
            )
        hb.link_down = down

    def heartbeat_status(self) -> dict[str, Any]:
        hb = self.hb
        now_ms = int(time.time() * 1000)
        return {
            "enabled": self.config.heartbeats and self.leading,
            "sent": hb.sent,
            "received": hb.received,
            "rtt_ms": hb.rtt_ms,
            "last_seen_s": round((now_ms - hb.last_seen_ms) / 1000, 1) if hb.last_seen_ms else None,
            "link_down": hb.link_down,
        }

    async def _stop_heartbeats(self) -> None:
        if self._hb_reader is not None:
            self._hb_reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._hb_reader
            self._hb_reader = None
        if self._hb_sink is not None:
            await self._hb_sink.close()
            self._hb_sink = None

    async def close(self) -> None:
        await self._stop_heartbeats()

    # --- topic config ----------------------------------------------------------------

    async def source_spec(self, topic: str, dest_topic: str) -> TopicSpec:
        route = await self.source.route(topic)
        readable = [q for q in route.queues]
        if not readable:
            raise TopicNotFound(f"source topic {topic} has no queue data")
        # the source's bits (inherit, priority), but readable and writable whatever the
        # source says: the replicator itself writes there, and a source turned read-only
        # (its producers moved away) still has a backlog to bring over; "read-only for
        # producers" is the broker's replica.of attribute, which lets replicated messages in
        perm = readable[0].perm | PERM_READ | PERM_WRITE
        read_only = f"+replica.of={self.config.source_cluster}"
        return TopicSpec(
            dest_topic,
            sum(q.read_queue_nums for q in readable),
            sum(q.write_queue_nums for q in readable),
            perm,
            readable[0].topic_sys_flag,
            bool(route.order_topic_conf) or any(q.order for q in readable),
            read_only if self.config.dest_read_only else "",
        )

    async def ensure_dest_topics(self, topics: dict[str, str]) -> None:
        """Create each missing destination topic (source name → destination name) like its
        source, when config sync is on; a missing one otherwise is the sink's error."""
        if not self.config.sync_config:
            return
        for topic, dest_topic in sorted(topics.items()):
            if topic == HEARTBEAT_TOPIC:
                await self._ensure_topic(self.dest, TopicSpec(HEARTBEAT_TOPIC, 1, 1, 6))
                continue
            try:
                await self.dest.route(dest_topic)
                continue
            except TopicNotFound:
                pass
            spec = await self.source_spec(topic, dest_topic)
            log.info(
                "creating destination topic %s like source topic %s: %s", dest_topic, topic, spec
            )
            await self._create_on_dest(spec)

    async def _create_on_dest(self, spec: TopicSpec) -> None:
        """Create or update ``spec`` at the destination: its queue numbers spread over the
        destination cluster's masters (the first ones get one more when they do not divide),
        each master told its share, as ``mqadmin updateTopic -b`` per broker would."""
        name = self.config.dest_cluster
        masters = sorted(
            (g.broker_name, g.addrs[0])
            for g in await self.dest.brokers()
            if (not name or g.cluster == name) and 0 in g.addrs
        )
        if not masters:
            raise RocketMQError(f"no broker master in destination cluster {name or '?'}")
        n = len(masters)
        conf = []
        for i, (broker, addr) in enumerate(masters):
            read = spec.read_queue_nums // n + (1 if i < spec.read_queue_nums % n else 0)
            write = spec.write_queue_nums // n + (1 if i < spec.write_queue_nums % n else 0)
            if read or write:
                share = dataclasses.replace(
                    spec, read_queue_nums=max(read, 1), write_queue_nums=max(write, 1)
                )
                await self.dest.create_topic(share, brokers=[addr])
                conf.append(f"{broker}:{share.write_queue_nums}")
        if spec.order:
            await self.dest.set_order_conf(spec.topic, ";".join(conf))

    async def _ensure_topic(self, cluster: ClusterClient, spec: TopicSpec) -> None:
        name = self.config.source_cluster if cluster is self.source else self.config.dest_cluster
        try:
            await cluster.route(spec.topic)
        except TopicNotFound:
            await cluster.create_topic(spec, cluster=name or None)

    async def sync_config(self, only: Iterable[str] | None = None) -> list[str]:
        """Update destination topics whose queue numbers, permission or order differ from
        their source's (``only``: these source topics); returns what changed (one line
        each). The worker also calls it when it finds new source queues, so that they
        start with the destination already grown rather than mapped onto the old count."""
        changes: list[str] = []
        if only is not None:
            topics = sorted(set(only) - {HEARTBEAT_TOPIC})
        elif self.config.topics:
            topics = list(self.config.topics)
        else:
            topics = [t for t in await self.source.topics() if self.config.wants(t)]
        for topic in topics:
            dest_topic = self.config.dest_topic(topic)
            try:
                want = await self.source_spec(topic, dest_topic)
            except TopicNotFound:
                continue
            try:
                route = await self.dest.route(dest_topic)
            except TopicNotFound:
                await self._create_on_dest(want)
                changes.append(f"created {dest_topic}")
                continue
            have = TopicSpec(
                dest_topic,
                sum(q.read_queue_nums for q in route.queues),
                sum(q.write_queue_nums for q in route.queues),
                route.queues[0].perm if route.queues else 0,
                route.queues[0].topic_sys_flag if route.queues else 0,
                any(q.order for q in route.queues),
            )
            marked = dest_topic in self._marked or not want.attributes
            if not marked or (have.read_queue_nums, have.write_queue_nums, have.perm) != (
                want.read_queue_nums,
                want.write_queue_nums,
                want.perm,
            ):
                log.info("updating destination topic %s: %s -> %s", dest_topic, have, want)
                self._marked.add(dest_topic)
                await self._create_on_dest(want)
                changes.append(f"updated {dest_topic}")
        return changes

    # --- group offsets -----------------------------------------------------------------

    async def sync_groups(self) -> None:
        """Translate each group, keep the result in metaledger and, with
        ``sync_group_offsets``, move the group forward at the destination. One group's
        failure is logged and does not hold up the others."""
        for group in self.config.groups:
            try:
                translated = await translate_group(
                    self.client, self.config.job, self.source, self.dest, group
                )
                doc = json.dumps([t.as_dict() for t in translated], sort_keys=True)
                await asyncio.to_thread(self.client.put, group_key(self.config.job, group), doc)
                if self.config.sync_group_offsets:
                    moved = await sync_group(self.dest, group, translated)
                    if moved:
                        log.info("group %s: moved forward on %d destination queues", group, moved)
            except (RocketMQError, ClientError, CheckpointError, OSError) as exc:
                log.warning("group %s: offsets not translated: %s", group, exc)
