"""The console's RocketMQ page: topics with their routes, each queue's min/max offset,
brokers, replica groups (with each replica's acknowledged offset, from its master's
GET_BROKER_RUNTIME_INFO, 28) and a consumer group's lag per queue (in messages and in time); the
groups list, online clients and message lookup are :mod:`console.rocketmq_groups`.

Routes, brokers and replica groups come from metaledger (``Client.route_topics``,
``route_get``, ``route_cluster_info``, ``replica_groups``: what ``metaledger route get``,
``route brokers`` and ``replica-group list`` ask). The offsets come from the brokers over
their remoting admin codes, as ``metaledger consume`` and ``metaledger consumer lag`` ask
them: GET_MIN_OFFSET (31) and GET_MAX_OFFSET (30) per queue of the topic's masters, and
GET_CONSUME_STATS (208) of the group on every master (of the topic's route, else of the
cluster). A broker that does not answer is named in ``errors`` with why; its queues show no
offsets, and nothing raises past this module but a metaledger client error.

Topics are paged by name: ``route_topics`` answers the names only, and only the page's
routes are read, so 1,000 topics cost one list and ``limit`` route reads per page.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from console.errors import BadInput
from console.keys import MAX_PAGE
from nameserver.client import Client
from rmq.codec import ProtocolError, RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.connection import blocking_call
from rmq.consume_stats import ConsumeStatsError, QueueOffsets, decode_consume_stats
from rmq.headers import GetConsumeStatsHeader, QueueHeader

__all__ = ["brokers", "consumer_lag", "queue_offsets", "replica_groups", "topic_page"]

#: brokers asked at once
PARALLEL = 8
#: a master's runtime info row per slave: its acknowledged offset (broker/admin/processor.py)
SLAVE_ACK = "slaveAckOffset_"


class BrokerFailed(Exception):
    """A broker that did not answer, or answered something else than SUCCESS."""


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise BadInput(f"limit must be 1..{MAX_PAGE}")


def topic_page(
    client: Client, cursor: str = "", limit: int = 50, query: str = "", system: bool = False
) -> dict[str, Any]:
    """Up to ``limit`` topics named after ``cursor`` (containing ``query``), each with its
    route: per broker group its addresses, read/write queues and perm. ``next`` is the
    cursor of the next page, ``total`` the topics matching."""
    _check_limit(limit)
    names = sorted(t for t in client.route_topics("", system).topics if query in t)
    after = [t for t in names if t > cursor] if cursor else names
    page, rest = after[:limit], after[limit:]
    topics = []
    for name in page:
        r = client.route_get(name)
        addrs = {b.broker_name: b.addrs for b in r.brokers}
        topics.append(
            {
                "topic": name,
                "queues": [
                    {
                        "broker": q.broker_name,
                        "addrs": {
                            str(i): a for i, a in sorted(addrs.get(q.broker_name, {}).items())
                        },
                        "read": q.read_queue_nums,
                        "write": q.write_queue_nums,
                        "perm": q.perm,
                    }
                    for q in r.queues
                ],
            }
        )
    return {"total": len(names), "topics": topics, "next": page[-1] if rest else None}


def broker_call(addr: str, code: int, header: Any, timeout_s: float) -> Any:
    try:
        r = blocking_call(addr, header.request(code=code), timeout_s)
    except (OSError, ProtocolError, ValueError) as exc:
        raise BrokerFailed(f"broker {addr}: {exc or type(exc).__name__}") from None
    if r.code != ResponseCode.SUCCESS:
        raise BrokerFailed(f"broker {addr} answered code {r.code}: {r.remark}")
    return r


def _offset(addr: str, code: int, topic: str, queue_id: int, timeout_s: float) -> int:
    r = broker_call(addr, code, QueueHeader(topic, queue_id), timeout_s)
    try:
        return int(r.ext_fields.get("offset", "0"))
    except ValueError:
        raise BrokerFailed(f"broker {addr}: offset {r.ext_fields.get('offset')!r}") from None


def _broker_queues(addr: str, topic: str, n: int, timeout_s: float) -> list[dict[str, int]]:
    return [
        {
            "queue": q,
            "min": _offset(addr, RequestCode.GET_MIN_OFFSET, topic, q, timeout_s),
            "max": _offset(addr, RequestCode.GET_MAX_OFFSET, topic, q, timeout_s),
        }
        for q in range(n)
    ]


def queue_offsets(client: Client, topic: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Each queue of ``topic`` on each broker group's master (broker id 0): its min and max
    offset (``max - min`` messages are held). A group without a master or whose master
    does not answer has ``error`` instead of queues."""
    if not topic:
        raise BadInput("topic is missing")
    r = client.route_get(topic)
    masters = {b.broker_name: b.addrs.get(0, "") for b in r.brokers}
    work = [(q.broker_name, masters.get(q.broker_name, ""), max(q.read_queue_nums, q.write_queue_nums)) for q in r.queues]  # fmt: skip

    def one(item: tuple[str, str, int]) -> dict[str, Any]:
        name, addr, n = item
        out: dict[str, Any] = {"broker": name, "addr": addr}
        if not addr:
            out["error"] = f"broker group {name} has no master in the route"
            return out
        try:
            out["queues"] = _broker_queues(addr, topic, n, timeout_s)
        except BrokerFailed as exc:
            out["error"] = str(exc)
        return out

    with ThreadPoolExecutor(min(PARALLEL, max(1, len(work)))) as pool:
        groups = list(pool.map(one, work))
    return {"topic": topic, "brokers": groups, "apply_offset": r.apply_offset}


