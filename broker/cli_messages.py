"""``metaledger send TOPIC ... BODY|-`` and ``metaledger consume TOPIC --group G ...``.

For a person at a terminal: the topic's route comes from metaledger (``Client.route_get``);
both then speak the remoting protocol to the brokers themselves (``rmq.connection``
over the shared codec), as a RocketMQ client would:

- send: SEND_MESSAGE (10) to the master (id 0) of a broker with writable queues, queue
  picked at random (``--fifo-group G``: the message's group, ``__SHARDINGKEY``, and one queue
  for all of G, :func:`broker.topics.message_group_queue`); prints the msgId, queue and offset. With ``--transaction commit|rollback``
  the message is a transaction's prepare, then END_TRANSACTION ends it on the same connection
  (:mod:`broker.transactions.client`).
  ``--deliver-at`` makes it a timer message (``TIMER_DELIVER_MS``:
  :func:`broker.timer.message.parse_deliver_at`).
- consume: per readable queue, QUERY_CONSUMER_OFFSET (22 → GET_MAX_OFFSET: only new
  messages, as CONSUME_FROM_LAST_OFFSET), then PULL_MESSAGE with long polling and the tag
  expression; prints each message and commits the offsets (UPDATE_CONSUMER_OFFSET) before
  leaving. Stops after ``--count`` messages, or without ``--count`` once no message came for
  ``--idle`` seconds after the last one; in any case after ``--wait`` seconds (exit 7 if
  fewer than ``--count`` came). ``--timeout`` is the deadline of each request to metaledger,
  as for every other command. ``--pop`` consumes by POP instead (:mod:`broker.cli_pop`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from broker.cli_pop import PopFailed, add_pop_flags, pop_consume, pop_flags_error
from broker.cli_print import print_message
from broker.timer.message import TIMER_DELIVER_MS, parse_deliver_at
from broker.topics import SHARDING_KEY, message_group_queue
from broker.transactions.client import PREPARED_SYSFLAG, end_request, mark_prepare
from nameserver.client import ConnectionOptions
from rmq.codes import RequestCode, ResponseCode
from rmq.connection import RemotingConnection
from rmq.headers import (
    DEFAULT_TOPIC,
    PullMessageHeader,
    QueryConsumerOffsetHeader,
    QueueHeader,
    SendMessageHeader,
    UnregisterClientHeader,
    UpdateConsumerOffsetHeader,
)
from rmq.message import MessageError, decode_records, properties_text
from rmq.msgid import offset_msg_id, uniq_key


class PullFailed(Exception):
    """A pull answered a code no consumer expects, or a record that does not decode."""


if TYPE_CHECKING:
    from nameserver.client import Route

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_NOT_FOUND, EXIT_TIMEOUT = 0, 1, 2, 3, 4, 7

#: the connection of a parsed command line (``Common.connection`` of :mod:`broker.cli`)
Connect = Callable[[argparse.Namespace], ConnectionOptions]


def register_messages(
    subparsers: Subparsers, parent: argparse.ArgumentParser, connect: Connect
) -> None:
    """``send`` and ``consume`` on ``parent`` (the cluster options, ``--timeout`` the request
    deadline as everywhere); ``connect`` reads what they parsed."""
    s = subparsers.add_parser("send", parents=[parent], help="send one message to a topic")
    s.add_argument("topic")
    s.add_argument("body", help="the message body, or - to read it from stdin (bytes as they are)")
    s.add_argument("--tags", default="")
    s.add_argument("--keys", default="")
    s.add_argument("--property", action="append", default=[], metavar="K=V", help="repeatable")
    s.add_argument("--producer-group", default="metaledger-cli")
    s.add_argument(
        "--transaction",
        choices=["commit", "rollback"],
        help="send it as a transaction's prepare, then commit or roll it back",
    )
    s.add_argument(
        "--deliver-at",
        metavar="WHEN",
        help="a timer message: delivered at WHEN: +10s (ms, s, m, h, d) from now, epoch ms, or"
        " ISO-8601 (2026-12-05T18:00:00Z; UTC without an offset); at most the broker's"
        " timerMaxDelaySec ahead (3 days)",
    )
    s.add_argument(
        "--fifo-group",
        metavar="G",
        help="the message's group (FIFO, property __SHARDINGKEY): every message of G goes to one"
        " queue, crc32(G) %% writeQueueNums (as the gRPC front places a 5.x FIFO message)",
    )
    s.set_defaults(run=partial(run_send, connect=connect))
    c = subparsers.add_parser("consume", parents=[parent], help="consume messages of a topic")
    c.add_argument("topic")
    c.add_argument("--group", required=True, help="the consumer group (its offsets are committed)")
    c.add_argument("--tags", default="*", metavar="EXPR", help='tag expression, e.g. "a || b"')
    c.add_argument(
        "--count",
        type=int,
        default=0,
        metavar="N",
        help="stop after N messages (default: once no message came for --idle seconds)",
    )
    c.add_argument(
        "--wait",
        dest="wait_s",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="stop after this long whatever came (default 10)",
    )
    c.add_argument(
        "--idle",
        dest="idle_s",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="without --count: stop once no message came for this long after the last (default 1)",
    )
    add_pop_flags(c)
    c.set_defaults(run=partial(run_consume, connect=connect))


def _route(args: argparse.Namespace, connect: Connect) -> Route:
    from nameserver.client import OptionError

    try:
        connection = connect(args)
    except OptionError as exc:
        raise SystemExit(f"metaledger: {exc}") from None
    with connection.connect() as client:
        return client.route_get(args.topic)


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def _properties(args: argparse.Namespace) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in args.property:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"metaledger: send: --property {item!r} is not K=V")
        props[key] = value
    if args.tags:
        props["TAGS"] = args.tags
    if args.keys:
        props["KEYS"] = args.keys
    if args.fifo_group:
        props[SHARDING_KEY] = args.fifo_group
    props["UNIQ_KEY"] = uniq_key()
    if args.deliver_at:
        try:
            props[TIMER_DELIVER_MS] = str(
                parse_deliver_at(args.deliver_at, int(time.time() * 1000))
            )
        except ValueError as exc:
            raise SystemExit(f"metaledger: send: --deliver-at {exc}") from None
    return props


def run_send(args: argparse.Namespace, connect: Connect) -> int:
    from nameserver.client import ClientError, NotFound

    body = sys.stdin.buffer.read() if args.body == "-" else args.body.encode()
    props = _properties(args)
    if args.transaction:
        mark_prepare(props, args.producer_group)
    try:
        route = _route(args, connect)
    except NotFound:
        print(f"metaledger: send: topic {args.topic} has no route", file=sys.stderr)
        return EXIT_NOT_FOUND
    except ClientError as exc:
        print(f"metaledger: send: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    masters = {b.broker_name: b.addrs.get(0) for b in route.brokers}
    targets = [
        (masters[q.broker_name], q.write_queue_nums)
        for q in route.queues
        if q.perm & 2 and q.write_queue_nums > 0 and masters.get(q.broker_name)
    ]
    if not targets:
        print(
            f"metaledger: send: topic {args.topic} has no writable queue on a master",
            file=sys.stderr,
        )
        return EXIT_NOT_FOUND
    if args.fifo_group:  # one broker group and one queue per message group
        targets.sort()
        addr, queues = targets[message_group_queue(args.fifo_group, len(targets))]
        queue_id = message_group_queue(args.fifo_group, queues)
    else:
        addr, queues = random.choice(targets)
        queue_id = random.randrange(queues)
    assert addr is not None
    header = SendMessageHeader(
        producer_group=args.producer_group,
        topic=args.topic,
        default_topic=DEFAULT_TOPIC,
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=PREPARED_SYSFLAG if args.transaction else 0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=properties_text(props),
        reconsume_times=0,
        unit_mode=False,
        batch=False,
    )

    async def go() -> Any:
        client = await RemotingConnection.connect(*_addr(addr))
        try:
            r = await client.call(header.request(body), timeout_s=10)
            if args.transaction and r.code == ResponseCode.SUCCESS:
                end = end_request(r, args.producer_group, args.transaction)
                return r, await client.call(end, timeout_s=10)
            return r, None
        finally:
            await client.close()

    try:
        r, ended = asyncio.run(go())
    except OSError as exc:  # rmq.connection's errors (TimeoutError included) are OSErrors
        print(f"metaledger: send: broker {addr}: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    doc = {
        "status": ResponseCode(r.code).name
        if r.code in ResponseCode._value2member_map_
        else r.code,
        "broker": addr,
        **r.ext_fields,
    }
    if r.code != ResponseCode.SUCCESS:
        print(
            f"metaledger: send: broker {addr} answered {doc['status']}: {r.remark}", file=sys.stderr
        )
        return EXIT_ERROR
    if ended is not None:
        doc["transaction"] = args.transaction
        if ended.code != ResponseCode.SUCCESS:
            print(
                f"metaledger: send: broker {addr} refused the {args.transaction}: {ended.remark}",
                file=sys.stderr,
            )
            return EXIT_ERROR
    if getattr(args, "output", None) == "json":
        print(json.dumps(doc))
    else:
        print(
            f"SEND_OK msgId={r.ext_fields.get('msgId')} queue={r.ext_fields.get('queueId')} "
            f"offset={r.ext_fields.get('queueOffset')} broker={addr}"
            + (f" transaction={args.transaction}" if ended is not None else "")
        )
    return EXIT_OK


@dataclass
class _Queue:
    addr: str
    queue_id: int
    offset: int = 0
    committed: int = -1


def run_consume(args: argparse.Namespace, connect: Connect) -> int:
    from nameserver.client import ClientError, NotFound

    wrong = pop_flags_error(args)
    if wrong is not None:
        print(f"metaledger: consume: {wrong}", file=sys.stderr)
        return EXIT_USAGE
    try:
        route = _route(args, connect)
    except NotFound:
        print(f"metaledger: consume: topic {args.topic} has no route", file=sys.stderr)
        return EXIT_NOT_FOUND
    except ClientError as exc:
        print(f"metaledger: consume: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    masters = {b.broker_name: b.addrs.get(0) for b in route.brokers}
    readable = [
        (q.broker_name, masters[q.broker_name] or "", i)
        for q in route.queues
        if q.perm & 4 and masters.get(q.broker_name)
        for i in range(q.read_queue_nums)
    ]
    if args.pop:
        consuming = pop_consume(args, readable)
    else:
        consuming = _consume(args, [_Queue(addr, i) for _name, addr, i in readable])
    try:
        got = asyncio.run(consuming)
    except (OSError, PullFailed, PopFailed) as exc:
        print(f"metaledger: consume: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return EXIT_OK if not args.count or got >= args.count else EXIT_TIMEOUT


async def _consume(args: argparse.Namespace, queues: list[_Queue]) -> int:
    clients: dict[str, RemotingConnection] = {}
    for q in queues:
        if q.addr not in clients:
            clients[q.addr] = await RemotingConnection.connect(*_addr(q.addr))
    deadline = time.monotonic() + args.wait_s
    state = {"n": 0, "last": 0.0}  # messages printed; when the last came (monotonic)
    done = asyncio.Event()
    json_out = getattr(args, "output", None) == "json"
    client_id = f"{socket.gethostname()}@{os.getpid()}"
    for c in clients.values():
        heartbeat = {"clientID": client_id, "consumerDataSet": [{
            "groupName": args.group, "consumeType": "CONSUME_ACTIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
            "subscriptionDataSet": [{"topic": args.topic, "subString": args.tags, "expressionType": "TAG"}]}]}  # fmt: skip
        await c.request(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())

    async def one(q: _Queue) -> None:
        c = clients[q.addr]
        r = await c.call(QueryConsumerOffsetHeader(args.group, args.topic, q.queue_id).request())
        if r.code == ResponseCode.SUCCESS:
            q.offset = int(r.ext_fields.get("offset", "0"))
        else:
            r = await c.call(QueueHeader(args.topic, q.queue_id).request())
            q.offset = int(r.ext_fields.get("offset", "0"))
        q.committed = q.offset
        while not done.is_set():
            now = time.monotonic()
            left = deadline - now
            if not args.count and state["n"]:  # stop once idle after the last message
                left = min(left, state["last"] + args.idle_s - now)
                if left <= 0:
                    done.set()
            if left <= 0:
                return
            pull = PullMessageHeader(
                consumer_group=args.group,
                topic=args.topic,
                queue_id=q.queue_id,
                queue_offset=q.offset,
                max_msg_nums=32,
                sys_flag=0x2 | 0x4,  # SUSPEND | SUBSCRIPTION
                commit_offset=0,
                suspend_timeout_ms=int(min(left, 1) * 1000),
                sub_version=0,
                subscription=args.tags,
                expression_type="TAG",
            )
            r = await c.call(pull.request(), timeout_s=left + 10)
            q.offset = int(r.ext_fields.get("nextBeginOffset", q.offset))
            if r.code != ResponseCode.SUCCESS:
                if r.code not in (
                    ResponseCode.PULL_NOT_FOUND,
                    ResponseCode.PULL_RETRY_IMMEDIATELY,
                    ResponseCode.PULL_OFFSET_MOVED,
                ):
                    raise PullFailed(f"pull from {q.addr}: code {r.code}: {r.remark}")
                continue
            try:
                pulled = decode_records(r.body)
            except MessageError as exc:
                raise PullFailed(f"pull from {q.addr}: bad record: {exc}") from None
            for m in pulled:
                if args.count and state["n"] >= args.count:
                    done.set()
                    return
                state["n"] += 1
                state["last"] = time.monotonic()
                q.committed = m.queue_offset + 1
                msg_id = offset_msg_id(m.store_host.ip, m.store_host.port, m.physical_offset)
                print_message(m, json_out, {"msgId": msg_id})
                if args.count and state["n"] >= args.count:
                    done.set()

    try:
        await asyncio.gather(*(one(q) for q in queues))
    finally:
        for q in queues:
            if q.committed >= 0:
                update = UpdateConsumerOffsetHeader(args.group, args.topic, q.queue_id, q.committed)
                await clients[q.addr].call(update.request())
        for c in clients.values():
            await c.call(UnregisterClientHeader(client_id, consumer_group=args.group).request())
            await c.close()
    return int(state["n"])
