"""One ``metaledger replicate rocketmq`` worker as a real process (its own session), stopped
by its PID; and reading a job's published status and committed offsets."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from broker.store import StoredMessage
from nameserver.client import Client
from replicator.rocketmq.checkpoint import QueueCheckpoint
from replicator.rocketmq.client import ClusterClient
from replicator.rocketmq.wire import TopicSpec
from replicator.status import read_statuses
from tests.integration.broker.conftest import cli_env
from tests.integration.replicator.rocketmq.clusters import RmqCluster

#: fast clocks for tests: a heartbeat a second, commits twice a second
FAST = (
    "--commit-interval", "0.5", "--refresh-interval", "1", "--heartbeat-interval", "1",
    "--config-interval", "2", "--checkpoint-interval", "1",
)  # fmt: skip


class Worker:
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
        self.root = root
        self.worker = worker
        self.log_path = root / f"rmq-replicator-{job}-{worker}.log"
        self.args = [
            sys.executable, "-m", "nameserver.cli", "replicate", "rocketmq",
            "--source-namesrv", source_namesrv, "--dest-namesrv", dest_namesrv,
            "--job", job, "--worker", worker, "--endpoints", ",".join(endpoints),
            "--lease-ttl", str(lease_ttl), *FAST, *extra,
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                self.args, env=cli_env(self.root), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def send(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        if sig != signal.SIGKILL:
            self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace")


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
