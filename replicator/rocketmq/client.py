"""``ClusterClient``: an asyncio client of one RocketMQ cluster, reached through its nameserver's
remoting port (``host:port[;host:port]``, each tried in turn): routes and topics from the
nameserver, pulls and offsets from each queue's broker master (broker id 0).

Requests and answers are built and parsed by ``replicator.rocketmq.wire`` (sans I/O); I/O goes
through ``rmq.connection.RemotingConnection`` (pipelined, one cached connection per address,
reopened when it was lost). The client belongs to one event loop. ``route_get`` is the
blocking twin of ``route`` for ``replicator.sinks.routes.RouteSource`` (a sink calls it with
``asyncio.to_thread``): ``rmq.connection.blocking_call``, a plain socket per call, safe from
any thread.

Read queues (RocketMQ's ``topicRouteData2TopicSubscribeInfo``):
queue data with the READ permission bit (4) sorted by broker name, then queue ids
0..readQueueNums-1; each pulled from its group's master.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from nameserver.client import (
    BrokerGroup,
    NotFound,
    Route,
    SessionCredentials,
    Unavailable,
    UnknownError,
)
from replicator.rocketmq import wire
from replicator.rocketmq.errors import BadAnswer, ClusterUnavailable, RocketMQError, TopicNotFound
from rmq.codec import ProtocolError, RemotingCommand
from rmq.codes import PERM_READ, PERM_WRITE
from rmq.connection import ConnectionFailure, RemotingConnection, blocking_call

__all__ = ["MASTER_ID", "PERM_READ", "ClusterClient", "ReadQueue", "read_queues", "write_queues"]

DEFAULT_GROUP: Final = "ROCKETMQ_REPLICATOR"
MASTER_ID: Final = 0


@dataclass(frozen=True, slots=True)
class ReadQueue:
    topic: str
    broker_name: str
    queue_id: int
    addr: str | None  # the group's master (broker id 0); None: no master now

    @property
    def partition(self) -> str:
        return f"{self.topic}/{self.broker_name}/{self.queue_id}"


def read_queues(route: Route) -> list[ReadQueue]:
    """The topic's read queues in RocketMQ consumer order, each with its group's master."""
    masters = {b.broker_name: b.addrs.get(MASTER_ID) for b in route.brokers}
    out: list[ReadQueue] = []
    for q in sorted(route.queues, key=lambda q: q.broker_name):
        if q.perm & PERM_READ:
            master = masters.get(q.broker_name)
            out.extend(
                ReadQueue(route.topic, q.broker_name, i, master) for i in range(q.read_queue_nums)
            )
    return out


def write_queues(route: Route) -> list[ReadQueue]:
    """The topic's write queues in RocketMQ producer order (the sinks' queue index: queue data
    with the WRITE bit sorted by broker name, then 0..writeQueueNums-1), each with its master
    (the destination side: where a queue index's consumer offsets live)."""
    masters = {b.broker_name: b.addrs.get(MASTER_ID) for b in route.brokers}
    out: list[ReadQueue] = []
    for q in sorted(route.queues, key=lambda q: q.broker_name):
        if q.perm & PERM_WRITE and q.broker_name in masters:
            master = masters[q.broker_name]
            out.extend(
                ReadQueue(route.topic, q.broker_name, i, master) for i in range(q.write_queue_nums)
            )
    return out


def _split(namesrv: str) -> list[str]:
    addrs = [a.strip() for a in namesrv.split(";") if a.strip()]
    if not addrs:
        raise ValueError(f"no nameserver address in {namesrv!r}")
    for addr in addrs:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"nameserver address {addr!r} is not host:port")
    return addrs


