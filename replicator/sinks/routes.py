"""Where a topic's queues are: the route from metaledger (``nameserver.client`` ``route_get``)
turned into the write queues RocketMQ clients see (``TopicPublishInfo``: queue data sorted by
broker name, then queue ids 0..writeQueueNums-1 of each; a queue goes to its group's master,
broker id 0, ``MixAll.MASTER_ID``; only queue data with the WRITE permission bit, 2). Both
RocketMQ sinks number queues this way (RocketMQ's ``topicRouteData2TopicPublishInfo``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from nameserver.client import Route
from rmq.codes import PERM_WRITE

__all__ = ["MASTER_ID", "PERM_WRITE", "RouteSource", "WriteQueue", "write_queues"]

MASTER_ID: Final = 0


class RouteSource(Protocol):
    """Where routes come from: ``nameserver.client.Client`` (blocking; called on a thread)."""

    def route_get(self, topic: str) -> Route: ...


@dataclass(frozen=True, slots=True)
class WriteQueue:
    broker_name: str
    queue_id: int
    master: str | None  # None: the group has no master now


def write_queues(route: Route) -> list[WriteQueue]:
    """The topic's write queues in RocketMQ client order (``TopicPublishInfo``: queue data
    sorted by broker name, then 0..writeQueueNums-1), each with its group's master."""
    masters = {b.broker_name: b.addrs.get(MASTER_ID) for b in route.brokers}
    out: list[WriteQueue] = []
    for q in sorted(route.queues, key=lambda q: q.broker_name):
        if q.perm & PERM_WRITE and q.broker_name in masters:
            master = masters[q.broker_name]
            out.extend(WriteQueue(q.broker_name, i, master) for i in range(q.write_queue_nums))
    return out
