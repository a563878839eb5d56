"""Checks of a broker group's history under faults: the total queue and one master per epoch.

Inputs (tests/faults/net/broker_client.py writes them):

- ``Send``: one attempt of one message ``id`` (``q<queue>-<seq>``; every attempt of an id
  carries the same body, ``crc`` its CRC32) to one replica; ``status`` "ok" (PUT_OK, with
  the answer's ``queue_offset`` and the commit-log offset ``phys`` from its message id),
  "fail" (never reached the replica) or "info" (any other answer, an error or a timeout: it
  may be stored).
- ``Stored``: what the group holds after the last heal, pulled from its master: each
  message's queue, queue offset, commit-log offset, id and CRC.
- the epoch file of the master after the run (``(epoch, start offset)`` entries: which
  master epoch wrote which stretch of the commit log), and the group as metaledger told it
  over the run (which replica was master in which epoch).

What must hold (:func:`check`):

- **total queue**: every acknowledged id is stored at least once, at the queue and queue
  offset its answer gave, with its body; nothing is stored that was never sent or with
  another body (an id stored twice, from a retry, holds the same body both times); each
  queue's offsets run 0, 1, 2, ... with no gap; and a queue's ids are in send order (a
  worker sends its sequence numbers one after the other, each until acknowledged, so along
  a queue's offsets they never go down).
- **no read taken back**: a message a consumer pulled from any replica while the faults
  ran is, after the heal, at the queue offset where it was read.
- **one master per epoch**: every acknowledgement was given by the replica metaledger
  named master of the epoch that wrote that stretch of the log (the epoch file), so no two
  replicas acknowledged in one epoch; and metaledger never named two masters for one epoch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Send:
    id: str
    q: int
    seq: int
    crc: int
    replica: str
    start: float
    end: float
    status: str
    queue_offset: int = -1
    phys: int = -1


@dataclass(frozen=True)
class Stored:
    id: str
    q: int
    queue_offset: int
    phys: int
    crc: int


@dataclass(frozen=True)
class GroupState:
    t: float
    master: str
    epoch: int


def epoch_at(entries: Sequence[tuple[int, int]], phys: int) -> int | None:
    """The epoch whose stretch of the log holds ``phys`` (entries sorted by start)."""
    found = None
    for epoch, start in entries:
        if start <= phys:
            found = epoch
    return found


def check_queue(sends: Iterable[Send], stored: Sequence[Stored]) -> list[str]:
    """The total-queue check; each problem found, one line each (a few of each kind)."""
    sends = list(sends)
    problems: list[str] = []
    sent_crc: dict[str, int] = {}
    for s in sends:
        sent_crc.setdefault(s.id, s.crc)
        if sent_crc[s.id] != s.crc:
            problems.append(f"{s.id} sent with two bodies (the workload's own bug)")
    at = {(m.q, m.queue_offset): m for m in stored}
    ids = {m.id for m in stored}
    lost = [s for s in sends if s.status == "ok" and s.id not in ids]
    problems += [f"acknowledged and lost: {s.id} by {s.replica} at {s.end:.2f}" for s in lost[:5]]
    if len(lost) > 5:
        problems.append(f"... {len(lost)} acknowledged messages lost in all")
    moved = [
        s
        for s in sends
        if s.status == "ok"
        and s.id in ids
        and ((m := at.get((s.q, s.queue_offset))) is None or m.id != s.id or m.phys != s.phys)
    ]
    problems += [
        f"{s.id} acknowledged by {s.replica} at queue {s.q} offset {s.queue_offset} "
        f"(log {s.phys}), which holds {at.get((s.q, s.queue_offset))}"
        for s in moved[:5]
    ]
    if len(moved) > 5:
        problems.append(f"... {len(moved)} acknowledged messages not where their answer said")
    foreign = [m for m in stored if sent_crc.get(m.id) != m.crc]
    problems += [
        f"stored but never sent with that body: {m.id} at queue {m.q} offset {m.queue_offset}"
        for m in foreign[:5]
    ]
    by_queue: dict[int, list[Stored]] = defaultdict(list)
    for m in stored:
        by_queue[m.q].append(m)
    for q, ms in sorted(by_queue.items()):
        ms.sort(key=lambda m: m.queue_offset)
        offsets = [m.queue_offset for m in ms]
        if offsets != list(range(len(ms))):
            problems.append(f"queue {q}: offsets not 0..{len(ms) - 1} without gaps")
        last = -1
        for m in ms:
            seq = int(m.id.rsplit("-", 1)[1])
            if f"q{q}-" not in m.id or seq < last:
                problems.append(f"queue {q}: {m.id} at offset {m.queue_offset} after seq {last}")
                break
            last = seq
    return problems


def check_reads(seen: Iterable[Stored], stored: Sequence[Stored], by: Sequence[str]) -> list[str]:
    """What a consumer pulled while the faults ran (``by[i]``: the replica ``seen[i]`` came
    from) is never taken back: after the heal its queue offset holds the same message."""
    at = {(m.q, m.queue_offset): m for m in stored}
    problems: list[str] = []
    bad = 0
    done: set[tuple[int, int, str]] = set()
    for m, replica in zip(seen, by, strict=True):
        if (m.q, m.queue_offset, m.id) in done:
            continue
        done.add((m.q, m.queue_offset, m.id))
        now = at.get((m.q, m.queue_offset))
        if now is None or (now.id, now.crc) != (m.id, m.crc):
            bad += 1
            if bad <= 5:
                problems.append(
                    f"a consumer read {m.id} at queue {m.q} offset {m.queue_offset} from "
                    f"{replica}; after the heal it holds {now}"
                )
    if bad > 5:
        problems.append(f"... {bad} messages read and then taken back in all")
    return problems


def check_masters(
    sends: Iterable[Send], epochs: Sequence[tuple[int, int]], history: Sequence[GroupState]
) -> list[str]:
    """One master per epoch: by metaledger's word, and in whoever acknowledged."""
    problems: list[str] = []
    named: dict[int, set[str]] = defaultdict(set)
    for g in history:
        if g.master:
            named[g.epoch].add(g.master)
    for epoch, masters in sorted(named.items()):
        if len(masters) > 1:
            problems.append(f"metaledger named {sorted(masters)} master of epoch {epoch}")
    ackers: dict[int, set[str]] = defaultdict(set)
    for s in sends:
        if s.status != "ok":
            continue
        epoch = epoch_at(epochs, s.phys)
        if epoch is None:
            problems.append(f"{s.id} acknowledged at log {s.phys}, before any epoch")
            continue
        ackers[epoch].add(s.replica)
    for epoch, who in sorted(ackers.items()):
        if len(who) > 1:
            problems.append(f"epoch {epoch}: {sorted(who)} all acknowledged sends")
        elif epoch in named and who != named[epoch]:
            problems.append(
                f"epoch {epoch}: {sorted(who)} acknowledged; metaledger's master was "
                f"{sorted(named[epoch])}"
            )
    return problems


def longest_gap(sends: Iterable[Send], start: float, end: float) -> tuple[float, float]:
    """The longest time within [start, end] with no send acknowledged; (length, from)."""
    ends = sorted(s.end for s in sends if s.status == "ok" and start <= s.end <= end)
    best, at, last = 0.0, start, start
    for t in [*ends, end]:
        if t - last > best:
            best, at = t - last, last
        last = t
    return best, at


def recovery(sends: Iterable[Send], heal: float, until: float) -> float | None:
    """Seconds from ``heal`` to the first send started after it and acknowledged."""
    first = min((s.end for s in sends if s.status == "ok" and s.start >= heal), default=None)
    return None if first is None or first > until else first - heal
