"""The RocketMQ page's consumer groups, their online clients, and message lookup.

- **Groups**: every master of the cluster (broker id 0 in the cluster info) is asked
  GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201: every group it holds committed offsets, a POP book or
  a live consumer of); the names are paged (``limit`` a page, after ``cursor``), and only the
  page's groups are asked GET_CONSUME_STATS (208, as ``metaledger consumer lag``) and
  GET_CONSUMER_CONNECTION_LIST (203) on the masters that know them: lag in messages and in
  time, in flight, and the clients online.
- **Clients** of a group: GET_CONSUMER_CONNECTION_LIST on every master, remoting and gRPC
  consumers side by side, with protocol and version (the broker's ``clientProtocols``;
  CONSUMER_NOT_ONLINE from a master is "nobody here", not an error).
- **Producers** of a producer group: GET_PRODUCER_CONNECTION_LIST (204) on every master,
  remoting producers (their heartbeats) and gRPC producers (whose group is the topic they
  publish to) side by side, as the clients above (SYSTEM_ERROR "the producer group[G] not
  exist" from a master is "nobody here").
- **Lookup** of a message by key or id, as ``metaledger message get`` (broker/cli_lookup.py):
  QUERY_MESSAGE (12) on every master of the topic (by key, or by id as a client message id
  with ``_UNIQUE_KEY_QUERY``), then for an offset message id VIEW_MESSAGE_BY_ID (33) on the
  master of the group whose replica stored it (else the id's host).

A broker that does not answer is named in ``errors``; nothing raises past this module but
:class:`~console.errors.BadInput`, :class:`~console.errors.NotFound` and a metaledger client
error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from console.errors import BadInput, NotFound
from console.keys import MAX_PAGE
from console.rocketmq import PARALLEL, BrokerFailed, broker_call
from nameserver.client import Client
from rmq.codec import ProtocolError, RemotingCommand
from rmq.codes import RequestCode, ResponseCode, version_name
from rmq.connection import blocking_call
from rmq.consume_stats import ConsumeStatsError, decode_consume_stats
from rmq.headers import (
    GetConsumerConnectionListHeader,
    GetConsumeStatsHeader,
    GetProducerConnectionListHeader,
    QueryMessageHeader,
    ViewMessageHeader,
)
from rmq.message import MessageError, StoredMessage, decode, decode_records
from rmq.msgid import UNIQ_KEY, OffsetMsgId, offset_msg_id, parse_offset_msg_id

__all__ = ["find_messages", "group_clients", "group_page", "group_producers"]

T = TypeVar("T")
R = TypeVar("R")
FOREVER_MS = 2**62
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
#: messages a key lookup shows at most per master (``message get`` asks 32 too)
MAX_FOUND = 32
#: a body's first bytes shown
BODY_BYTES = 4096


def _parallel(fn: Callable[[T], R], items: list[T]) -> list[R]:
    with ThreadPoolExecutor(min(PARALLEL, max(1, len(items)))) as pool:
        return list(pool.map(fn, items))


def _masters(client: Client) -> dict[str, str]:
    """Address -> broker name of every master of the cluster."""
    info = client.route_cluster_info()
    return {b.addr: b.broker_name for b in info.brokers if b.broker_id == 0 and b.addr}


def _groups_of(addr: str, timeout_s: float) -> list[str]:
    r = _ask(addr, RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), timeout_s)
    if r.code != ResponseCode.SUCCESS:
        raise BrokerFailed(f"broker {addr} answered code {r.code}: {r.remark}")
    try:
        table = json.loads(r.body)["subscriptionGroupTable"]
        return sorted(str(name) for name in table)
    except (ValueError, LookupError, TypeError) as exc:
        raise BrokerFailed(f"broker {addr}: a group list that does not parse: {exc}") from None


def _connections(
    addr: str, group: str, timeout_s: float, producers: bool = False
) -> dict[str, Any] | None:
    """The group's ConsumerConnection (or ProducerConnection) on ``addr``; None when nobody
    of it is there."""
    if producers:
        request = GetProducerConnectionListHeader(group).request()
    else:
        request = GetConsumerConnectionListHeader(group).request()
    try:
        r = blocking_call(addr, request, timeout_s)
    except (OSError, ProtocolError, ValueError) as exc:
        raise BrokerFailed(f"broker {addr}: {exc or type(exc).__name__}") from None
    if r.code == ResponseCode.CONSUMER_NOT_ONLINE and not producers:
        return None
    if (
        producers
        and r.code == ResponseCode.SYSTEM_ERROR
        and (r.remark or "").endswith("] not exist")
    ):
        return None
    if r.code != ResponseCode.SUCCESS:
        raise BrokerFailed(f"broker {addr} answered code {r.code}: {r.remark}")
    try:
        doc = json.loads(r.body)
        if not isinstance(doc, dict):
            raise TypeError("not an object")
        return doc
    except (ValueError, TypeError) as exc:
        raise BrokerFailed(f"broker {addr}: a connection list that does not parse: {exc}") from None


def _clients(addr: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    protocols = doc.get("clientProtocols")
    protocols = protocols if isinstance(protocols, dict) else {}
    out = []
    for c in doc.get("connectionSet") or []:
        if not isinstance(c, dict):
            continue
        cid = str(c.get("clientId", ""))
        p = protocols.get(cid)
        p = p if isinstance(p, dict) else {}
        ordinal = c.get("version")
        out.append(
            {
                "client_id": cid,
                "address": str(c.get("clientAddr", "")),
                "language": str(c.get("language", "")),
                "protocol": str(p.get("protocol", "remoting")),
                "version": str(
                    p.get("version") or (version_name(ordinal) if isinstance(ordinal, int) else "?")
                ),
                "broker": addr,
            }
        )
    return out


def _connection_lists(
    client: Client, group: str, timeout_s: float, producers: bool
) -> tuple[list[str], list[dict[str, Any] | str | None]]:
    """Every master and its answer: the group's connection list, None, or why it failed."""
    if not group:
        raise BadInput("group is missing")
    masters = sorted(_masters(client))

    def one(addr: str) -> dict[str, Any] | str | None:
        try:
            return _connections(addr, group, timeout_s, producers)
        except BrokerFailed as exc:
            return str(exc)

    return masters, _parallel(one, masters)


