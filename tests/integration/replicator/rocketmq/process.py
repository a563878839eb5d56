"""One ``metaledger replicate rocketmq`` worker as a real process (its own session), stopped
by its PID; and reading a job's published status and committed offsets."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

from nameserver.client import Client
from replicator.rocketmq.checkpoint import QueueCheckpoint
from replicator.rocketmq.client import ClusterClient
from replicator.rocketmq.wire import TopicSpec
from replicator.status import read_statuses
from rmq.message import StoredMessage
from tests.integration.replicator.process import WorkerProcess
from tests.integration.replicator.rocketmq.clusters import RmqCluster

#: fast clocks for tests: a heartbeat a second, commits twice a second
FAST = (
    "--commit-interval", "0.5", "--refresh-interval", "1", "--heartbeat-interval", "1",
    "--config-interval", "2", "--checkpoint-interval", "1",
)  # fmt: skip


class Worker(WorkerProcess):
    """One ``metaledger replicate rocketmq`` worker with the test clocks (:data:`FAST`)."""

    def __init__(
        self,
        root: Path,
        source_namesrv: str,
        dest_namesrv: str,
        endpoints: list[str],
        job: str,
        worker: str,
        *extra: str,
        lease_ttl: int = 3,
    ) -> None:
        self.worker = worker
        args = [
            "rocketmq", "--source-namesrv", source_namesrv, "--dest-namesrv", dest_namesrv,
            "--job", job, "--worker", worker, "--endpoints", ",".join(endpoints),
            "--lease-ttl", str(lease_ttl), *FAST, *extra,
        ]  # fmt: skip
        super().__init__(root, f"rmq-replicator-{job}-{worker}.log", args)


def statuses(client: Client, job: str) -> list[dict[str, Any]]:
    return read_statuses(client, "rocketmq", job)


def queue_statuses(client: Client, job: str) -> dict[str, dict[str, Any]]:
    """Every source queue's row, by partition, from whichever worker publishes it."""
    out: dict[str, dict[str, Any]] = {}
    for doc in statuses(client, job):
        for q in doc.get("queues", []):
            out[q["partition"]] = {**q, "worker": doc.get("worker")}
    return out


def committed(client: Client, job: str) -> dict[str, QueueCheckpoint]:
    return {o.partition: QueueCheckpoint.decode(o.offset) for o in client.offsets_list(job).offsets}


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, default=str)


def source_ends(source: RmqCluster, topics: tuple[str, ...]) -> dict[str, int]:
    """Each source queue's end (max offset), by partition."""

    async def go() -> dict[str, int]:
        async with ClusterClient(source.namesrv) as c:
            out = {}
            for topic in topics:
                for q in await c.read_queues(topic):
                    out[q.partition] = await c.max_offset(q)
            return out

    return asyncio.run(go())


def caught_up(source: RmqCluster, dest: RmqCluster, job: str, *topics: str) -> bool:
    """Every source queue of ``topics`` committed by ``job`` up to the source's end now."""
    ends = source_ends(source, topics)
    qs = queue_statuses(dest.routes, job)
    return bool(ends) and all(
        p in qs and qs[p]["committed_offset"] == end for p, end in ends.items()
    )


def update_topic(cluster: RmqCluster, topic: str, queues: int, perm: int = 6) -> None:
    """Create or change ``topic`` through the broker (UPDATE_AND_CREATE_TOPIC), as
    ``mqadmin updateTopic`` does."""

    async def go() -> None:
        async with ClusterClient(cluster.namesrv) as c:
            await c.create_topic(TopicSpec(topic, queues, queues, perm), cluster=cluster.name)

    asyncio.run(go())


def set_order_conf(cluster: RmqCluster, topic: str, conf: str) -> None:
    async def go() -> None:
        async with ClusterClient(cluster.namesrv) as c:
            await c.set_order_conf(topic, conf)

    asyncio.run(go())


def ids(messages: list[StoredMessage]) -> Counter[str]:
    return Counter(m.properties.get("UNIQ_KEY", "") for m in messages)