def brokers(client: Client) -> dict[str, Any]:
    """Every broker registered, as ``metaledger route brokers`` lists them."""
    info = client.route_cluster_info()
    return {
        "brokers": [
            {
                "cluster": b.cluster,
                "broker": b.broker_name,
                "id": b.broker_id,
                "addr": b.addr,
                "ha_addr": b.ha_addr,
                "zone": b.zone,
                "timeout_ms": b.heartbeat_timeout_ms,
            }
            for b in sorted(info.brokers, key=lambda b: (b.cluster, b.broker_name, b.broker_id))
        ],
        "apply_offset": info.apply_offset,
    }


def acked_offsets(addr: str, timeout_s: float) -> dict[int, int]:
    """What a master's GET_BROKER_RUNTIME_INFO says of each replica's acknowledged offset:
    ``slaveAckOffset_<id>`` of each slave connected to it, and for itself (id 0 in these
    keys: the master's own) its ``commitLogMaxOffset``."""
    try:
        r = blocking_call(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), timeout_s)  # fmt: skip
    except (OSError, ProtocolError, ValueError) as exc:
        raise BrokerFailed(f"broker {addr}: {exc or type(exc).__name__}") from None
    if r.code != ResponseCode.SUCCESS:
        raise BrokerFailed(f"broker {addr} answered code {r.code}: {r.remark}")
    try:
        table = json.loads(r.body)["table"]
        out = {0: int(table["commitLogMaxOffset"])}
        for key, value in table.items():
            if key.startswith(SLAVE_ACK):
                out[int(key.removeprefix(SLAVE_ACK))] = int(value)
        return out
    except (ValueError, LookupError, TypeError) as exc:
        raise BrokerFailed(f"broker {addr}: a runtime info that does not parse: {exc}") from None