def _by_client(
    masters: list[str], answers: list[dict[str, Any] | str | None]
) -> list[dict[str, Any]]:
    """The clients of every master's answer, once each, with the masters they are on."""
    by_id: dict[str, dict[str, Any]] = {}
    for addr, doc in zip(masters, answers, strict=True):
        for c in _clients(addr, doc) if isinstance(doc, dict) else []:
            seen = by_id.setdefault(c["client_id"], {**c, "brokers": []})
            seen["brokers"].append(addr)
    for c in by_id.values():
        c.pop("broker", None)
    return sorted(by_id.values(), key=lambda c: str(c["client_id"]))


def group_clients(client: Client, group: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Every client of ``group`` online on a master: its id, address, language, protocol and
    version, and the masters it is connected to; the group's consume type, message model and
    subscribed topics (remoting consumers'; gRPC consumers keep theirs in their settings)."""
    masters, answers = _connection_lists(client, group, timeout_s, producers=False)
    kinds: set[tuple[str, str]] = set()
    topics: set[str] = set()
    for doc in answers:
        if isinstance(doc, dict):
            kinds.add((str(doc.get("consumeType", "")), str(doc.get("messageModel", ""))))
            topics.update(str(t) for t in doc.get("subscriptionTable") or {})
    return {
        "group": group,
        "clients": _by_client(masters, answers),
        "consume_types": sorted(f"{k} / {m}" for k, m in kinds),
        "topics": sorted(topics),
        "masters": masters,
        "errors": [a for a in answers if isinstance(a, str)],
    }


def group_producers(client: Client, group: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Every producer of ``group`` online on a master: its id, address, language, protocol
    and version, and the masters it is connected to (a gRPC producer's group is the topic it
    publishes to)."""
    masters, answers = _connection_lists(client, group, timeout_s, producers=True)
    return {
        "group": group,
        "producers": _by_client(masters, answers),
        "masters": masters,
        "errors": [a for a in answers if isinstance(a, str)],
    }


def _summary(
    group: str, addrs: list[str], names: dict[str, str], timeout_s: float
) -> dict[str, Any]:
    """One group's row: lag, in flight, lag in time, clients online by protocol."""
    lag = inflight = lag_ms = 0
    clients: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    for addr in addrs:
        try:
            r = broker_call(addr, RequestCode.GET_CONSUME_STATS, GetConsumeStatsHeader(group, ""), timeout_s)  # fmt: skip
            rows, _tps = decode_consume_stats(r.body)
            lag += sum(q.lag for q in rows)
            inflight += sum(q.inflight for q in rows)
            lag_ms = max([lag_ms, *(q.lag_ms for q in rows)])
            doc = _connections(addr, group, timeout_s)
            for c in _clients(addr, doc or {}):
                clients.setdefault(c["client_id"], c)
        except BrokerFailed as exc:
            errors.append(str(exc))
        except ConsumeStatsError as exc:
            errors.append(f"broker {addr}: {exc}")
    kinds = sorted({f"{c['protocol']} {c['version']}" for c in clients.values()})
    return {
        "group": group,
        "brokers": sorted({names[a] for a in addrs}),
        "lag": lag,
        "inflight": inflight,
        "lag_ms": lag_ms,
        "clients": len(clients),
        "protocols": kinds,
        "errors": errors,
    }


def group_page(
    client: Client, cursor: str = "", limit: int = 50, query: str = "", timeout_s: float = 5.0
) -> dict[str, Any]:
    """Up to ``limit`` consumer groups named after ``cursor`` (containing ``query``) of every
    master, each with its lag, lag in time and clients online. ``next`` is the cursor of the
    next page, ``total`` the groups matching, ``errors`` the masters that did not answer."""
    if not 1 <= limit <= MAX_PAGE:
        raise BadInput(f"limit must be 1..{MAX_PAGE}")
    names = _masters(client)
    masters = sorted(names)

    def one(addr: str) -> list[str] | str:
        try:
            return _groups_of(addr, timeout_s)
        except BrokerFailed as exc:
            return str(exc)

    answers = _parallel(one, masters)
    where: dict[str, list[str]] = {}
    for addr, groups in zip(masters, answers, strict=True):
        for g in groups if isinstance(groups, list) else []:
            if query in g:
                where.setdefault(g, []).append(addr)
    ordered = sorted(where)
    after = [g for g in ordered if g > cursor] if cursor else ordered
    page, rest = after[:limit], after[limit:]
    rows = _parallel(lambda g: _summary(g, where[g], names, timeout_s), page)
    return {
        "total": len(ordered),
        "groups": rows,
        "next": page[-1] if rest else None,
        "masters": masters,
        "errors": [a for a in answers if isinstance(a, str)],
    }


def _message(m: StoredMessage, broker: str) -> dict[str, Any]:
    """A found message, with the fields ``metaledger message get --json`` prints."""
    body = m.body[:BODY_BYTES]
    try:
        text: str | None = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {
        "topic": m.topic,
        "queue": m.queue_id,
        "queue_offset": m.queue_offset,
        "msg_id": offset_msg_id(m.store_host.ip, m.store_host.port, m.physical_offset),
        "uniq_key": m.properties.get(UNIQ_KEY, ""),
        "tags": m.tags,
        "keys": m.keys,
        "store_timestamp": m.store_timestamp,
        "store_host": f"{m.store_host.ip}:{m.store_host.port}",
        "born_timestamp": m.born_timestamp,
        "born_host": f"{m.born_host.ip}:{m.born_host.port}",
        "commit_log_offset": m.physical_offset,
        "broker": broker,
        "properties": dict(sorted(m.properties.items())),
        "body_size": len(m.body),
        "body": text,
        "body_hex": body.hex() if text is None else None,
    }


def _ask(addr: str, request: Any, timeout_s: float) -> Any:
    try:
        return blocking_call(addr, request, timeout_s)
    except (OSError, ProtocolError, ValueError) as exc:
        raise BrokerFailed(f"broker {addr}: {exc or type(exc).__name__}") from None


def _query(
    masters: list[str], topic: str, key: str, by_id: bool, timeout_s: float
) -> tuple[list[tuple[str, StoredMessage]], list[str]]:
    request = QueryMessageHeader(topic, key, MAX_FOUND, 0, FOREVER_MS).request()
    if by_id:
        request.ext_fields[UNIQUE_KEY_QUERY] = "true"

    def one(addr: str) -> list[tuple[str, StoredMessage]] | str:
        try:
            r = _ask(addr, request, timeout_s)
            if r.code != ResponseCode.SUCCESS:
                return []  # QUERY_NOT_FOUND: nothing here
            return [(addr, m) for m in decode_records(r.body, inflate=True)]
        except BrokerFailed as exc:
            return str(exc)
        except MessageError as exc:
            return f"broker {addr}: a record that does not decode: {exc}"

    answers = _parallel(one, masters)
    found = [f for a in answers if isinstance(a, list) for f in a]
    return found, [a for a in answers if isinstance(a, str)]


def _view(
    where: OffsetMsgId, groups: list[tuple[str, list[str]]], topic: str, timeout_s: float
) -> tuple[list[tuple[str, StoredMessage]], list[str]]:
    stored_by = f"{where.ip}:{where.port}" if ":" not in where.ip else f"[{where.ip}]:{where.port}"
    asked = [m for m, addrs in groups if m and stored_by in addrs] or [stored_by]
    errors = []
    for addr in asked:
        try:
            r = _ask(addr, ViewMessageHeader(where.offset).request(), timeout_s)
            if r.code != ResponseCode.SUCCESS:
                continue
            m = decode(r.body, inflate=True)
        except BrokerFailed as exc:
            errors.append(str(exc))
            continue
        except MessageError as exc:
            errors.append(f"broker {addr}: a record that does not decode: {exc}")
            continue
        same_host = (m.store_host.ip, m.store_host.port) == (where.ip, where.port)
        if same_host and (not topic or m.topic == topic):
            return [(addr, m)], errors
    return [], errors


def find_messages(
    client: Client, topic: str = "", key: str = "", msg_id: str = "", timeout_s: float = 5.0
) -> dict[str, Any]:
    """The messages of ``topic`` whose keys hold ``key``, or the message of id ``msg_id`` (a
    client message id, UNIQ_KEY, with ``topic``; or an offset message id, with or without),
    as ``metaledger message get`` finds them. BadInput for a malformed request, NotFound
    when nothing is found (naming what was looked for and the brokers that did not answer)."""
    topic, key, msg_id = topic.strip(), key.strip(), msg_id.strip()
    if bool(key) == bool(msg_id):
        raise BadInput("give a message key or a message id (one of them)")
    if key and not topic:
        raise BadInput("a lookup by key needs the topic")
    where: OffsetMsgId | None = None
    if msg_id:
        try:
            where = parse_offset_msg_id(msg_id)
        except ValueError as exc:
            if not topic:
                raise BadInput(
                    f"{exc}; give the topic to look it up as a client message id (UNIQ_KEY)"
                ) from None
    groups: list[tuple[str, list[str]]] = []
    if topic:
        route = client.route_get(topic)
        groups = [(b.addrs.get(0, ""), list(b.addrs.values())) for b in route.brokers]
    masters = sorted({m for m, _ in groups if m})
    found: list[tuple[str, StoredMessage]] = []
    errors: list[str] = []
    if topic:
        found, errors = _query(masters, topic, key or msg_id, not key, timeout_s)
    if not found and where is not None:
        found, more = _view(where, groups, topic, timeout_s)
        errors += more
    if not found:
        what = f"key {key!r}" if key else f"id {msg_id!r}"
        detail = f"no message with {what}" + (f" in topic {topic}" if topic else "")
        if errors:
            detail += f" ({'; '.join(errors)})"
        raise NotFound(detail)
    found.sort(key=lambda f: (f[1].store_timestamp, f[1].queue_id, f[1].queue_offset))
    return {
        "topic": topic,
        "key": key,
        "id": msg_id,
        "messages": [_message(m, addr) for addr, m in found],
        "errors": errors,
    }
