"""Consumer-group offsets carried across: a group that consumed the source moves to the
destination and resumes with no gap (docs/rocketmq-replicator.md,
"Consumer-group failover: offset translation").

The group's committed offset on each source queue (QUERY_CONSUMER_OFFSET at the source
brokers) is translated through the offset-syncs the job committed with its source offsets
(:func:`replicator.rocketmq.checkpoint.translate`: the newest sync below the group's offset,
the destination offset after it; several source queues feeding one destination queue take
the smallest). A destination queue no sync says anything about resumes at its earliest
offset (never a gap; duplicates instead). A topic the group has no source offset for on any
queue (QUERY_NOT_FOUND everywhere: it does not consume it) and the heartbeat topic are left
out; a broker answers 0 rather than QUERY_NOT_FOUND on a queue that still starts at 0
(RocketMQ 4.9's ``ConsumerManageProcessor.java:118-152``), which translates to the destination's
earliest: safe. Timestamps play no part: a destination queue's store times are the replication's,
not the producer's, so a timestamp search there skips or repeats by however much replication lagged.

Used by the checkpoint connector (every ``checkpoint_interval_s``) and by ``metaledger
replicate translate --group G [--write]``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from nameserver.client import Client
from replicator.rocketmq.checkpoint import load_checkpoints, translate
from replicator.rocketmq.client import ClusterClient, ReadQueue
from replicator.rocketmq.config import HEARTBEAT_TOPIC
from replicator.rocketmq.errors import RocketMQError, TopicNotFound

__all__ = ["Translated", "group_key", "sync_group", "translate_group"]


def group_key(job: str, group: str) -> str:
    return f"/replicators/rocketmq/{job}/groups/{group}"


@dataclass(frozen=True, slots=True)
class Translated:
    """Where ``group`` resumes on one destination queue."""

    group: str
    topic: str  # destination topic
    queue_index: int  # destination write-queue index
    broker_name: str
    queue_id: int
    offset: int
    #: how it was found: "sync" (an offset-sync) or "earliest" (no sync: the queue's start)
    basis: str

    def as_dict(self) -> dict[str, object]:
        return {
            "group": self.group,
            "topic": self.topic,
            "queue_index": self.queue_index,
            "broker_name": self.broker_name,
            "queue_id": self.queue_id,
            "offset": self.offset,
            "basis": self.basis,
        }


def split_partition(partition: str) -> tuple[str, str, int]:
    """``topic/broker/queue`` → its parts (a topic name holds no '/')."""
    topic, broker, queue = partition.rsplit("/", 2)
    return topic, broker, int(queue)


async def translate_group(
    client: Client, job: str, source: ClusterClient, dest: ClusterClient, group: str
) -> list[Translated]:
    """Translate ``group``'s source offsets for every queue ``job`` has committed."""
    checkpoints = await asyncio.to_thread(load_checkpoints, client, job)
    by_dest: dict[str, dict[str, int]] = {}
    masters: dict[tuple[str, str], str | None] = {}
    consumed: set[str] = set()  # destination topics the group has a source offset for
    for partition, ckpt in sorted(checkpoints.items()):
        topic, broker, queue_id = split_partition(partition)
        if topic == HEARTBEAT_TOPIC:
            continue  # the replicator's own traffic: no consumer group's business
        if (topic, broker) not in masters:
            try:
                for q in await source.read_queues(topic):
                    masters[(q.topic, q.broker_name)] = q.addr
            except TopicNotFound:
                pass
        addr = masters.get((topic, broker))
        offset = None
        if addr is not None:
            offset = await source.consumer_offset(group, ReadQueue(topic, broker, queue_id, addr))
        # a queue the group never committed: it has consumed nothing there
        by_dest.setdefault(ckpt.dest_topic, {})[partition] = offset or 0
        if offset is not None:
            consumed.add(ckpt.dest_topic)
    out: list[Translated] = []
    for dest_topic, offsets in sorted(by_dest.items()):
        if dest_topic not in consumed:
            continue  # the group never committed an offset of that topic: not its topic
        resume = translate(offsets, {p: checkpoints[p] for p in offsets})
        queues = await dest.write_queues(dest_topic)
        for index, q in enumerate(queues):
            offset = resume.get(index)
            basis = "sync"
            if offset is None:
                if q.addr is None:
                    raise RocketMQError(f"{dest_topic}: broker group {q.broker_name} has no master")
                offset = await dest.min_offset(q)
                basis = "earliest"
            out.append(
                Translated(group, dest_topic, index, q.broker_name, q.queue_id, offset, basis)
            )
    return out


async def sync_group(dest: ClusterClient, group: str, translated: list[Translated]) -> int:
    """Write the translated offsets to the destination brokers, only forward; returns how
    many queues moved."""
    moved = 0
    for t in translated:
        queues = await dest.write_queues(t.topic)
        q = queues[t.queue_index]
        current = await dest.consumer_offset(group, q)
        if current is None or current < t.offset:
            await dest.set_consumer_offset(group, q, t.offset)
            moved += 1
    return moved
