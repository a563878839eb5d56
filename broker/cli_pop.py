"""``metaledger consume TOPIC --group G --pop [--invisible SECONDS] [--fifo]``: consume by POP.

As a RocketMQ 5 remoting POP consumer: per readable queue of each master of the topic's
route, POP_MESSAGE (200050, ``initMode`` MAX as the gRPC proxy: a new group starts at a
young queue's beginning, else at its end) with long polling, the tag expression and
``invisibleTime`` = ``--invisible``; each message is printed with its attempt (1 on the first
delivery) and its message group (``__SHARDINGKEY``), then acked (ACK_MESSAGE, 200051) with
the handle the client builds from the answer's header (:class:`broker.pop.handle.Handle`, as
RocketMQ's ``ExtraInfoUtil``). No offset is kept by the client: the broker's book is the
group's progress (its ``low`` is the group's consumer offset). ``--fifo`` is an orderly pop
(``order``): a queue hands out nothing new while one of its messages is in flight, so one
message group comes in order. ``--count``, ``--wait`` and ``--idle`` stop it as they stop a
pull consume (:mod:`broker.cli_messages`).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from broker.cli_print import print_message
from broker.pop.handle import NORMAL_TOPIC, Handle
from broker.topics import SHARDING_KEY
from rmq.codes import ResponseCode
from rmq.connection import RemotingConnection
from rmq.headers import AckMessageHeader, PopMessageHeader
from rmq.message import MessageError, StoredMessage, decode_records

__all__ = ["PopFailed", "add_pop_flags", "pop_consume", "pop_flags_error"]

INIT_MAX = 1  # RocketMQ's ConsumeInitMode.MAX
MAX_BATCH = 32
#: POP answers that mean "nothing now": POLLING_TIMEOUT (210), PULL_NOT_FOUND (19)
NOTHING = (210, 19)


class PopFailed(Exception):
    """A pop or an ack answered a code no consumer expects, or a record that does not decode."""


def add_pop_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pop",
        action="store_true",
        help="consume by POP_MESSAGE + ACK_MESSAGE (the broker keeps the group's progress)",
    )
    parser.add_argument(
        "--invisible",
        dest="invisible_s",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --pop: a popped message is delivered again after this long unless acked"
        " (default 60)",
    )
    parser.add_argument(
        "--fifo",
        action="store_true",
        help="with --pop: an orderly pop (one message group in order)",
    )


def pop_flags_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the POP flags given (``--invisible``/``--fifo`` need ``--pop``);
    fills in ``--invisible``'s default."""
    if not args.pop and (args.invisible_s is not None or args.fifo):
        return "--invisible and --fifo need --pop (a pull consumer has no invisible time)"
    if args.invisible_s is None:
        args.invisible_s = 60.0
    if args.invisible_s <= 0:
        return f"--invisible {args.invisible_s:g}: must be above 0 seconds"
    return None


def _start_offsets(info: str) -> dict[int, int]:
    """queue id -> start offset of a POP answer's ``startOffsetInfo`` ("<retry> <q> <start>;…")."""
    out = {}
    for item in info.split(";"):
        parts = item.split(" ")
        if len(parts) == 3 and parts[1].lstrip("-").isdigit() and parts[2].isdigit():
            out[int(parts[1])] = int(parts[2])
    return out


def handles(
    ext: dict[str, str], broker_name: str, messages: list[StoredMessage]
) -> list[tuple[StoredMessage, str]]:
    """Each popped message with its receipt handle, built from the answer's header."""
    starts = _start_offsets(ext.get("startOffsetInfo", ""))
    out = []
    for m in messages:
        h = Handle(
            starts.get(m.queue_id, m.queue_offset),
            int(ext.get("popTime", "0")),
            int(ext.get("invisibleTime", "0")),
            int(ext.get("reviveQid", "0")),
            NORMAL_TOPIC,
            broker_name,
            m.queue_id,
            m.queue_offset,
        )
        out.append((m, h.encode()))
    return out


async def pop_consume(args: argparse.Namespace, queues: list[tuple[str, str, int]]) -> int:
    """Pop from each (broker name, master address, queue id) until ``--count``, ``--idle``
    or ``--wait`` says stop; how many messages were printed."""
    clients: dict[str, RemotingConnection] = {}
    for _broker, addr, _q in queues:
        if addr not in clients:
            host, _, port = addr.rpartition(":")
            clients[addr] = await RemotingConnection.connect(host, int(port))
    deadline = time.monotonic() + float(args.wait_s)
    state = {"n": 0, "last": 0.0}
    done = asyncio.Event()
    json_out = getattr(args, "output", None) == "json"
    invisible_ms = max(1, int(args.invisible_s * 1000))

    def left() -> float:
        now = time.monotonic()
        rest = deadline - now
        if not args.count and state["n"]:  # stop once idle after the last message
            rest = min(rest, state["last"] + args.idle_s - now)
        return rest

    async def one(broker: str, addr: str, queue_id: int) -> None:
        c = clients[addr]
        while not done.is_set():
            wait = left()
            if wait <= 0:
                done.set()
                return
            want = MAX_BATCH if not args.count else max(1, min(MAX_BATCH, args.count - state["n"]))
            pop = PopMessageHeader(
                consumer_group=args.group,
                topic=args.topic,
                queue_id=queue_id,
                max_msg_nums=want,
                invisible_time=invisible_ms,
                poll_time=int(min(wait, 1) * 1000),
                born_time=int(time.time() * 1000),
                init_mode=INIT_MAX,
                exp_type="TAG",
                exp=args.tags,
                order=args.fifo,
            )
            r = await c.call(pop.request(), timeout_s=wait + 10)
            if r.code in NOTHING:
                continue
            if r.code != ResponseCode.SUCCESS:
                raise PopFailed(f"pop from {addr}: code {r.code}: {r.remark}")
            try:
                popped = handles(r.ext_fields, broker, decode_records(r.body))
            except (MessageError, ValueError) as exc:
                raise PopFailed(f"pop from {addr}: bad answer: {exc}") from None
            for m, handle in popped:
                if args.count and state["n"] >= args.count:
                    done.set()
                    return  # not acked: delivered again after --invisible
                state["n"] += 1
                state["last"] = time.monotonic()
                group = m.properties.get(SHARDING_KEY, "")
                attempt = m.reconsume_times + 1
                print_message(
                    m,
                    json_out,
                    {"attempt": attempt, "messageGroup": group},
                    f"attempt={attempt} group={group!r} ",
                )
                ack = AckMessageHeader(args.group, args.topic, m.queue_id, handle, m.queue_offset)
                a = await c.call(ack.request())
                if a.code != ResponseCode.SUCCESS:
                    raise PopFailed(f"ack to {addr}: code {a.code}: {a.remark}")
            if args.count and state["n"] >= args.count:
                done.set()

    try:
        await asyncio.gather(*(one(*q) for q in queues))
    finally:
        for c in clients.values():
            await c.close()
    return int(state["n"])
