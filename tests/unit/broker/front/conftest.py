"""An in-process broker replica on a free loopback port, driven with codec-built frames."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from broker.config import BrokerConfig
from broker.replica import Replica
from broker.replication import Replication
from broker.topics import TopicConfig
from rmq.codec import RemotingCommand
from rmq.connection import RemotingConnection
from rmq.message import properties_text

TIMEOUT_S = 20.0
TOPIC = "TopicA"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def props(**kv: str) -> str:
    return properties_text(kv)


@dataclass
class Ctx:
    replica: Replica
    client: RemotingConnection

    @property
    def port(self) -> int:
        return self.replica.config.listen_port

    async def connect(self) -> RemotingConnection:
        return await RemotingConnection.connect("127.0.0.1", self.port)

    async def send(
        self,
        body: bytes,
        topic: str = TOPIC,
        queue_id: int = 0,
        properties: str = "",
        code: int = 10,
        client: RemotingConnection | None = None,
        **extra: Any,
    ) -> RemotingCommand:
        ext: dict[str, Any] = {
            "producerGroup": "PG",
            "topic": topic,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4,
            "queueId": queue_id,
            "sysFlag": 0,
            "bornTimestamp": 1700000000000,
            "flag": 0,
            "properties": properties,
            "reconsumeTimes": 0,
            "unitMode": False,
        }
        ext.update(extra)
        return await (client or self.client).request(code, ext, body)

    async def pull(
        self,
        offset: int,
        topic: str = TOPIC,
        queue_id: int = 0,
        sys_flag: int = 0x4,
        subscription: str = "*",
        suspend_ms: int = 0,
        group: str = "CG",
        max_msgs: int = 32,
        commit_offset: int = 0,
    ) -> RemotingCommand:
        ext = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_msgs,
            "sysFlag": sys_flag,
            "commitOffset": commit_offset,
            "suspendTimeoutMillis": suspend_ms,
            "subVersion": 0,
            "subscription": subscription,
            "expressionType": "TAG",
        }
        return await self.client.request(11, ext)


def run_broker(
    tmp_path: Path,
    scenario: Callable[[Ctx], Awaitable[None]],
    replication: Replication | None = None,
    **config: Any,
) -> None:
    async def main() -> None:
        cfg = BrokerConfig(
            broker_name="broker-a",
            data_dir=str(tmp_path / "broker"),
            listen_host="127.0.0.1",
            listen_port=free_port(),
        )
        cfg = replace(cfg, **config)
        replica = Replica(cfg, replication)
        replica.topics.put(TopicConfig(TOPIC, 4, 4))
        await replica.start()
        client = await RemotingConnection.connect("127.0.0.1", cfg.listen_port)
        try:
            await asyncio.wait_for(scenario(Ctx(replica, client)), TIMEOUT_S)
        finally:
            await client.close()
            await replica.stop()

    asyncio.run(main())
