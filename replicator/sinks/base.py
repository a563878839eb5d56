"""The one small interface every sink implements, the record it sends, and the per-queue ledger
that turns out-of-order answers into in-order confirmations.

A sink takes :class:`OutMessage` records (one per replicated write, routed to a queue by the
replicator) and confirms each once the destination holds it: the future ``submit`` returns
resolves with where the destination stored it (the destination queue offset for the RocketMQ
sinks, the line number for the file sink), which the RocketMQ replicator records as its
offset-syncs and the Redis replicator ignores. The replicator acks to Redis and
commits its checkpoint only up to what is confirmed *in order* per queue, so a sink reports,
for every queue, how many messages are confirmed with every earlier one confirmed too
(:meth:`Sink.confirmed`) and the replication offset of the last of them
(:meth:`Sink.confirmed_offset`).

Queue numbering: ``queue_id`` is the index into the topic's *write queues*, ordered as RocketMQ
clients order them (``TopicPublishInfo``: queue data sorted by broker name, then queue id
0..writeQueueNums-1), so with one broker group it is the broker's own queue id, and the
codec sink and the wheel sink (whose C++ core orders queues the same way) agree.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from replicator.sinks.errors import MessageRejected, SinkClosed
from rmq.message import BadProperty, checked_properties_text

__all__ = [
    "RESERVED_PROPERTIES",
    "Confirmation",
    "OutMessage",
    "QueueLedger",
    "Sink",
    "Slot",
    "encode_properties",
    "submit_each",
    "wire_properties",
]

#: Set by the sink itself (SEND_MESSAGE's ``properties``): a message may not carry them.
RESERVED_PROPERTIES: Final = frozenset({"KEYS", "TAGS", "UNIQ_KEY", "WAIT", "DELAY"})


# not frozen (read-only by convention, hashable as before): a frozen dataclass's __init__
# sets each field through object.__setattr__, and this one is built once a message
@dataclass(slots=True, unsafe_hash=True)
class OutMessage:
    """What a sink sends (the record both replicators share; their events build it)."""

    topic: str
    queue_id: int
    body: bytes  # the RESP-encoded command (encode_command(argv)) or a marker
    tags: str  # command name, upper case (e.g. "SET"), or "SNAPSHOT_BEGIN"/"SNAPSHOT_END"
    keys: str  # the key(s), space-separated, as RocketMQ KEYS ("" if none/binary-unsafe)
    # the Redis replicator's: REDIS_REPLID, REDIS_START, REDIS_END, REDIS_DB, [REDIS_DBS],
    # [REDIS_TXID, REDIS_TXCOUNT, REDIS_TXINDEX], REDIS_KIND (command|snapshot|marker),
    # [REDIS_PART "i/n" or "*/n"], [REDIS_SEQ, REDIS_SNAPSHOT] (replicator/redis/events.py)
    properties: dict[str, str]
    offset: int  # the replication end offset this message completes (checkpoint use); -1: none
    #: the message id (property UNIQ_KEY) to send; "" lets the sink make one (the RocketMQ
    #: replicator keeps the source message's id, so consumers drop duplicates across clusters)
    uniq_key: str = ""
    flag: int = 0  # RocketMQ's message flag (the send header's ``flag``, a batch item's FLAG)
    #: ``checked_properties_text(properties)`` when the maker has it already (the full sync
    #: builds it from a template per db), else "": a sink sends it as is
    properties_text: str = field(default="", compare=False)


def encode_properties(msg: OutMessage, extra: dict[str, str] | None = None) -> str:
    """RocketMQ's properties text (``rmq.message.checked_properties_text``) of KEYS, TAGS, the
    message's own properties and ``extra`` (the sink's UNIQ_KEY, WAIT). MessageRejected for
    a reserved name, an empty name or a separator in a name or value (the broker would split
    it)."""
    own = msg.properties
    if not RESERVED_PROPERTIES.isdisjoint(own):
        name = next(n for n in own if n in RESERVED_PROPERTIES)
        raise MessageRejected(f"property {name!r} is set by the sink, not the message")
    props: dict[str, str] = {}
    if msg.keys:
        props["KEYS"] = msg.keys
    if msg.tags:
        props["TAGS"] = msg.tags
    props.update(own)
    if extra:
        props.update(extra)
    try:
        return checked_properties_text(props)
    except BadProperty as exc:
        raise MessageRejected(str(exc)) from None


def wire_properties(msg: OutMessage, uniq: str) -> bytes:
    """``encode_properties(msg, {"UNIQ_KEY": uniq, "WAIT": "true"})`` as UTF-8, without
    building the merged dict (it runs for every message); anything doubtful (a reserved or
    bad name, a separator) goes through ``encode_properties``, for its refusal."""
    own, keys, tags = msg.properties, msg.keys, msg.tags
    text = msg.properties_text or None
    if text is None and (
        RESERVED_PROPERTIES.isdisjoint(own)
        and "\x01" not in keys
        and "\x02" not in keys
        and "\x01" not in tags
        and "\x02" not in tags
    ):
        try:
            text = checked_properties_text(own) if own else ""
        except BadProperty:
            pass
    if text is None:
        return encode_properties(msg, {"UNIQ_KEY": uniq, "WAIT": "true"}).encode()
    head = f"KEYS\x01{keys}\x02" if keys else ""
    if tags:
        head = f"{head}TAGS\x01{tags}\x02"
    return f"{head}{text}UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02".encode()


class Sink(Protocol):
    """Where replicated writes go. All methods run on the event loop of ``start``.

    Failure contract: a future returned by ``submit`` completes with a result only when the
    destination holds that message (the result: the stored copy's destination queue offset,
    or for the file sink its line number); otherwise it fails with a :class:`SinkError` (never
    another exception). A message whose future failed may still have been stored (a
    timeout, FLUSH_SLAVE_TIMEOUT): consumers drop duplicates by the message's identity.
    """

    async def start(self) -> None:
        """Connect and learn each topic's queues. Raises SinkError (e.g. no route)."""

    def queue_count(self, topic: str) -> int:
        """The topic's write queues (after ``start``); routing takes a key's hash modulo it."""

    async def submit(self, msg: OutMessage) -> asyncio.Future[int]:
        """Queue ``msg`` for sending. Waits only while ``max_in_flight`` messages are
        unconfirmed, never for this one's confirmation. Raises MessageRejected at once for a
        message that can never be sent, SinkClosed after ``close``."""

    async def submit_many(self, msgs: Sequence[OutMessage]) -> asyncio.Future[int]:
        """``submit`` each of ``msgs`` in order, with one future for them all: it resolves
        with ``len(msgs)`` once every one is confirmed, and fails (SinkError) as soon as one
        fails. Raises as ``submit`` does (the messages before the one it raised for may be
        queued: the caller restarts from its checkpoint either way)."""

    def confirmed(self, topic: str, queue_id: int) -> int:
        """How many messages of this queue are confirmed with every earlier one confirmed."""

    def confirmed_offset(self, topic: str, queue_id: int) -> int | None:
        """The ``offset`` of the last of those (None before the first)."""

    async def close(self) -> None:
        """Stop; futures not yet confirmed fail with SinkClosed. Idempotent."""


