"""Consumer offsets (QUERY/UPDATE_CONSUMER_OFFSET, the pull's piggy-backed commit offset).

Behind a small :class:`OffsetStore` protocol: :class:`InMemoryOffsetStore` for tests and a lone
broker, :class:`KvOffsetStore` for metaledger. In metaledger an offset is the key
``/brokers/<brokerName>/offsets/<group>/<topic>/<queueId>`` with a decimal value, written by the
master in one txn per flush (every ≤ 1 s and at stop) and only ever raised (max with what is
there). Why there: a group's offsets then survive the master's death without a copy from the
dead master (RocketMQ's slaves copy ``consumerOffset.json`` every 10 s), and never go
backwards; a new master loads them on promotion (:meth:`KvOffsetStore.load_all`).
"""

from __future__ import annotations

import threading
from typing import Protocol

from nameserver.client import Client, Compare, Op

OffsetKey = tuple[str, str, int]  # group, topic, queue id


def parse_queue_key(prefix: str, key: bytes) -> OffsetKey | None:
    """(group, topic, queue id) of a metaledger key ``<prefix><group>/<topic>/<queueId>``
    (consumer offsets here, POP progress in :mod:`broker.pop.progress`); None for another."""
    parts = key.decode("utf-8", "replace")[len(prefix) :].split("/")
    if len(parts) != 3 or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2])


class OffsetStore(Protocol):
    @property
    def loaded(self) -> bool:
        """False while the stored offsets are not read yet (metaledger unreachable at
        start): QUERY_CONSUMER_OFFSET is refused then rather than answered from nothing."""
        ...

    def load(self, group: str, topic: str, queue_id: int) -> int | None:
        """The group's committed offset of the queue, None if it never committed. Memory
        only, never blocks, never raises."""
        ...

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Raise the committed offset to ``offset`` (a lower one is ignored). Memory only."""
        ...

    def keys(self) -> list[OffsetKey]:
        """Every (group, topic, queue id) with a committed offset (consumer lag: the groups
        that consumed here). Memory only; safe from another thread (a scrape)."""
        ...

    def flush(self) -> None:
        """Make committed offsets durable. Blocks (call it off the event loop); raises the
        backend's error when it cannot (the offsets stay pending for the next flush)."""
        ...


class InMemoryOffsetStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.offsets: dict[OffsetKey, int] = {}
        self._loaded = True

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.offsets.get((group, topic, queue_id))

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = (group, topic, queue_id)
        with self._lock:
            if offset > self.offsets.get(key, -1):
                self.offsets[key] = offset

    def keys(self) -> list[OffsetKey]:
        with self._lock:
            return list(self.offsets)

    def flush(self) -> None:
        pass


class KvOffsetStore(InMemoryOffsetStore):
    """Offsets kept in metaledger's KV, raised only: each flush reads the stored values under
    the broker's prefix and writes, in one txn guarded by their mod revisions, every offset
    that is higher here; a concurrent writer fails the guard and the next flush retries."""

    def __init__(self, client: Client, broker_name: str, kind: str = "offsets") -> None:
        """``kind``: the key prefix's last part (``delivery``: the delayed and timer delivery
        loops' positions, :mod:`broker.timer.progress`)."""
        super().__init__()
        self.client = client
        self.prefix = f"/brokers/{broker_name}/{kind}/"
        self._flushed: dict[OffsetKey, int] = {}
        self._loaded = False

    def key(self, group: str, topic: str, queue_id: int) -> str:
        return f"{self.prefix}{group}/{topic}/{queue_id}"

    def _parse(self, key: bytes) -> OffsetKey | None:
        return parse_queue_key(self.prefix, key)

    def load_all(self) -> int:
        """Read every stored offset of this broker name into memory (at start and on
        promotion); returns how many."""
        stored = self.client.get(self.prefix, prefix=True)
        n = 0
        for kv in stored.kvs:
            k = self._parse(kv.key)
            if k is None or not kv.value.isdigit():
                continue
            self.commit(*k, int(kv.value))
            with self._lock:
                self._flushed[k] = max(self._flushed.get(k, -1), int(kv.value))
            n += 1
        self._loaded = True
        return n

    def flush(self) -> None:
        if not self._loaded:
            self.load_all()
        with self._lock:
            dirty = {k: v for k, v in self.offsets.items() if self._flushed.get(k) != v}
        if not dirty:
            return
        stored = {}
        for kv in self.client.get(self.prefix, prefix=True).kvs:
            k = self._parse(kv.key)
            if k is not None:
                stored[k] = kv
        compares = []
        puts = []
        raised: dict[OffsetKey, int] = {}
        for k, offset in dirty.items():
            old = stored.get(k)
            old_value = int(old.value) if old is not None and old.value.isdigit() else -1
            if old_value >= offset:
                raised[k] = old_value  # already there (or higher): adopt it
                continue
            compares.append(Compare.mod(self.key(*k)) == (old.mod_revision if old else 0))
            puts.append(Op.put(self.key(*k), str(offset)))
            raised[k] = offset
        if puts and not self.client.txn(compares, success=puts).succeeded:
            return  # someone else wrote meanwhile: the next flush reads again
        with self._lock:
            for k, v in raised.items():
                self._flushed[k] = v
                if v > self.offsets.get(k, -1):
                    self.offsets[k] = v
