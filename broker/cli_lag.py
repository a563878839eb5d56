"""``metaledger consumer lag --group G [--topic T]``: a consumer group's lag, per queue.

The masters come from metaledger: with ``--topic`` the topic's route (``Client.route_get``,
as ``send``/``consume``), else every master (broker id 0) of the cluster info. Each is asked
GET_CONSUME_STATS (208, :mod:`broker.admin.consume_stats`) over remoting; without
``--topic`` a broker answers for every topic the group has offsets of there. Pull, POP and
gRPC groups alike: per queue the broker offset, the consumer offset (a POP group's ``low``),
the messages in flight (popped, not acked), the lag (not consumed, in flight included) and
the lag in time (how much older the first message not consumed is than the newest, from the
broker's store times), then the totals (the lag in time: the largest). ``-w json`` prints one JSON document. Exit codes: 0,
3 (metaledger or a broker unreachable, or a broker refused), 4 (the topic has no route, or
no master answered anything).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
from functools import partial
from typing import TYPE_CHECKING, Any

from broker.cli_messages import EXIT_NOT_FOUND, EXIT_OK, EXIT_UNAVAILABLE, Connect
from rmq.codes import ResponseCode
from rmq.connection import RemotingConnection
from rmq.consume_stats import ConsumeStatsError, QueueOffsets, decode_consume_stats
from rmq.headers import GetConsumeStatsHeader

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["register_consumer", "run_lag"]


class LagFailed(Exception):
    """A broker unreachable, or an answer that is not SUCCESS with a ConsumeStats."""


def register_consumer(
    subparsers: Subparsers, parent: argparse.ArgumentParser, connect: Connect
) -> None:
    """``consumer lag`` on ``parent`` (the cluster options, ``--output``, ``--timeout``)."""
    c = subparsers.add_parser("consumer", help="consumer groups on the brokers")
    sub = c.add_subparsers(dest="consumer_command", required=True, metavar="COMMAND")
    lag = sub.add_parser(
        "lag",
        parents=[parent],
        help="a consumer group's lag per queue",
        description="Ask every master of the topic (or of the cluster) for the group's offsets"
        " (GET_CONSUME_STATS): broker offset, consumer offset, in flight and lag per queue.",
    )
    lag.add_argument("--group", required=True, help="the consumer group")
    lag.add_argument("--topic", metavar="T", help="only this topic (default: every topic)")
    lag.set_defaults(run=partial(run_lag, connect=connect))


def _masters(args: argparse.Namespace, connect: Connect) -> list[str]:
    from nameserver.client import OptionError

    try:
        connection = connect(args)
    except OptionError as exc:
        raise SystemExit(f"metaledger: {exc}") from None
    with connection.connect() as client:
        if args.topic:
            route = client.route_get(args.topic)
            names = {q.broker_name for q in route.queues if q.read_queue_nums > 0}
            addrs = [b.addrs.get(0) for b in route.brokers if b.broker_name in names]
        else:
            addrs = [b.addr for b in client.route_cluster_info().brokers if b.broker_id == 0]
    return sorted({a for a in addrs if a})


async def _ask(addr: str, header: GetConsumeStatsHeader, timeout_s: float) -> list[QueueOffsets]:
    host, _, port = addr.rpartition(":")
    try:
        conn = await RemotingConnection.connect(host, int(port))
        try:
            r = await conn.call(header.request(), timeout_s=timeout_s)
        finally:
            await conn.close()
    except OSError as exc:
        raise LagFailed(f"broker {addr}: {exc}") from None
    if r.code != ResponseCode.SUCCESS:
        raise LagFailed(f"broker {addr} answered code {r.code}: {r.remark}")
    try:
        rows, _tps = decode_consume_stats(r.body)
    except ConsumeStatsError as exc:
        raise LagFailed(f"broker {addr}: {exc}") from None
    return rows


def _when(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def report(group: str, rows: list[QueueOffsets]) -> dict[str, Any]:
    """The JSON document: per queue, then the totals."""
    queues = [
        {
            "broker": r.broker_name,
            "topic": r.topic,
            "queueId": r.queue_id,
            "brokerOffset": r.broker_offset,
            "consumerOffset": r.consumer_offset,
            "pullOffset": r.pull_offset,
            "inflight": r.inflight,
            "lag": r.lag,
            "lastTimestamp": r.last_timestamp,
            "nextTimestamp": r.next_timestamp,
            "newestTimestamp": r.newest_timestamp,
            "lagMs": r.lag_ms,
        }
        for r in rows
    ]
    return {
        "group": group,
        "queues": queues,
        "lag": sum(r.lag for r in rows),
        "inflight": sum(r.inflight for r in rows),
        "lagMs": max((r.lag_ms for r in rows), default=0),
    }


def lag_time(ms: int) -> str:
    """A lag in time for people, each unit cut (not rounded) to what is shown: ``0``,
    ``850ms``, ``12.3s``, ``4m05s``, ``2h03m`` (the console's page writes it the same)."""
    if ms < 1000:
        return f"{ms}ms" if ms else "0"
    if ms < 60_000:
        return f"{ms // 1000}.{ms // 100 % 10}s"
    s = ms // 1000
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s // 60 % 60:02d}m"


def print_table(doc: dict[str, Any]) -> None:
    head = ("BROKER", "TOPIC", "QUEUE", "BROKER_OFFSET", "CONSUMER_OFFSET", "INFLIGHT", "LAG",
            "LAG_TIME", "LAST_CONSUMED")  # fmt: skip
    lines = [head] + [
        (q["broker"], q["topic"], str(q["queueId"]), str(q["brokerOffset"]),
         str(q["consumerOffset"]), str(q["inflight"]), str(q["lag"]), lag_time(q["lagMs"]),
         _when(q["lastTimestamp"]))
        for q in doc["queues"]
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    print(f"total lag {doc['lag']} inflight {doc['inflight']} lag time {lag_time(doc['lagMs'])}")


def run_lag(args: argparse.Namespace, connect: Connect) -> int:
    from nameserver.client import ClientError, NotFound

    try:
        masters = _masters(args, connect)
    except NotFound:
        print(f"metaledger: consumer lag: topic {args.topic} has no route", file=sys.stderr)
        return EXIT_NOT_FOUND
    except ClientError as exc:
        print(f"metaledger: consumer lag: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if not masters:
        print("metaledger: consumer lag: no master to ask", file=sys.stderr)
        return EXIT_NOT_FOUND
    header = GetConsumeStatsHeader(args.group, args.topic or "")
    timeout_s = float(getattr(args, "timeout_s", 10.0))

    async def go() -> list[list[QueueOffsets]]:
        return await asyncio.gather(*(_ask(a, header, timeout_s) for a in masters))

    try:
        answers = asyncio.run(go())
    except LagFailed as exc:
        print(f"metaledger: consumer lag: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    rows = sorted(
        (r for rs in answers for r in rs), key=lambda r: (r.topic, r.broker_name, r.queue_id)
    )
    doc = report(args.group, rows)
    if getattr(args, "output", None) == "json":
        print(json.dumps(doc))
    else:
        print_table(doc)
    return EXIT_OK
