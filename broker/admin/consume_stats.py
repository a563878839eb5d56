"""Consumer lag: GET_CONSUME_STATS (208) and the metrics' lag gauges, for pull, POP and gRPC
groups alike.

As RocketMQ's ``AdminBrokerProcessor.getConsumeStats`` (``AdminBrokerProcessor.java``
:1842-1915): the topics are the request's ``topicList``, else its ``topic``, else every topic
the group has committed offsets of here (``ConsumerOffsetManager.whichTopicByConsumer``);
a topic this broker does not know is skipped; per read queue ``brokerOffset`` (the queue's
max offset), ``consumerOffset`` (the committed offset, 0 if none), ``pullOffset``
(≥ ``consumerOffset``) and ``lastTimestamp`` (the store time of the message at
``consumerOffset - 1``, 0 if none). The body is :mod:`rmq.consume_stats`. A queue the group
lags on also gets metaledger's ``nextTimestamp`` and ``newestTimestamp`` (the store times of
the message at ``consumerOffset`` and of the newest one: the lag in time), two more store
reads per such queue.

A pull group's row is its committed offset; RocketMQ keeps no pull offset of its own for a
group that commits through the pull (its ``pullOffset`` is then the committed one), nor do
we. A POP group (remoting POP and the gRPC SimpleConsumer/PushConsumer, whose consumption is
the replica's :class:`~broker.pop.service.PopService`) has a book per queue: its
``consumerOffset`` is the book's ``low`` (everything below is done: what it commits,
docs/broker.md "POP consumption"), ``pullOffset`` its ``next`` (never popped from there),
``inflight`` the messages popped and not acked. RocketMQ's dashboard shows -1 for POP
groups (RocketMQ 5 commits no offset for them); here they get the
same numbers as a pull group, and ``lag`` = never delivered (``broker - pull``) + in flight
(:attr:`rmq.consume_stats.QueueOffsets.lag`): 10 sent, 6 popped, 4 of them acked → lag 6,
2 in flight.

``consumeTps`` is 0.0: the broker keeps no per-group rate (RocketMQ's
``BrokerStatsManager.tpsGroupGetNums``); the metrics' counters give rates instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from broker.core import BrokerCore
from broker.pop.service import PopService
from broker.pop.state import QueueBook
from broker.pop.table import Key
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.consume_stats import QueueOffsets, encode_consume_stats
from rmq.headers import GetConsumeStatsHeader
from rmq.message import MessageError, dispatch_info
from rmq.server import Handler, Peer

__all__ = ["ConsumeStatsProcessor", "consumer_queues", "group_rows", "queue_offsets"]

TOPIC_SEPARATOR = ";"  # GetConsumeStatsRequestHeader.TOPIC_NAME_SEPARATOR


def queue_offsets(
    broker_name: str,
    topic: str,
    queue_id: int,
    broker_offset: int,
    committed: int | None,
    book: QueueBook | None,
) -> QueueOffsets:
    """One queue's row (``lastTimestamp`` left 0: it needs a store read)."""
    consumer = max(0, committed if committed is not None else 0)
    pull, inflight = consumer, 0
    if book is not None:
        consumer = book.low
        pull, inflight = max(consumer, book.next), book.inflight
    broker_offset = max(0, broker_offset)
    return QueueOffsets(
        topic=topic,
        broker_name=broker_name,
        queue_id=queue_id,
        broker_offset=broker_offset,
        consumer_offset=consumer,
        pull_offset=pull,
        inflight=inflight,
    )


def group_rows(
    core: BrokerCore, group: str, topics: list[str], book: Callable[[Key], QueueBook | None]
) -> list[QueueOffsets]:
    """The group's row of every read queue of ``topics`` (a topic this broker does not know
    is skipped, as RocketMQ's "topic config does not exist"); ``book`` gives a POP book."""
    out = []
    for topic in topics:
        config = core.topics.get(topic)
        if config is None:
            continue
        for q in range(config.read_queue_nums):
            out.append(
                queue_offsets(
                    core.config.broker_name,
                    topic,
                    q,
                    core.store.max_offset(topic, q),
                    core.offsets.load(group, topic, q),
                    book((group, topic, q)),
                )
            )
    return out


def consumer_queues(
    core: BrokerCore, books: Mapping[Key, QueueBook]
) -> list[tuple[str, QueueOffsets]]:
    """(group, row) for every read queue of every topic a group committed an offset of here:
    the metrics' lag gauges (label sets bounded by the offsets this broker holds). Memory
    only (the books open in memory): called from the metrics thread."""
    pairs = sorted({(group, topic) for group, topic, _q in core.offsets.keys()})
    return [(g, row) for g, t in pairs for row in group_rows(core, g, [t], books.get)]


def _no_book(key: Key) -> QueueBook | None:
    return None


class ConsumeStatsProcessor:
    def __init__(self, core: BrokerCore, pop: PopService | None = None) -> None:
        self.core = core
        self.pop = pop

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.GET_CONSUME_STATS: self.consume_stats}

    def topics(self, h: GetConsumeStatsHeader) -> list[str]:
        if h.topic_list:
            return sorted({t for t in h.topic_list.split(TOPIC_SEPARATOR) if t})
        if h.topic and h.topic.strip():
            return [h.topic]
        return sorted({t for g, t, _q in self.core.offsets.keys() if g == h.consumer_group})

    def store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at ``offset``, 0 if none (blocking: on the store's
        pool); read as a dispatch reads it, the body neither copied nor decoded."""
        if offset < 0:
            return 0
        got = self.core.store.get(topic, queue_id, offset, 1)
        if not got.messages:
            return 0
        try:
            return max(0, dispatch_info(got.messages[0]).store_timestamp)
        except MessageError:
            return 0

    def last_timestamp(self, row: QueueOffsets) -> int:
        """Store time of the last consumed message (blocking: on the store's pool)."""
        if row.consumer_offset <= 0:
            return 0
        return self.store_time(row.topic, row.queue_id, row.consumer_offset - 1)

    def stamp(self, row: QueueOffsets) -> QueueOffsets:
        """``row`` with its store times: the last consumed, and when it lags the first not
        consumed and the newest (blocking: on the store's pool)."""
        last = self.last_timestamp(row)
        if row.lag <= 0 or row.broker_offset <= row.consumer_offset:
            return dataclasses.replace(row, last_timestamp=last)
        return dataclasses.replace(
            row,
            last_timestamp=last,
            next_timestamp=self.store_time(row.topic, row.queue_id, row.consumer_offset),
            newest_timestamp=self.store_time(row.topic, row.queue_id, row.broker_offset - 1),
        )

    async def consume_stats(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = GetConsumeStatsHeader.from_command(request)
        if not self.core.offsets.loaded:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                "consumer offsets are not loaded from metaledger yet, retry",
            )
        book = self.pop.table.get if self.pop is not None else _no_book
        rows = group_rows(self.core, h.consumer_group, self.topics(h), book)

        def stamped() -> list[QueueOffsets]:
            return [self.stamp(r) for r in rows]

        body = encode_consume_stats(await self.core.run(stamped))
        return request.response(ResponseCode.SUCCESS, body=body)
