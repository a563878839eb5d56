"""The topics this broker serves (RocketMQ's ``TopicConfigManager``), kept in ``topics.json``.

A topic is served when it is in the table. Topics come from five places: the routes in
metaledger (a topic created with ``metaledger route topic create`` on this broker name is
looked up on first use and adopted), UPDATE_AND_CREATE_TOPIC (17, broker/admin/topics.py:
created or its queue numbers / perm / order replaced), a consumer group's heartbeat
(``%RETRY%<group>``, one queue), the DLQ (``%DLQ%<group>``) and a send to a topic nobody
created while auto-creation is on (RocketMQ's ``autoCreateTopicEnable``: the table then holds
the default topic ``TBW102``, perm INHERIT|READ|WRITE, whose route a 4.x client uses when its
topic has none; :meth:`TopicTable.create_from_default` makes the new topic from it, as
``createTopicInSendMessageMethod`` does). The table is saved so
a restarted broker registers every topic again (the routes drop a broker name's queue data
when its last broker expires). ``on_change`` tells the registrar to register again.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import tempfile
import threading
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

from broker.store.segments import fsync_dir
from rmq.codes import PERM_INHERIT, PERM_READ, PERM_WRITE
from rmq.headers import DEFAULT_TOPIC

REPLICA_OF = "replica.of"
REPLICATOR_SOURCE = "ROCKETMQ_REPLICATOR_SOURCE"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: RocketMQ's TopicValidator: these characters, at most 127 (C++ decodes a 1-byte length).
TOPIC_NAME = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")
#: the default topic's perm: topics created from it inherit READ|WRITE
AUTO_CREATE_PERM = PERM_INHERIT | PERM_READ | PERM_WRITE
#: RocketMQ's ``MessageConst.PROPERTY_SHARDING_KEY``: where a message group is stored
SHARDING_KEY = "__SHARDINGKEY"


def message_group_queue(group: str, write_queue_nums: int) -> int:
    """The write queue of a message group (FIFO): ``crc32(group) % writeQueueNums``, so one
    group's messages share one queue and keep their order. The gRPC front and ``metaledger
    send --fifo-group`` both pick it here (the proxy hashes the group too,
    ``SendMessageActivity.java``:381-388, with Guava's consistent hash; any stable hash will
    do)."""
    return zlib.crc32(group.encode()) % write_queue_nums


@dataclass(frozen=True)
class TopicConfig:
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0
    order: bool = False
    #: SINGLE_TAG or MULTI_TAG (RocketMQ's TopicFilterType; kept and reported, not used)
    topic_filter_type: str = "SINGLE_TAG"
    #: RocketMQ 5 topic attributes, (name, value) sorted by name; ``replica.of`` is ours
    #: (see :attr:`replica_of`)
    attributes: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        # topics.json keeps them as a list of pairs
        pairs = tuple(sorted((str(k), str(v)) for k, v in self.attributes))
        object.__setattr__(self, "attributes", pairs)

    @property
    def replica_of(self) -> str:
        """The cluster this topic is a replica of ("" = none): producers may not write to it;
        only messages the RocketMQ replicator brought from that cluster (its
        ``ROCKETMQ_REPLICATOR_SOURCE`` property lists it) are taken. A guard against
        writing to the wrong side, not an access control (any client can set a property)."""
        return dict(self.attributes).get(REPLICA_OF, "")

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


Resolver = Callable[[str], Awaitable[TopicConfig | None]]


class TopicTable:
    def __init__(self, path: str | None, resolver: Resolver | None = None) -> None:
        self.path = path
        self.resolver = resolver
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        self._resolving: dict[str, asyncio.Future[TopicConfig | None]] = {}
        self.version = 0
        """Raised on every change (the registration's DataVersion counter)."""
        self.changed_ms = int(time.time() * 1000)
        """When the table last changed (the DataVersion timestamp)."""
        self.on_change: Callable[[], None] | None = None
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            self.version = int(doc.get("version", 0))
            self.changed_ms = int(doc.get("timestamp", self.changed_ms))
            for t in doc.get("topics", []):
                self._topics[t["topic"]] = TopicConfig(**t)

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.topic)

    async def lookup(self, topic: str) -> TopicConfig | None:
        """The topic's config, adopting it from the routes (``resolver``) if not known yet.

        One resolution per topic at a time: concurrent lookups of an unknown topic wait for
        the same one and resume in the order they asked, so pipelined sends to a topic the
        broker has not loaded yet are stored in the order they arrived (each resolving on
        its own let them overtake one another)."""
        found = self._topics.get(topic)
        if found is not None or self.resolver is None or not TOPIC_NAME.fullmatch(topic):
            return found
        pending = self._resolving.get(topic)
        if pending is None:
            pending = asyncio.ensure_future(self._resolve(topic))
            self._resolving[topic] = pending
        return await asyncio.shield(pending)

    async def _resolve(self, topic: str) -> TopicConfig | None:
        assert self.resolver is not None
        try:
            resolved = await self.resolver(topic)
            if resolved is not None:
                self.put(resolved)
            return resolved
        finally:
            self._resolving.pop(topic, None)

    def keep_default_topic(self, enabled: bool, queue_nums: int) -> None:
        """Auto-creation on: the default topic ``TBW102`` with ``queue_nums`` queues and perm
        INHERIT|READ|WRITE in the table (RocketMQ's TopicConfigManager with
        ``autoCreateTopicEnable``); off: not in it (a table saved while it was on drops it)."""
        if enabled:
            self.put(TopicConfig(DEFAULT_TOPIC, queue_nums, queue_nums, AUTO_CREATE_PERM))
        else:
            self.remove(DEFAULT_TOPIC)

    def create_from_default(
        self, topic: str, default_topic: str, queue_nums: int | None
    ) -> TopicConfig | None:
        """``topic`` created from ``default_topic`` (RocketMQ's
        ``createTopicInSendMessageMethod``): ``min(queue_nums, its write queues)`` read and
        write queues (at least 1; all of them when the client sent no number), its perm less
        INHERIT, its filter type. None when ``default_topic`` is not here or does not let
        topics inherit from it. A topic already here is returned as it is."""
        found = self._topics.get(topic)
        if found is not None:
            return found
        default = self._topics.get(default_topic)
        if default is None or not default.perm & PERM_INHERIT:
            return None
        n = default.write_queue_nums if queue_nums is None else queue_nums
        n = max(1, min(n, default.write_queue_nums))
        return self.put(
            TopicConfig(
                topic,
                n,
                n,
                default.perm & ~PERM_INHERIT,
                topic_filter_type=default.topic_filter_type,
            )
        )

    def ensure(self, topic: str, queues: int = 1) -> TopicConfig:
        """The topic, created with ``queues`` read/write queues if absent (retry, DLQ)."""
        found = self._topics.get(topic)
        return found if found is not None else self.put(TopicConfig(topic, queues, queues))

    def put(self, config: TopicConfig) -> TopicConfig:
        with self._lock:
            if self._topics.get(config.topic) == config:
                return config
            self._topics[config.topic] = config
            self._changed()
        if self.on_change is not None:
            self.on_change()
        return config

    def remove(self, topic: str) -> bool:
        """Stop serving ``topic`` (its stored messages stay); False when it was not here."""
        with self._lock:
            if self._topics.pop(topic, None) is None:
                return False
            self._changed()
        if self.on_change is not None:
            self.on_change()
        return True

    def _changed(self) -> None:
        self.version += 1
        self.changed_ms = int(time.time() * 1000)
        self._save()

    def _save(self) -> None:
        if not self.path:
            return
        doc = {
            "version": self.version,
            "timestamp": self.changed_ms,
            "topics": [asdict(t) for t in self.all()],
        }
        directory = os.path.dirname(self.path) or "."
        fd, tmp = tempfile.mkstemp(prefix=".topics.", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fsync_dir(directory)  # the rename survives a power cut
