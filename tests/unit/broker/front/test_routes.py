"""The route registrar: a full registration when the topic table changes, heartbeats between,
registration again when metaledger forgot the broker, unregistration at stop; topics adopted
from the routes (broker/routes.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from broker.config import BrokerConfig
from broker.routes import RouteRegistrar
from broker.topics import TopicConfig, TopicTable
from nameserver.client import NotFound, QueueData, Route, Unavailable


class FakeClient:
    def __init__(self) -> None:
        self.registered: list[Any] = []
        self.heartbeats = 0
        self.known = True
        self.unregistered: list[tuple[Any, ...]] = []
        self.fail = False
        self.routes: dict[str, Route] = {}

    def broker_register(self, request: Any) -> None:
        if self.fail:
            raise Unavailable("down")
        self.registered.append(request)
        self.known = True

    def broker_heartbeat(self, name: str, broker_id: int, addr: str) -> bool:
        self.heartbeats += 1
        return self.known

    def broker_unregister(self, *args: Any) -> None:
        self.unregistered.append(args)

    def route_get(self, topic: str) -> Route:
        if topic not in self.routes:
            raise NotFound("no route")
        return self.routes[topic]


async def until(check: Any, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


def test_registration_heartbeats_and_topics(tmp_path: Path) -> None:
    async def main() -> None:
        client = FakeClient()
        config = BrokerConfig(
            broker_name="b1", data_dir=str(tmp_path), listen_port=12000, heartbeat_interval_ms=20
        )
        topics = TopicTable(str(tmp_path / "topics.json"))
        reg = RouteRegistrar(client, config, topics)  # type: ignore[arg-type]
        topics.on_change = reg.changed
        reg.start()
        await until(lambda: client.registered)
        first = client.registered[0]
        assert first.addr == "127.0.0.1:12000" and first.ha_addr == "127.0.0.1:12001"
        # cluster-name and broker-name topics, perm INHERIT: never a single-topic registration
        assert sorted((t.topic, t.perm) for t in first.topics) == [("DefaultCluster", 1), ("b1", 1)]
        await until(lambda: client.heartbeats >= 2)
        assert len(client.registered) == 1  # unchanged: heartbeats only
        topics.ensure("%RETRY%g", 1)
        await until(lambda: len(client.registered) == 2)
        assert client.registered[1].data_version.counter == topics.version
        assert "%RETRY%g" in {t.topic for t in client.registered[1].topics}
        client.known = False  # metaledger expired us: register again
        await until(lambda: len(client.registered) == 3)
        client.fail = True  # unreachable: retried, the loop survives
        topics.ensure("%RETRY%h", 1)
        await asyncio.sleep(0.1)
        client.fail = False
        await until(
            lambda: any("%RETRY%h" in {t.topic for t in r.topics} for r in client.registered)
        )
        # topics adopted from the routes (this broker name's queue data only)
        client.routes["T"] = Route(
            "T", [], [QueueData("other", 8, 8, 6), QueueData("b1", 2, 3, 6)], "", 1
        )
        assert await reg.resolve("T") == TopicConfig("T", 2, 3, 6)
        assert await reg.resolve("Missing") is None
        await reg.stop()
        assert client.unregistered == [("DefaultCluster", "b1", "127.0.0.1:12000", 0)]
        # the table survives a restart
        assert TopicTable(str(tmp_path / "topics.json")).get("%RETRY%g") is not None

    asyncio.run(main())


def test_registered_waits_for_the_version_or_times_out(tmp_path: Path) -> None:
    async def main() -> None:
        client = FakeClient()
        config = BrokerConfig(
            broker_name="b1", data_dir=str(tmp_path), listen_port=12000, heartbeat_interval_ms=20
        )
        topics = TopicTable(str(tmp_path / "topics.json"))
        reg = RouteRegistrar(client, config, topics)  # type: ignore[arg-type]
        topics.on_change = reg.changed
        assert not await reg.registered(topics.version, 0.05)  # not started: nothing went out
        reg.start()
        topics.put(TopicConfig("New", 4, 4))
        assert await reg.registered(topics.version, 5)
        assert "New" in {t.topic for t in client.registered[-1].topics}
        client.fail = True  # metaledger unreachable: the wait ends at its deadline
        topics.put(TopicConfig("New", 8, 8))
        started = time.monotonic()
        assert not await reg.registered(topics.version, 0.2)
        assert 0.2 <= time.monotonic() - started < 2
        client.fail = False
        assert await reg.registered(topics.version, 5)
        await reg.stop()

    asyncio.run(main())
