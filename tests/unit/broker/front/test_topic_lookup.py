"""Adopting an unknown topic from the routes: one resolution for concurrent lookups, and the
lookups resume in the order they asked (pipelined sends to a new topic keep their order)."""

from __future__ import annotations

import asyncio

from broker.topics import TopicConfig, TopicTable


def test_concurrent_lookups_share_one_resolution_and_resume_in_order() -> None:
    calls: list[str] = []

    async def resolver(topic: str) -> TopicConfig | None:
        calls.append(topic)
        for _ in range(5):  # a gRPC round trip: other requests run meanwhile
            await asyncio.sleep(0)
        return TopicConfig(topic, 4, 4)

    async def main() -> list[int]:
        table = TopicTable(None, resolver)
        order: list[int] = []

        async def send(i: int) -> None:
            config = await table.lookup("NewTopic")
            assert config is not None and config.write_queue_nums == 4
            order.append(i)

        await asyncio.gather(*(send(i) for i in range(64)))
        assert await table.lookup("NewTopic") == TopicConfig("NewTopic", 4, 4)
        return order

    assert asyncio.run(main()) == list(range(64))
    assert calls == ["NewTopic"]


def test_a_failed_resolution_is_retried_by_the_next_lookup() -> None:
    answers: list[TopicConfig | None] = [None, TopicConfig("T", 1, 1)]

    async def resolver(topic: str) -> TopicConfig | None:
        return answers.pop(0)

    async def main() -> tuple[TopicConfig | None, TopicConfig | None]:
        table = TopicTable(None, resolver)
        return await table.lookup("T"), await table.lookup("T")

    assert asyncio.run(main()) == (None, TopicConfig("T", 1, 1))