class ClusterClient:
    def __init__(
        self,
        namesrv: str,
        *,
        timeout_s: float = 5.0,
        group: str = DEFAULT_GROUP,
        credentials: SessionCredentials | None = None,
        namesrv_tls: ssl.SSLContext | None = None,
    ) -> None:
        """``credentials``: RocketMQ ACL 1.0 session credentials; every request to the
        nameserver is then signed as ``AclClientRPCHook`` signs it (the nameserver checks
        the ones that change state, e.g. PUT_KV_CONFIG). ``namesrv_tls``: reach the
        nameservers (not the brokers) over TLS, as a metaledger node's remoting port under
        ``--cert-file`` wants."""
        self.namesrv = _split(namesrv)
        self.credentials = credentials
        self.namesrv_tls = namesrv_tls
        self.timeout_s = timeout_s
        self.group = group  # the pulls' consumerGroup (subscription "*": no heartbeat needed)
        self._preferred = 0  # the nameserver that answered last
        self._conns: dict[str, RemotingConnection] = {}
        self._connecting: dict[str, asyncio.Future[RemotingConnection]] = {}

    # --- connections ---------------------------------------------------------------------

    async def _conn(self, addr: str) -> RemotingConnection:
        conn = self._conns.get(addr)
        if conn is not None and conn.usable:
            return conn
        pending = self._connecting.get(addr)
        if pending is None:  # one connect per address; a cancelled caller does not stop it
            pending = asyncio.ensure_future(self._open(addr))
            self._connecting[addr] = pending
        try:
            return await asyncio.shield(pending)
        except ConnectionFailure as exc:
            raise ClusterUnavailable(str(exc)) from None

    async def _open(self, addr: str) -> RemotingConnection:
        try:
            tls = self.namesrv_tls if addr in self.namesrv else None
            conn = await RemotingConnection.open(addr, self.timeout_s, tls)
            self._conns[addr] = conn
            return conn
        finally:
            del self._connecting[addr]

    async def call(
        self, addr: str, request: RemotingCommand, timeout_s: float | None = None
    ) -> RemotingCommand:
        """One request to ``addr``, its answer; no answer is :class:`ClusterUnavailable`."""
        conn = await self._conn(addr)
        try:
            return await conn.call(request, self.timeout_s if timeout_s is None else timeout_s)
        except ConnectionFailure as exc:
            raise ClusterUnavailable(str(exc)) from None

    async def _namesrv(self, request: RemotingCommand) -> RemotingCommand:
        if self.credentials is not None:
            ext = dict(request.ext_fields)
            self.credentials.sign(ext, request.body)
            request = request.replace(ext_fields=ext)
        failures: list[str] = []
        n = len(self.namesrv)
        for i in range(self._preferred, self._preferred + n):
            addr = self.namesrv[i % n]
            try:
                answer = await self.call(addr, request)
            except ClusterUnavailable as exc:
                failures.append(str(exc))
                continue
            self._preferred = i % n
            return answer
        raise ClusterUnavailable("no nameserver answered: " + "; ".join(failures))

    async def __aenter__(self) -> ClusterClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection; their outstanding calls fail with ClusterUnavailable."""
        for pending in list(self._connecting.values()):
            pending.cancel()
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            conn.close()
        await asyncio.sleep(0)  # let the transports' connection_lost run

    # --- nameserver ------------------------------------------------------------------------

    async def route(self, topic: str) -> Route:
        """The topic's route; :class:`TopicNotFound` when the nameserver has none."""
        return wire.parse_route(topic, await self._namesrv(wire.route_request(topic)))

    async def topics(self, cluster: str | None = None) -> list[str]:
        """Every topic the nameserver knows, or those of one cluster's brokers."""
        return wire.parse_topic_list(await self._namesrv(wire.topic_list_request(cluster)))

    async def brokers(self) -> list[BrokerGroup]:
        """Every broker group the nameserver knows (GET_BROKER_CLUSTER_INFO), by name."""
        return wire.parse_cluster_info(await self._namesrv(wire.cluster_info_request()))

    async def set_order_conf(self, topic: str, conf: str) -> None:
        """Mark ``topic`` orderly in the nameserver (``brokerName:queueNums;…``)."""
        wire.parse_ok(await self._namesrv(wire.order_conf_request(topic, conf)), "order conf")

    async def read_queues(self, topic: str) -> list[ReadQueue]:
        return read_queues(await self.route(topic))

    async def write_queues(self, topic: str) -> list[ReadQueue]:
        return write_queues(await self.route(topic))

    async def cluster_name(self) -> str:
        """The one RocketMQ cluster this nameserver serves (loop prevention's name for it);
        an error naming them when it serves several or none."""
        names = sorted({g.cluster for g in await self.brokers()})
        if len(names) != 1:
            raise RocketMQError(
                f"nameserver {';'.join(self.namesrv)} serves "
                + (f"clusters {', '.join(names)}" if names else "no broker")
                + ": name the cluster (--source-cluster / --dest-cluster)"
            )
        return names[0]

    def route_get(self, topic: str) -> Route:
        """Blocking ``route`` for ``sinks.routes.RouteSource``, with its errors: no route is
        ``nameserver.client.NotFound``, no answer ``Unavailable``, a bad one
        ``UnknownError`` (the sink turns every one into a retriable SinkUnavailable)."""
        failures: list[str] = []
        n = len(self.namesrv)
        start = self._preferred
        for i in range(start, start + n):
            addr = self.namesrv[i % n]
            try:
                answer = blocking_call(
                    addr, wire.route_request(topic), self.timeout_s, self.namesrv_tls
                )
            except (OSError, ProtocolError) as exc:
                failures.append(f"{addr}: {exc or 'timed out'}")
                continue
            try:
                return wire.parse_route(topic, answer)
            except TopicNotFound as exc:
                raise NotFound(str(exc), addr) from None
            except BadAnswer as exc:
                raise UnknownError(str(exc), addr) from None
            except RocketMQError as exc:  # e.g. SYSTEM_ERROR "name server not ready"
                failures.append(f"{addr}: {exc}")
        raise Unavailable("no nameserver answered: " + "; ".join(failures))

    # --- brokers ---------------------------------------------------------------------------

    @staticmethod
    def _addr(q: ReadQueue) -> str:
        if q.addr is None:
            raise ClusterUnavailable(f"broker group {q.broker_name} has no master")
        return q.addr

    async def pull(
        self,
        q: ReadQueue,
        offset: int,
        max_msgs: int = 32,
        suspend_ms: int = 15_000,
    ) -> wire.PullResult:
        """PULL_MESSAGE from ``offset`` (long polling up to ``suspend_ms``; the answer may
        take that long, so the timeout is ``suspend_ms`` + ``timeout_s``)."""
        request = wire.pull_request(self.group, q.topic, q.queue_id, offset, max_msgs, suspend_ms)
        answer = await self.call(self._addr(q), request, suspend_ms / 1000 + self.timeout_s)
        return wire.parse_pull(answer)

    async def min_offset(self, q: ReadQueue) -> int:
        return wire.parse_offset(
            await self.call(self._addr(q), wire.min_offset_request(q.topic, q.queue_id))
        )

    async def max_offset(self, q: ReadQueue) -> int:
        """The next offset to be written (the queue's entry count)."""
        return wire.parse_offset(
            await self.call(self._addr(q), wire.max_offset_request(q.topic, q.queue_id))
        )

    async def search_offset(self, q: ReadQueue, ts_ms: int) -> int:
        """The first offset whose store time is at or after ``ts_ms`` (max offset if none)."""
        request = wire.search_offset_request(q.topic, q.queue_id, ts_ms)
        return wire.parse_offset(await self.call(self._addr(q), request))

    async def consumer_offset(self, group: str, q: ReadQueue) -> int | None:
        """The group's committed offset on the queue's broker; None: it has none."""
        request = wire.query_consumer_offset_request(group, q.topic, q.queue_id)
        return wire.parse_consumer_offset(await self.call(self._addr(q), request))

    async def set_consumer_offset(self, group: str, q: ReadQueue, offset: int) -> None:
        request = wire.update_consumer_offset_request(group, q.topic, q.queue_id, offset)
        wire.parse_ok(await self.call(self._addr(q), request), "update consumer offset")

    async def create_topic(
        self,
        spec: wire.TopicSpec,
        *,
        cluster: str | None = None,
        brokers: Sequence[str] | None = None,
    ) -> None:
        """UPDATE_AND_CREATE_TOPIC (17) to every master: ``brokers`` (addresses) when given,
        else every group's master of ``cluster`` (all clusters when None) from the
        nameserver's cluster info. Each master registers the topic with the nameserver."""
        if brokers is None:
            groups = [g for g in await self.brokers() if cluster is None or g.cluster == cluster]
            brokers = [g.addrs[MASTER_ID] for g in groups if MASTER_ID in g.addrs]
        if not brokers:
            raise ClusterUnavailable(f"no broker master to create topic {spec.topic} on")
        request = wire.create_topic_request(spec)
        for addr in brokers:
            wire.parse_ok(await self.call(addr, request), f"create topic {spec.topic} on {addr}")
