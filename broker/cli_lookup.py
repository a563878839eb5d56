"""``metaledger message get --id ID | --key KEY --topic T``: find stored messages.

The route of ``--topic`` comes from metaledger (``Client.route_get``); the command then asks
each master of the topic's groups over the remoting protocol, as RocketMQ's ``mqadmin
queryMsgByKey``/``queryMsgById`` do:

- ``--key KEY --topic T``: QUERY_MESSAGE (12) on every master; the messages whose KEYS hold it.
- ``--id ID --topic T``: QUERY_MESSAGE with ``_UNIQUE_KEY_QUERY`` (the id as a client message
  id, UNIQ_KEY); when no master has it and the id is an offset message id (store host and
  commit-log offset, :func:`rmq.msgid.parse_offset_msg_id`), VIEW_MESSAGE_BY_ID (33) on the
  master of the group whose replica stored it (the id's host), else on that host itself.
- ``--id ID`` alone: ID must be an offset message id; its host is asked.

Each message is printed with its body (as ``metaledger consume`` prints bodies), properties,
queue, queue offset, store time and host; ``--json`` (or ``--output json``) prints one JSON
object a line. Exit codes: 0 found, 4 nothing found, 3 metaledger or a broker unreachable,
2 bad input (a malformed id, ``--key`` without ``--topic``).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime
import json
import sys
from functools import partial
from typing import TYPE_CHECKING, Any

from broker.cli_messages import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    Connect,
    _route,
)
from broker.cli_print import _printable
from rmq.codes import ResponseCode
from rmq.connection import RemotingConnection
from rmq.headers import QueryMessageHeader, ViewMessageHeader
from rmq.message import MessageError, StoredMessage, decode, decode_records
from rmq.msgid import UNIQ_KEY, OffsetMsgId, offset_msg_id, parse_offset_msg_id

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

EXIT_USAGE = 2
FOREVER_MS = 2**62
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


class Unusable(Exception):
    """Bad input: the message says which option and why (exit 2)."""


def register_lookup(
    subparsers: Subparsers, parent: argparse.ArgumentParser, connect: Connect
) -> None:
    """``message get`` on ``parent`` (the cluster options, ``--timeout``)."""
    m = subparsers.add_parser("message", help="look up stored messages")
    sub = m.add_subparsers(dest="message_command", required=True, metavar="COMMAND")
    g = sub.add_parser(
        "get",
        help="find messages by message id or key",
        description="Find messages by message id (a client id, UNIQ_KEY, or an offset message"
        " id) or by key, asking each master of the topic's groups.",
    )
    _add_common(g, parent)
    which = g.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", dest="msg_id", metavar="ID", help="a message id")
    which.add_argument("--key", metavar="KEY", help="a message key (needs --topic)")
    g.add_argument("--topic", metavar="T", help="the topic (needed with --key)")
    g.add_argument("--json", action="store_true", help="one JSON object a line")
    g.set_defaults(run=partial(run_get, connect=connect))


def _add_common(parser: argparse.ArgumentParser, parent: argparse.ArgumentParser) -> None:
    """The cluster options of ``parent`` on ``parser``, the TLS ``--key`` as ``--tls-key``
    (``--key`` is the message key here). Copies: the parent's actions are shared with every
    other command and stay as they are."""
    for action in parent._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if "--key" in action.option_strings:
            action = copy.copy(action)
            action.option_strings = ["--tls-key"]
            action.help = "the key of --cert (--key in other commands)"
        parser._add_action(action)


def run_get(args: argparse.Namespace, connect: Connect) -> int:
    from nameserver.client import ClientError, NotFound

    try:
        if args.key is not None and not args.topic:
            raise Unusable("--key needs --topic")
        where = _offset_id(args.msg_id) if args.msg_id is not None else None
        if args.msg_id is not None and where is None and not args.topic:
            raise Unusable(
                f"--id {args.msg_id!r} is not an offset message id (32 or 56 hex digits:"
                " store host and commit-log offset); give --topic to look it up as a client"
                " message id (UNIQ_KEY)"
            )
    except Unusable as exc:
        print(f"metaledger: message get: {exc}", file=sys.stderr)
        return EXIT_USAGE
    groups: list[tuple[str | None, list[str]]] = []  # (master, every replica's address)
    if args.topic:
        try:
            route = _route(args, connect)
        except NotFound:
            print(f"metaledger: message get: topic {args.topic} has no route", file=sys.stderr)
            return EXIT_NOT_FOUND
        except ClientError as exc:
            print(f"metaledger: message get: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        groups = [(b.addrs.get(0), list(b.addrs.values())) for b in route.brokers]
    try:
        found = asyncio.run(_find(args, groups, where))
    except OSError as exc:  # rmq.connection's errors (TimeoutError included) are OSErrors
        print(f"metaledger: message get: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if not found:
        what = f"key {args.key!r}" if args.key is not None else f"id {args.msg_id!r}"
        topic = f" in topic {args.topic}" if args.topic else ""
        print(f"metaledger: message get: no message with {what}{topic}", file=sys.stderr)
        return EXIT_NOT_FOUND
    json_out = args.json or getattr(args, "output", None) == "json"
    for broker, m in found:
        _print(m, broker, json_out)
    return EXIT_OK


def _offset_id(text: str) -> OffsetMsgId | None:
    try:
        return parse_offset_msg_id(text)
    except ValueError:
        return None


async def _ask(addr: str, request: Any, timeout_s: float) -> Any:
    host, _, port = addr.rpartition(":")
    client = await RemotingConnection.connect(host.strip("[]"), int(port), timeout_s=timeout_s)
    try:
        return await client.call(request, timeout_s=timeout_s)
    finally:
        await client.close()


async def _find(
    args: argparse.Namespace,
    groups: list[tuple[str | None, list[str]]],
    where: OffsetMsgId | None,
) -> list[tuple[str, StoredMessage]]:
    timeout_s = float(getattr(args, "timeout", None) or 10.0)
    masters = [master for master, _ in groups if master]
    key = args.key if args.key is not None else args.msg_id
    if args.topic:
        query = QueryMessageHeader(args.topic, key, 32, 0, FOREVER_MS).request()
        if args.key is None:
            query.ext_fields[UNIQUE_KEY_QUERY] = "true"
        answers = await asyncio.gather(*(_ask(a, query, timeout_s) for a in masters))
        found: list[tuple[str, StoredMessage]] = []
        for addr, r in zip(masters, answers, strict=True):
            if r.code != ResponseCode.SUCCESS:
                continue
            try:
                found.extend((addr, m) for m in decode_records(r.body, inflate=True))
            except MessageError as exc:
                raise OSError(f"broker {addr}: a record that does not decode: {exc}") from None
        if found or where is None:
            return found
    assert where is not None
    stored_by = f"{where.ip}:{where.port}" if ":" not in where.ip else f"[{where.ip}]:{where.port}"
    asked = [m for m, addrs in groups if m and stored_by in addrs] or [stored_by]
    for addr in asked:
        r = await _ask(addr, ViewMessageHeader(where.offset).request(), timeout_s)
        if r.code != ResponseCode.SUCCESS:
            continue
        try:
            m = decode(r.body, inflate=True)
        except MessageError as exc:
            raise OSError(f"broker {addr}: a record that does not decode: {exc}") from None
        same_host = (m.store_host.ip, m.store_host.port) == (where.ip, where.port)
        if same_host and (not args.topic or m.topic == args.topic):
            return [(addr, m)]
    return []


def _when(ms: int) -> str:
    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _print(m: StoredMessage, broker: str, json_out: bool) -> None:
    msg_id = offset_msg_id(m.store_host.ip, m.store_host.port, m.physical_offset)
    doc = {
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "msgId": msg_id,
        "uniqKey": m.properties.get(UNIQ_KEY, ""),
        "tags": m.tags,
        "keys": m.keys,
        "storeTimestamp": m.store_timestamp,
        "storeHost": f"{m.store_host.ip}:{m.store_host.port}",
        "bornTimestamp": m.born_timestamp,
        "bornHost": f"{m.born_host.ip}:{m.born_host.port}",
        "commitLogOffset": m.physical_offset,
        "broker": broker,
        "properties": dict(m.properties),
        "body": _printable(m.body),
    }
    if json_out:
        print(json.dumps(doc), flush=True)
        return
    props = " ".join(f"{k}={v}" for k, v in sorted(m.properties.items()))
    print(
        f"{m.topic} q{m.queue_id}@{m.queue_offset} msgId={msg_id} uniqKey={doc['uniqKey']}\n"
        f"  stored {_when(m.store_timestamp)} on {doc['storeHost']} (commit log"
        f" {m.physical_offset}), born {_when(m.born_timestamp)} on {doc['bornHost']}\n"
        f"  properties: {props}\n"
        f"  body: {doc['body']}",
        flush=True,
    )
