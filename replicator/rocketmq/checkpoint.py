"""What the replicator commits per source queue, and consumer-group offset translation.

Per source queue (partition ``topic/broker/queue``) one fenced
``Offsets`` commit holds a :class:`QueueCheckpoint`: the next source offset to pull (the
watermark of :mod:`replicator.rocketmq.watermark`, also the commit's ``position``), the count
of dismissed messages, and the **offset-syncs**: pairs (source offset, destination offset)
per destination queue, recorded as the destination acknowledges messages (MirrorMaker 2's
offset-syncs, kept in metaledger instead of a topic).

Translation (:func:`translate`) rests on one fact of the pipeline: the messages of one source
queue go into a destination queue in source order (one sink lane per destination queue,
confirmed and resent in order; anything sent later lands at a higher destination offset). So a
sync (s, d) says: every message of this source queue after s that goes to this destination
queue is stored at an offset above d. A consumer group whose source offset is g (RocketMQ
consumer offsets name the next message to consume) has consumed
nothing at or after g; with the newest sync (s, d) with s < g it resumes at d + 1 and misses
nothing; a sync at g - 1 makes that exact. Without such a sync the answer is unknown
(``None``: resume at the destination queue's min offset, which skips nothing either). A
destination queue fed by several source queues resumes at the lowest of their answers, so
each checkpoint names the queues it ``feeds`` (set before the first send there): a source
queue whose message already sits in a queue, but whose sync there is not committed yet, must
make that queue unknown rather than let another source queue's sync pass its message (the
property test found exactly that gap). This is translation by offsets, never by timestamps (RIP-45's shipped connector translates by time
and can skip or repeat).

History is bounded per destination queue: the newest :data:`RECENT_SYNCS` exactly, older ones
thinned so their spacing grows with age (removing, each time, the one whose removal leaves
the smallest gap relative to its age) and the oldest always kept, :data:`MAX_SYNCS` at most.
Dropping a sync never breaks the no-gap rule; it only makes older group offsets coarser.

The record is JSON, ``{"v": 1, "next": …, "dismissed": …, "dest_topic": …, "syncs": {"<dest
queue>": [[s, d], …]}, "feeds": [<dest queue>, …]}``, checked field by field on decode (:class:`CheckpointError` names
the field). A bare JSON integer (an operator's ``offsets reset`` to an offset) reads as a
checkpoint with that next offset and no syncs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from nameserver.client import OffsetList

__all__ = [
    "MAX_SYNCS",
    "RECENT_SYNCS",
    "VERSION",
    "CheckpointError",
    "OffsetsLister",
    "QueueCheckpoint",
    "load_checkpoints",
    "source_topic",
    "translate",
]

VERSION = 1
#: syncs kept exactly per destination queue (the newest)
RECENT_SYNCS = 16
#: syncs kept at most per destination queue (the newest 16 + thinned older ones)
MAX_SYNCS = 32

_INT64_MAX = 2**63 - 1  # offsets and the Offsets service's position are int64
_FIELDS = ("v", "next", "dismissed", "dest_topic", "syncs", "feeds")


class CheckpointError(ValueError):
    """A stored checkpoint is unreadable; ``field`` names the part that is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"checkpoint field {field!r}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


