"""A Redis Cluster source: which node is the master of "this shard" right now.

A Redis Cluster is replicated by **one replicator job per shard** (a master and its replicas):
each master has its own replication stream, replid and offsets, so one job's checkpoint
``(replid, offset)`` is one shard's position (RedisShake's cluster mode also
runs one reader per master). A job names its shard on the command line::

    metaledger replicate redis --source redis://10.0.0.5:7000 --cluster-shard 0 --job orders-0 …
    metaledger replicate redis --source redis://10.0.0.5:7000 --cluster-shard 5461 --job orders-1 …

``--source`` is a **seed**: any node of the cluster, master or replica (the URL's user and
password are used for every node, as ``redis-cli -c`` does). ``--cluster-shard`` is either

* a **slot** (``0`` to ``16383``): the shard is whichever master serves that slot now. This is
  the durable name of a shard: it survives failovers, restarts of the replicator and the loss
  of any single node, and it is what ``redis-cli --cluster check`` and ``CLUSTER SHARDS``
  show operators (a shard's first slot: ``0``, ``5461``, ``10923`` for ``redis-cli --cluster
  create`` with 3 masters). Resharding the slot away moves the job with it; or
* a **node id** (40 hex characters, from ``CLUSTER NODES`` / ``CLUSTER MYID``): the shard of
  that node, master or replica. The resolver turns it into the shard's first slot at the first
  resolution and keeps to that slot afterwards, so a failed master's id still names its shard
  for the life of the process (a restarted replicator needs the id of a live node; prefer a
  slot).

Before each pass (the pipeline's reconnect: ``RedisReplicator._active_pass``)
:meth:`ClusterResolver.resolve` asks every node it knows (the seed, then every address learned
from earlier answers, so a dead seed is no problem) for ``CLUSTER NODES``, collects the masters
that claim the slot, and asks each candidate itself: only a node whose own ``myself`` line
says ``master`` and lists the slot counts, and of two such nodes (a partition, a failover in
progress) the higher config epoch wins, as in the cluster's own conflict rule. No candidate
confirmed (the old master was killed and its replica is not promoted yet, for
``cluster-node-timeout``) raises :class:`ShardUnavailable` (``retriable``): the pass ends and
the next one resolves again after the retry delay.

Why a failover costs no full sync: a promoted replica keeps the old master's replid as its
``replid2`` with ``second_replid_offset`` = its offset + 1 at promotion (PSYNC2,
``masterTryPartialResynchronization``). The next pass PSYNCs the new master with the checkpoint
``(old replid, offset + 1)``; when the checkpoint is within the history the replica had received
(always after ``CLUSTER FAILOVER``, which waits for the replica to catch up), the answer is
``+CONTINUE <new replid>``, which the pipeline persists at once. A checkpoint *beyond* that history
(after a kill -9, the replicator confirmed writes the replica never got: the cluster lost them) gets
``+FULLRESYNC``: a new generation with SNAPSHOT markers, so the topic then follows the new master's
history.

While a pass runs, it checks every ``cluster_check_interval_s`` (2 s) that its node is still
the shard's master (:meth:`ClusterResolver.moved`) and ends when another node is: an old
master drops its replicas when it follows the new one, but one cut off by a partition (or
paused) can keep the link open, pinging or silent, for as long as the partition lasts.

The parsing and the choice (:func:`parse_cluster_nodes`, :func:`choose_master`) are pure;
only :class:`ClusterResolver` talks to Redis (redis-py, ordinary connections).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from replicator.redis.errors import ConfigError, ShardUnavailable

__all__ = [
    "ClusterNode",
    "ClusterResolver",
    "ShardSpec",
    "choose_master",
    "parse_cluster_nodes",
    "parse_shard",
]

log = logging.getLogger(__name__)

SLOTS = 16384
_NODE_ID = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """``--cluster-shard``: a slot, or the id of a node of the shard."""

    slot: int | None = None
    node_id: str | None = None

    def __str__(self) -> str:
        return f"slot {self.slot}" if self.slot is not None else f"node {self.node_id}"


def parse_shard(text: str) -> ShardSpec:
    text = text.strip()
    if _NODE_ID.fullmatch(text.lower()):  # before the slot: an id can be all digits
        return ShardSpec(node_id=text.lower())
    if text.isdigit() and len(text) <= 5:
        slot = int(text)
        if slot >= SLOTS:
            raise ConfigError("cluster_shard", f"slot {slot} is not in 0..{SLOTS - 1}")
        return ShardSpec(slot=slot)
    raise ConfigError("cluster_shard", f"{text!r}: a slot (0..{SLOTS - 1}) or a 40-hex node id")


@dataclass(frozen=True, slots=True)
class ClusterNode:
    """One line of ``CLUSTER NODES``."""

    node_id: str
    host: str  # "" when the node has no known address (``noaddr``, ``:0``)
    port: int
    flags: frozenset[str]
    master_id: str | None  # a replica's master ("-" in the line: None)
    config_epoch: int
    slots: tuple[tuple[int, int], ...]  # inclusive ranges; importing/migrating ones left out

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def failed(self) -> bool:
        return bool(self.flags & {"fail", "fail?", "handshake", "noaddr"})

    def owns(self, slot: int) -> bool:
        return any(lo <= slot <= hi for lo, hi in self.slots)


def parse_cluster_nodes(text: str) -> list[ClusterNode]:
    """``<id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>…``"""
    nodes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        addr = fields[1].split("@", 1)[0]
        host, _, port = addr.rpartition(":")
        slots: list[tuple[int, int]] = []
        for s in fields[8:]:
            if s.startswith("["):  # [slot->-node] / [slot-<-node]: a migration in progress
                continue
            lo, _, hi = s.partition("-")
            slots.append((int(lo), int(hi or lo)))
        nodes.append(
            ClusterNode(
                node_id=fields[0],
                host=host if port.isdigit() and int(port) > 0 else "",
                port=int(port) if port.isdigit() else 0,
                flags=frozenset(fields[2].split(",")),
                master_id=None if fields[3] == "-" else fields[3],
                config_epoch=int(fields[6]),
                slots=tuple(slots),
            )
        )
    return nodes


def shard_slot(nodes: Iterable[ClusterNode], node_id: str) -> int | None:
    """The first slot of the shard ``node_id`` belongs to, in this view (None: not known)."""
    by_id = {n.node_id: n for n in nodes}
    node = by_id.get(node_id)
    if node is not None and not node.is_master and node.master_id is not None:
        node = by_id.get(node.master_id)
    if node is None or not node.slots:
        return None
    return min(lo for lo, _ in node.slots)


def choose_master(confirmed: Iterable[ClusterNode], slot: int) -> ClusterNode | None:
    """Of the nodes that said themselves (``myself`` line) that they are a master serving
    ``slot``, the one with the highest config epoch (the cluster's own rule)."""
    masters = [n for n in confirmed if n.is_master and n.owns(slot) and n.host]
    return max(masters, key=lambda n: n.config_epoch, default=None)


Connect = Callable[[str, int], Any]  # (host, port) -> a redis-py client (execute_command, close)


@dataclass(frozen=True, slots=True)
class Resolved:
    host: str
    port: int
    node_id: str
    slot: int


class ClusterResolver:
    """``resolve()`` (blocking; the pipeline runs it in a thread): the shard's master now."""

    def __init__(
        self,
        seed: tuple[str, int],
        shard: ShardSpec,
        username: str | None = None,
        password: str | None = None,
        timeout_s: float = 3.0,
        connect: Connect | None = None,
    ) -> None:
        self.shard = shard
        self.slot = shard.slot
        self.known: list[tuple[str, int]] = [seed]
        self.last: Resolved | None = None
        self._connect = connect or self._redis_client
        self._username = username
        self._password = password
        self._timeout_s = timeout_s
        self._lock = threading.Lock()  # a pass's check and the next pass may overlap

    def _redis_client(self, host: str, port: int) -> Any:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        return redis.Redis(
            host=host,
            port=port,
            username=self._username,
            password=self._password,
            socket_timeout=self._timeout_s,
            socket_connect_timeout=self._timeout_s,
            retry=Retry(NoBackoff(), 0),  # a dead node is one error, not 3 s of retries
        )

    def _nodes(self, host: str, port: int) -> list[ClusterNode]:
        r = self._connect(host, port)
        try:
            raw = r.execute_command("CLUSTER", "NODES")
        finally:
            r.close()
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        return parse_cluster_nodes(text)

    def _learn(self, nodes: Iterable[ClusterNode]) -> None:
        for n in nodes:
            if n.host and (n.host, n.port) not in self.known:
                self.known.append((n.host, n.port))

    def resolve(self) -> Resolved:
        with self._lock:
            return self._resolve()

    def _resolve(self) -> Resolved:
        views: dict[tuple[str, int], list[ClusterNode]] = {}
        errors: list[str] = []
        i = 0
        while i < len(self.known):  # the list grows as views name more nodes
            addr = self.known[i]
            i += 1
            try:
                nodes = self._nodes(*addr)
            except Exception as exc:  # unreachable, not a cluster node, no permission
                errors.append(f"{addr[0]}:{addr[1]}: {type(exc).__name__}: {exc}")
                continue
            views[addr] = nodes
            self._learn(nodes)
            if self.slot is None and self.shard.node_id is not None:
                self.slot = shard_slot(nodes, self.shard.node_id)
        if self.slot is None:
            raise ShardUnavailable(
                f"no reachable node knows {self.shard} with slots"
                + (f" ({'; '.join(errors)})" if errors else "")
            )
        slot = self.slot
        # every master any view names for the slot, then each one's word about itself
        candidates = {
            (n.host, n.port)
            for nodes in views.values()
            for n in nodes
            if n.is_master and n.owns(slot) and n.host and "fail" not in n.flags
        }
        confirmed = []
        for addr in sorted(candidates):
            me = next((n for n in views.get(addr, []) if "myself" in n.flags), None)
            if me is not None:
                # its own view was read above; host "" in a myself line: use the address
                confirmed.append(_at(me, addr))
        best = choose_master(confirmed, slot)
        if best is None:
            raise ShardUnavailable(
                f"no reachable master serves slot {slot} (candidates "
                f"{sorted(f'{h}:{p}' for h, p in candidates) or 'none'})"
                + (f"; {'; '.join(errors)}" if errors else "")
            )
        found = Resolved(best.host, best.port, best.node_id, slot)
        if self.last is None or (self.last.host, self.last.port) != (found.host, found.port):
            log.info(
                "cluster shard %s (slot %d): master %s:%d (node %s, epoch %d)",
                self.shard, slot, found.host, found.port, found.node_id, best.config_epoch,
            )  # fmt: skip
        self.last = found
        return found

    def moved(self, current: tuple[str, int]) -> Resolved | None:
        """The shard's master if it is now another node than ``current``; None while it is
        ``current`` or while no master can be confirmed (a failover still in progress)."""
        try:
            found = self.resolve()
        except ShardUnavailable:
            return None
        return None if (found.host, found.port) == current else found


def _at(node: ClusterNode, addr: tuple[str, int]) -> ClusterNode:
    """``node`` (a ``myself`` line) with the address it was reached at."""
    return ClusterNode(
        node.node_id, addr[0], addr[1], node.flags, node.master_id, node.config_epoch, node.slots
    )
