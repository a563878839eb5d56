"""Which queue(s) a write goes to, so that no consumer of one key sees its history out of order.

A key's queue is ``crc32(key bytes) % queue_count`` (zlib's CRC-32: stable across processes,
Python versions and restarts, unlike ``hash()``; the db is not hashed, so MOVE and COPY … DB
stay on the key's queue in both dbs). One table, :data:`RULES`, decides the route of every
command from what the command table says about it (first match wins):

=====================  ===========  ==============================================================
when                   route        examples and why
=====================  ===========  ==============================================================
keys not all known     ALL          SORT … STORE (unknown spec), MIGRATE … KEYS (incomplete), a
                                    command this table does not know: it may touch any key
no keys                ALL          FLUSHALL, FLUSHDB, SWAPDB, FUNCTION LOAD/DELETE/FLUSH/RESTORE,
                                    SCRIPT FLUSH, EVAL/FCALL with 0 keys: global, or any key
one queue              SINGLE       SET k, HSET k, INCR k, RENAME a b when a and b share a queue
splittable, >1 queue   SPLIT        MSET, DEL, UNLINK (:data:`SPLIT_BY_NAME`): each key's effect is
                                    independent of the others, so one piece per queue
otherwise              TOUCHED      RENAME, SMOVE, LMOVE, SUNIONSTORE, ZUNIONSTORE, BITOP, MSETNX,
                                    COPY, EVAL/FCALL with keys: the whole command to every queue
                                    whose keys it touches
=====================  ===========  ==============================================================

``REDIS_PART`` on each message: ``"i/n"`` for piece i (1-based) of a SPLIT into n different
commands; ``"*/n"`` for each of the n identical copies of an ALL or TOUCHED command (a
consumer of several queues applies it once: the dedupe key ``(replid, start, part)`` is the
same on every copy, and a replayer that merges queues waits until all n copies are at the
head of their queues, a barrier, see :mod:`replicator.redis.replay`); absent when the
command went to exactly one queue.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from replicator.redis.commands import CommandSpec, FoundKeys

# Commands that may be cut into one command per queue, keyed by NAME, with the size of one
# key's argument group (MSET k v: 2; DEL k: 1). Redis's table cannot say this (MSET and MSETNX
# have the same key spec): it holds only when each key's effect does not depend on the other
# keys. MSETNX is all-or-nothing (one existing key means none is set), so it is sent whole; a
# command missing here is sent whole to the queues it touches: fan-out, never a wrong result.
SPLIT_BY_NAME: dict[str, int] = {"mset": 2, "del": 1, "unlink": 1}


class Route(StrEnum):
    SINGLE = "single"
    SPLIT = "split"
    TOUCHED = "touched"
    ALL = "all"


# not frozen (read-only by convention, hashable as before): a frozen dataclass's __init__
# sets each field through object.__setattr__, and this one is built once a message
@dataclass(slots=True, unsafe_hash=True)
class Piece:
    queue_id: int
    argv: tuple[bytes, ...]
    keys: tuple[bytes, ...]
    part: str  # "" (one queue), "i/n" (split), "*/n" (copy)


def queue_of(key: bytes, queue_count: int) -> int:
    return zlib.crc32(key) % queue_count


def _queues(found: FoundKeys, queue_count: int) -> set[int]:
    return {queue_of(k.key, queue_count) for k in found.keys}


def _splittable(spec: CommandSpec | None, argv: Sequence[bytes]) -> bool:
    if spec is None or spec.name not in SPLIT_BY_NAME:
        return False
    group = SPLIT_BY_NAME[spec.name]
    return len(argv) > 1 and (len(argv) - 1) % group == 0


# (name, predicate(spec, argv, keys, queue_count), route): the first that holds decides.
Rule = tuple[str, Callable[[CommandSpec | None, Sequence[bytes], FoundKeys, int], bool], Route]
RULES: tuple[Rule, ...] = (
    (
        "keys not all known",
        lambda spec, argv, found, n: spec is None or not found.complete,
        Route.ALL,
    ),
    ("no keys", lambda spec, argv, found, n: not found.keys, Route.ALL),
    ("one queue", lambda spec, argv, found, n: len(_queues(found, n)) == 1, Route.SINGLE),
    ("splittable", lambda spec, argv, found, n: _splittable(spec, argv), Route.SPLIT),
    ("otherwise", lambda spec, argv, found, n: True, Route.TOUCHED),
)


def route_of(
    spec: CommandSpec | None, argv: Sequence[bytes], found: FoundKeys, queue_count: int
) -> Route:
    for _name, holds, route in RULES:
        if holds(spec, argv, found, queue_count):
            return route
    raise AssertionError("the last rule always holds")  # pragma: no cover


def plan(
    spec: CommandSpec | None, argv: Sequence[bytes], queue_count: int
) -> tuple[Route, list[Piece]]:
    """The route of one effect command and its pieces (queue, argv, keys, part), in queue
    order. ``spec`` None: a command the table does not know (sent to every queue)."""
    if queue_count < 1:
        raise ValueError(f"queue_count must be >= 1, got {queue_count}")
    found = spec.find_keys(argv) if spec is not None else FoundKeys((), False)
    whole = tuple(argv)
    if found.complete and len(found.keys) == 1:
        # what RULES decide for one known key (SET, HSET, INCR …: most of a stream), directly
        key = found.keys[0].key
        return Route.SINGLE, [Piece(queue_of(key, queue_count), whole, (key,), "")]
    route = route_of(spec, argv, found, queue_count)
    keys = tuple(k.key for k in found.keys)
    if route is Route.SINGLE:
        return route, [Piece(queue_of(keys[0], queue_count), whole, keys, "")]
    if route is Route.SPLIT:
        assert spec is not None
        group = SPLIT_BY_NAME[spec.name]
        by_queue: dict[int, list[bytes]] = {}
        key_by_queue: dict[int, list[bytes]] = {}
        for i in range(1, len(argv), group):
            q = queue_of(argv[i], queue_count)
            by_queue.setdefault(q, []).extend(argv[i : i + group])
            key_by_queue.setdefault(q, []).append(argv[i])
        n = len(by_queue)
        return route, [
            Piece(q, (argv[0], *by_queue[q]), tuple(key_by_queue[q]), f"{i}/{n}")
            for i, q in enumerate(sorted(by_queue), start=1)
        ]
    queues = sorted(_queues(found, queue_count)) if route is Route.TOUCHED else range(queue_count)
    part = f"*/{len(queues)}" if len(queues) > 1 else ""
    return route, [Piece(q, whole, keys, part) for q in queues]