class Confirmation:
    """The one future of several messages (``Sink.submit_many``): resolves with their number
    once each is confirmed, fails with the first failure."""

    __slots__ = ("count", "future", "remaining")

    def __init__(self, future: asyncio.Future[int], count: int) -> None:
        self.future = future
        self.count = count
        self.remaining = count
        if count == 0:
            future.set_result(0)

    def confirm_one(self) -> None:
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            self.future.set_result(self.count)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)

    def on_future(self, future: asyncio.Future[int]) -> None:
        """A done-callback for one message's own future."""
        if future.cancelled():
            self.fail(SinkClosed("a send was cancelled"))
        elif (exc := future.exception()) is not None:
            self.fail(exc)
        else:
            self.confirm_one()


async def submit_each(
    submit: Callable[[OutMessage], Awaitable[asyncio.Future[int]]], msgs: Sequence[OutMessage]
) -> asyncio.Future[int]:
    """``Sink.submit_many`` by one ``submit`` a message (a sink with nothing faster)."""
    group = Confirmation(asyncio.get_running_loop().create_future(), len(msgs))
    for msg in msgs:
        (await submit(msg)).add_done_callback(group.on_future)
    return group.future


@dataclass(eq=False, slots=True)
class Slot:
    """One unconfirmed message; ``attempts``, ``token`` and ``wire`` belong to the sink.
    ``stored_at``: where the destination stored it (set with ``done``; the future's result).
    Its confirmation goes to ``future`` (``submit``) or to ``group`` (``submit_many``)."""

    msg: OutMessage
    future: asyncio.Future[int] | None
    group: Confirmation | None = None
    done: bool = False
    stored_at: int = -1
    attempts: int = 0
    token: int | None = None
    wire: object = None

    def fail(self, exc: BaseException) -> None:
        """Fail this message's future (or its group's) with ``exc`` unless already done."""
        future = self.future
        if future is not None:
            if not future.done():
                future.set_exception(exc)
        elif self.group is not None:
            self.group.fail(exc)


@dataclass
class QueueLedger:
    """The in-order confirmation record of one queue: messages in submit order, each marked
    done when its own answer came; the head run of done ones is confirmed and popped.
    A sink that answers out of order still confirms in order: a done message waits behind
    an earlier one that is not."""

    topic: str
    queue_id: int
    confirmed: int = 0
    confirmed_offset: int | None = None
    _slots: deque[Slot] = field(default_factory=deque)

    def add(
        self, msg: OutMessage, future: asyncio.Future[int] | None, group: Confirmation | None = None
    ) -> Slot:
        slot = Slot(msg, future, group)
        self._slots.append(slot)
        return slot

    def __len__(self) -> int:
        return len(self._slots)

    def mark_done(self, slot: Slot, stored_at: int) -> list[Slot]:
        """Mark ``slot`` stored at ``stored_at`` (its future's result once confirmed); return
        the slots confirmed by it (in order)."""
        slot.done = True
        slot.stored_at = stored_at
        return self._pop_done()

    def mark_run_done(self, slots: list[Slot], first_stored_at: int) -> int:
        """:meth:`mark_done` for ``slots`` stored one after the other from
        ``first_stored_at`` on (a batch's answer); returns how many it confirmed."""
        at = first_stored_at
        for slot in slots:
            slot.done = True
            slot.stored_at = at
            at += 1
        return len(self._pop_done())

    def _pop_done(self) -> list[Slot]:
        """Confirm and pop the head run of done slots."""
        out: list[Slot] = []
        slots = self._slots
        while slots and slots[0].done:
            head = slots.popleft()
            self.confirmed += 1
            self.confirmed_offset = head.msg.offset
            future = head.future
            if future is not None:
                if not future.done():
                    future.set_result(head.stored_at)
            elif head.group is not None:
                head.group.confirm_one()
            out.append(head)
        return out

    def fail_all(self, exc: BaseException) -> list[Slot]:
        """Fail every unconfirmed slot with ``exc``; returns them."""
        out = list(self._slots)
        self._slots.clear()
        for slot in out:
            slot.fail(exc)
        return out

    def __getitem__(self, index: int) -> Slot:
        return self._slots[index]

    def index(self, slot: Slot) -> int:
        return self._slots.index(slot)