@dataclass(slots=True)
class QueueCheckpoint:
    """One source queue's commit record (see the module docstring)."""

    next_offset: int
    dismissed: int = 0
    #: the destination topic the syncs are offsets of (another topic: start a new record)
    dest_topic: str = ""
    #: destination queue index -> [(source offset, destination offset)], oldest first, the
    #: destination offsets strictly ascending
    syncs: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: the destination queues this source queue's messages may go to (all of them when
    #: hashing by key, one for the same-index mapping), sorted; every queue with a sync is
    #: one. Translation must know them: a fed queue without a usable sync is unknown.
    feeds: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.feeds = sorted(set(self.feeds) | {q for q, h in self.syncs.items() if h})

    def feed(self, dest_queues: Iterable[int]) -> None:
        """This source queue may send to ``dest_queues`` (call it before the first send
        there, and commit it, so translation never trusts another queue's syncs alone)."""
        queues = list(dest_queues)
        for q in queues:
            _check_int("dest_queue", q)
        self.feeds = sorted(set(self.feeds).union(queues))

    def record_sync(self, dest_queue: int, source_offset: int, dest_offset: int) -> bool:
        """The message at ``source_offset`` is stored at ``dest_offset`` of ``dest_queue``.
        A sync not newer than the last one of that queue (a lower or equal destination
        offset: a late completion) is dropped, which is always safe; returns whether it was
        kept."""
        _check_int("dest_queue", dest_queue)
        _check_int("source_offset", source_offset)
        _check_int("dest_offset", dest_offset)
        if dest_queue not in self.feeds:
            self.feed([dest_queue])
        history = self.syncs.setdefault(dest_queue, [])
        if history and dest_offset <= history[-1][1]:
            return False
        history.append((source_offset, dest_offset))
        if len(history) > MAX_SYNCS:
            del history[_thinnest(history)]
        return True

    def copy(self) -> QueueCheckpoint:
        return QueueCheckpoint(
            self.next_offset,
            self.dismissed,
            self.dest_topic,
            {q: list(h) for q, h in self.syncs.items()},
            list(self.feeds),
        )

    def resume_offset(self, dest_queue: int, group_offset: int) -> int | None:
        """Where a group at source offset ``group_offset`` of this queue resumes in
        ``dest_queue``: the newest sync (s, d) with s < ``group_offset`` gives d + 1; None
        when there is none (unknown)."""
        for s, d in reversed(self.syncs.get(dest_queue, ())):
            if s < group_offset:
                return d + 1
        return None

    # ----------------------------------------------------------------- the record

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": VERSION,
                "next": self.next_offset,
                "dismissed": self.dismissed,
                "dest_topic": self.dest_topic,
                "syncs": {
                    str(q): [[s, d] for s, d in h] for q, h in sorted(self.syncs.items()) if h
                },
                "feeds": self.feeds,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> QueueCheckpoint:
        try:
            doc: Any = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise CheckpointError(
                "", f"the checkpoint is not JSON ({exc}): {bytes(raw[:80])!r}"
            ) from None
        if _is_int(doc):  # an operator's reset to a bare offset
            return cls(_non_negative("next", doc))
        if not isinstance(doc, dict):
            raise CheckpointError(
                "", f"the checkpoint is not a JSON object or integer: {doc!r:.80}"
            )
        unknown = sorted(set(doc) - set(_FIELDS))
        if unknown:
            raise CheckpointError(unknown[0], "unknown field")
        if not _is_int(doc.get("v")) or doc["v"] != VERSION:
            raise CheckpointError("v", f"version {doc.get('v')!r} is not {VERSION}")
        if "next" not in doc:
            raise CheckpointError("next", "missing")
        dest_topic = doc.get("dest_topic", "")
        if not isinstance(dest_topic, str):
            raise CheckpointError("dest_topic", f"a string expected, not {dest_topic!r:.80}")
        return cls(
            _non_negative("next", doc["next"]),
            _non_negative("dismissed", doc.get("dismissed", 0)),
            dest_topic,
            _decode_syncs(doc.get("syncs", {})),
            _decode_feeds(doc.get("feeds", [])),
        )


