"""Histories of key reads and writes, checked for linearizability key by key, and the
availability they show.

An operation is ``Op(proc, kind, key, value, start, end, status)``: ``kind`` "w" (a put
of ``value``) or "r" (a linearizable read that returned ``value``, None: no key);
``start``/``end`` on the machine's CLOCK_MONOTONIC (the same in every process);
``status`` "ok", "fail" (certainly had no effect: reads that errored) or "info" (a write
that errored or timed out: it may or may not have taken effect, at any time after
``start``).

The check (:func:`check_key`) is Wing and Gong's search for a linearization of one
register, with Lowe's memo of (linearized set, value) states. Every written value is
unique, so a write that may have failed and that no read saw can be left out (had it
taken effect, nothing observed it), and one that a read saw certainly happened: it is
kept with no end. Keys are independent registers, and the writers rotate keys, so each
search stays small.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Op:
    proc: int
    kind: str
    key: str
    value: str | None
    start: float
    end: float
    status: str


@dataclass(frozen=True)
class Anomaly:
    key: str
    reason: str


def check_key(ops: Sequence[Op], max_states: int = 2_000_000) -> str | None:
    """None if the register's history is linearizable, else why not."""
    seen = {o.value for o in ops if o.kind == "r" and o.status == "ok" and o.value is not None}
    written = {o.value for o in ops if o.kind == "w"}
    for v in seen - written:
        return f"a read returned {v!r}, which nobody wrote"
    keep = []
    for o in ops:
        if o.status == "fail" or (o.kind == "r" and o.status != "ok"):
            continue
        if o.kind == "w" and o.status == "info":
            if o.value not in seen:
                continue  # unobserved: leaving it out never hides an anomaly
            o = Op(o.proc, o.kind, o.key, o.value, o.start, math.inf, "info")
        keep.append(o)
    keep.sort(key=lambda o: o.start)
    n = len(keep)
    full = (1 << n) - 1
    stack: list[tuple[int, str | None]] = [(0, None)]
    visited: set[tuple[int, str | None]] = {(0, None)}
    while stack:
        done, value = stack.pop()
        if done == full:
            return None
        # an op may go next only if it started before every pending op ended; sorted by
        # start, the scans begin at the first pending op and stop at one that started
        # after that bound (it ends later still)
        first = (~done & (done + 1)).bit_length() - 1
        min_end = math.inf
        for i in range(first, n):
            if keep[i].start > min_end:
                break
            if not done >> i & 1 and keep[i].end < min_end:
                min_end = keep[i].end
        for i in range(first, n):
            if done >> i & 1:
                continue
            o = keep[i]
            if o.start > min_end:
                break  # sorted by start: no later one can go next either
            if o.kind == "w":
                nxt = (done | 1 << i, o.value)
            elif o.value == value:
                nxt = (done | 1 << i, value)
            else:
                continue
            if nxt not in visited:
                if len(visited) >= max_states:
                    return f"gave up after {max_states} states ({n} operations)"
                visited.add(nxt)
                stack.append(nxt)
    return f"no linearization of its {n} operations"


def check(ops: Iterable[Op]) -> list[Anomaly]:
    """Every key's history checked; the keys that are not linearizable."""
    by_key: dict[str, list[Op]] = defaultdict(list)
    for o in ops:
        by_key[o.key].append(o)
    out = []
    for key in sorted(by_key):
        why = check_key(by_key[key])
        if why is not None:
            out.append(Anomaly(key, why))
    return out


def longest_gap(ops: Iterable[Op], start: float, end: float) -> tuple[float, float]:
    """The longest time within [start, end] with no write acknowledged; (length, from)."""
    ends = sorted(o.end for o in ops if o.kind == "w" and o.status == "ok" and start <= o.end)
    best, at, last = 0.0, start, start
    for t in [*ends, end]:
        if t > end:
            t = end
        if t - last > best:
            best, at = t - last, last
        last = max(last, t)
    return best, at


def recovery(ops: Iterable[Op], proc: int, heal: float, until: float) -> float | None:
    """Seconds from ``heal`` to the first write through ``proc`` started after it and
    acknowledged (None: none before ``until``)."""
    firsts = [
        o.end
        for o in ops
        if o.proc == proc and o.kind == "w" and o.status == "ok" and o.start >= heal
    ]
    first = min(firsts, default=None)
    return None if first is None or first > until else first - heal


def first_read(ops: Iterable[Op], proc: int, heal: float) -> tuple[str, float] | None:
    """The first linearizable read through ``proc`` started after ``heal``: its status and
    the seconds it took (None: it made none). Right after a heal a member that was cut off
    must answer reads at once, as it answers writes (a read failing at the client's
    deadline there was the 100-run campaign's seed 83)."""
    reads = [o for o in ops if o.proc == proc and o.kind == "r" and o.start >= heal]
    first = min(reads, key=lambda o: o.start, default=None)
    return None if first is None else (first.status, round(first.end - first.start, 3))
