"""POP progress in metaledger, so a new master neither loses nor re-hides acknowledged messages.

Per (group, topic, queue) the key ``/brokers/<brokerName>/pop/<group>/<topic>/<queueId>``
holds ``{"low": L, "next": N, "acked": [...]}``: every offset below L is done, offsets from
N were never popped, and ``acked`` lists offsets done above L (at most
:data:`broker.pop.state.MAX_ACKED_KEPT`). The master writes the books that changed every
second and at stop, in one txn guarded by the keys' mod revisions, the way
:class:`broker.state.offsets.KvOffsetStore` flushes consumer offsets; ``low`` is raised
only (a stored low above ours is kept: the next load merges it). A new master loads them on
promotion (:meth:`KvPopProgress.load_all`) and merges them into its books
(:meth:`broker.pop.state.QueueBook.merge`): what was in flight, and acks of the last second
before the failover, are delivered again; nothing acked below low is.
"""

from __future__ import annotations

import json
from typing import Any

from broker.state.offsets import parse_queue_key
from nameserver.client import Client, Compare, Op

Key = tuple[str, str, int]
Progress = tuple[int, int, list[int]]  # low, next, acked above low


def _parse_value(raw: bytes) -> Progress | None:
    try:
        doc: Any = json.loads(raw)
        low, nxt, acked = int(doc["low"]), int(doc["next"]), [int(a) for a in doc["acked"]]
    except (ValueError, KeyError, TypeError):
        return None
    return low, nxt, acked


class KvPopProgress:
    def __init__(self, client: Client, broker_name: str) -> None:
        self.client = client
        self.prefix = f"/brokers/{broker_name}/pop/"
        self._flushed: dict[Key, Progress] = {}

    def key(self, k: Key) -> str:
        return f"{self.prefix}{k[0]}/{k[1]}/{k[2]}"

    def _stored(self) -> dict[Key, tuple[Progress, int]]:
        """Every stored progress of this broker name and its mod revision."""
        out = {}
        for kv in self.client.get(self.prefix, prefix=True).kvs:
            k = parse_queue_key(self.prefix, kv.key)
            p = _parse_value(kv.value)
            if k is not None and p is not None:
                out[k] = (p, kv.mod_revision)
        return out

    def load_all(self) -> dict[Key, Progress]:
        """Every stored progress (at start and on promotion). Blocks; raises ClientError."""
        stored = {k: p for k, (p, _rev) in self._stored().items()}
        self._flushed.update(stored)
        return stored

    def flush(self, books: dict[Key, Progress]) -> None:
        """Write the books that changed since the last flush. Blocks; raises ClientError
        (they stay pending for the next flush)."""
        dirty = {k: p for k, p in books.items() if self._flushed.get(k) != p}
        if not dirty:
            return
        stored = self._stored()
        compares, puts = [], []
        for k, p in dirty.items():
            old = stored.get(k)
            if old is not None and old[0][0] > p[0]:
                continue  # low only rises: another master went further (merged on load)
            compares.append(Compare.mod(self.key(k)) == (old[1] if old else 0))
            value = json.dumps({"low": p[0], "next": p[1], "acked": p[2]}, separators=(",", ":"))
            puts.append(Op.put(self.key(k), value))
        if puts and not self.client.txn(compares, success=puts).succeeded:
            return  # someone else wrote meanwhile: the next flush reads again
        self._flushed.update(dirty)