def _decode_syncs(raw: Any) -> dict[int, list[tuple[int, int]]]:
    if not isinstance(raw, dict):
        raise CheckpointError("syncs", f"an object expected, not {raw!r:.80}")
    syncs: dict[int, list[tuple[int, int]]] = {}
    for key, history in raw.items():
        where = f"syncs.{key}"
        if not (isinstance(key, str) and key.isdigit() and key.isascii()):
            raise CheckpointError(where, "a destination queue index expected")
        if not isinstance(history, list) or len(history) > MAX_SYNCS:
            raise CheckpointError(where, f"a list of at most {MAX_SYNCS} syncs expected")
        pairs: list[tuple[int, int]] = []
        for i, pair in enumerate(history):
            at = f"{where}[{i}]"
            if not (isinstance(pair, list) and len(pair) == 2):
                raise CheckpointError(
                    at, f"a [source offset, dest offset] pair expected: {pair!r:.80}"
                )
            s, d = _non_negative(at, pair[0]), _non_negative(at, pair[1])
            if pairs and d <= pairs[-1][1]:
                raise CheckpointError(at, f"dest offset {d} is not above {pairs[-1][1]}")
            pairs.append((s, d))
        if pairs:
            syncs[int(key)] = pairs
    return syncs


def _decode_feeds(raw: Any) -> list[int]:
    if not isinstance(raw, list):
        raise CheckpointError("feeds", f"a list of destination queue indexes expected: {raw!r:.80}")
    return [_non_negative(f"feeds[{i}]", q) for i, q in enumerate(raw)]


def _thinnest(history: list[tuple[int, int]]) -> int:
    """The index to drop from a full history: among the older ones (never the oldest, never
    the newest :data:`RECENT_SYNCS`), the one whose removal leaves the smallest merged gap
    relative to its age (destination offsets; ties: the newer one)."""
    newest = history[-1][1]
    best, best_gap, best_age = 0, 0, 1
    for i in range(1, len(history) - RECENT_SYNCS):
        gap = history[i + 1][1] - history[i - 1][1]
        age = newest - history[i - 1][1]
        if best == 0 or gap * best_age <= best_gap * age:
            best, best_gap, best_age = i, gap, age
    return best


# --------------------------------------------------------------------------- translation


def source_topic(partition: str) -> str:
    """The topic of a partition ``topic/broker/queue`` (topic names hold no ``/``)."""
    return partition.split("/", 1)[0]


def translate(
    group_offsets: dict[str, int], checkpoints: dict[str, QueueCheckpoint]
) -> dict[int, int | None]:
    """Per destination queue, the offset a group resumes at (see the module docstring).

    ``checkpoints``: the source queues of one topic (all replicated into one destination
    topic), keyed by partition; ``group_offsets``: the group's source offsets by partition.
    Every destination queue a checkpoint ``feeds`` gets an answer; a source queue the group
    has no offset for counts as unknown (None) for every destination queue it feeds."""
    topics = {c.dest_topic for c in checkpoints.values()}
    if len(topics) > 1:
        raise ValueError(f"checkpoints of several destination topics: {sorted(topics)}")
    result: dict[int, int | None] = {}
    for partition, ckpt in checkpoints.items():
        g = group_offsets.get(partition)
        for q in ckpt.feeds:
            here = None if g is None else ckpt.resume_offset(q, g)
            if q not in result:
                result[q] = here
            else:
                there = result[q]
                result[q] = None if here is None or there is None else min(here, there)
    return dict(sorted(result.items()))


class OffsetsLister(Protocol):
    """What :func:`load_checkpoints` needs of ``nameserver.client.Client``."""

    def offsets_list(self, job: str, prefix: bool = False) -> OffsetList: ...


def load_checkpoints(client: OffsetsLister, job: str) -> dict[str, QueueCheckpoint]:
    """Every committed checkpoint of ``job``, by partition; CheckpointError (naming the
    partition and field) when one is unreadable."""
    out: dict[str, QueueCheckpoint] = {}
    for o in client.offsets_list(job).offsets:
        try:
            out[o.partition] = QueueCheckpoint.decode(o.offset)
        except CheckpointError as exc:
            where = f"{exc.problem} (job {job!r}, partition {o.partition!r})"
            raise CheckpointError(exc.field, where) from None
    return out


# --------------------------------------------------------------------------- checks


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _non_negative(name: str, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _INT64_MAX:
        return value
    raise CheckpointError(name, f"an integer in [0, 2**63) expected, not {value!r:.80}")


def _check_int(name: str, value: int) -> None:
    if not _is_int(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative int ({value!r})")