def replica_groups(client: Client, timeout_s: float = 5.0) -> dict[str, Any]:
    """Every replica group: master and its epoch, the in-sync set and its epoch, the quorum
    policy and each replica (alive, in sync), as ``metaledger replica-group show``; and each
    replica's acknowledged offset (``acked``, None when its master does not know it) as the
    master's runtime info gives it, or the master's failure in ``acked_error``."""
    listed = client.replica_groups()

    def acks(addr: str) -> dict[int, int] | str:
        if not addr:
            return "no master"
        try:
            return acked_offsets(addr, timeout_s)
        except BrokerFailed as exc:
            return str(exc)

    with ThreadPoolExecutor(min(PARALLEL, max(1, len(listed)))) as pool:
        answers = list(pool.map(acks, [g.master_address if g.master_id else "" for g in listed]))
    groups = []
    for g, answer in zip(listed, answers, strict=True):
        acked = answer if isinstance(answer, dict) else {}
        p = g.policy
        groups.append(
            {
                "group": g.broker_name,
                "cluster": g.cluster_name,
                "master_id": g.master_id,
                "master_address": g.master_address,
                "master_epoch": g.master_epoch,
                "in_sync": list(g.sync_state_set),
                "in_sync_epoch": g.sync_state_set_epoch,
                "policy": {
                    "total_replicas": p.total_replicas,
                    "in_sync_replicas": p.in_sync_replicas,
                    "min_in_sync_replicas": p.min_in_sync_replicas,
                    "auto_in_sync": p.enable_auto_in_sync_replicas,
                },
                "replicas": [
                    {
                        "id": r.broker_id,
                        "address": r.address,
                        "role": "master" if r.broker_id == g.master_id else "slave",
                        "alive": r.alive,
                        "in_sync": r.in_sync,
                        "acked": acked.get(0 if r.broker_id == g.master_id else r.broker_id),
                    }
                    for r in g.replicas
                ],
                "acked_error": answer if isinstance(answer, str) else None,
            }
        )
    return {"groups": groups}


def _lag_rows(addr: str, group: str, topic: str, timeout_s: float) -> list[QueueOffsets]:
    r = broker_call(
        addr, RequestCode.GET_CONSUME_STATS, GetConsumeStatsHeader(group, topic), timeout_s
    )
    try:
        rows, _tps = decode_consume_stats(r.body)
    except ConsumeStatsError as exc:
        raise BrokerFailed(f"broker {addr}: {exc}") from None
    return rows


def consumer_lag(
    client: Client, group: str, topic: str = "", timeout_s: float = 5.0
) -> dict[str, Any]:
    """The group's offsets per queue on every master (of ``topic``'s route, else of the
    cluster), as ``metaledger consumer lag``: broker offset (max), committed offset, in
    flight, lag in messages and in time (the store time of the first message not consumed
    against the newest's; ``lag_ms`` of the whole group is the largest); ``errors`` names the masters that did not answer."""
    if not group:
        raise BadInput("group is missing")
    if topic:
        route = client.route_get(topic)
        names = {q.broker_name for q in route.queues if q.read_queue_nums > 0}
        addrs = [b.addrs.get(0, "") for b in route.brokers if b.broker_name in names]
    else:
        addrs = [b.addr for b in client.route_cluster_info().brokers if b.broker_id == 0]
    masters = sorted({a for a in addrs if a})

    def one(addr: str) -> list[QueueOffsets] | str:
        try:
            return _lag_rows(addr, group, topic, timeout_s)
        except BrokerFailed as exc:
            return str(exc)

    with ThreadPoolExecutor(min(PARALLEL, max(1, len(masters)))) as pool:
        answers = list(pool.map(one, masters))
    rows = sorted(
        (r for a in answers if not isinstance(a, str) for r in a),
        key=lambda r: (r.topic, r.broker_name, r.queue_id),
    )
    return {
        "group": group,
        "topic": topic,
        "queues": [
            {
                "broker": r.broker_name,
                "topic": r.topic,
                "queue": r.queue_id,
                "broker_offset": r.broker_offset,
                "consumer_offset": r.consumer_offset,
                "inflight": r.inflight,
                "lag": r.lag,
                "last_timestamp": r.last_timestamp,
                "next_timestamp": r.next_timestamp,
                "newest_timestamp": r.newest_timestamp,
                "lag_ms": r.lag_ms,
            }
            for r in rows
        ],
        "lag": sum(r.lag for r in rows),
        "lag_ms": max((r.lag_ms for r in rows), default=0),
        "inflight": sum(r.inflight for r in rows),
        "masters": masters,
        "errors": [a for a in answers if isinstance(a, str)],
    }
