"""What a replicator's destination must hold: everything its source acknowledged, per key in
the order the source took it.

The writer gives each key a sequence of numbers, 1, 2, 3, … and writes them in that order,
one at a time, through three kinds of key:

- a **register** (``SET key n``): the destination's value is the last number the source
  acknowledged or a later one it was sent; never an older one, never one nobody wrote;
- a **list** (``RPUSH key n``): the destination's list holds every acknowledged number,
  each once, in increasing order, and nothing that was never sent (a write whose answer
  never came, a timeout or a dropped connection, may be there or not);
- a **counter** (``INCR key``): at least the highest value the source answered, at most
  the number of increments sent.

:meth:`History.observe` also takes what the destination held at moments while the faults
ran: a register or counter never goes down from one moment to the next, and a list only
grows at its end (what a consumer saw is never taken back or reordered). :meth:`check`
returns the problems found, each naming its key; none is the pass.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

#: a destination's state: per key, a register's or counter's number, or a list's numbers
#: (None: the key is absent)
State = Mapping[str, int | list[int] | None]


class Kind(Enum):
    REGISTER = "register"
    LIST = "list"
    COUNTER = "counter"


@dataclass
class KeyHistory:
    kind: Kind
    #: numbers sent (a counter: increments sent), in order
    sent: int = 0
    #: the numbers the source acknowledged (a counter: the values it answered)
    acked: list[int] = field(default_factory=list)


@dataclass
class History:
    """What a writer sent and what the source acknowledged, per key; what the destination
    showed meanwhile."""

    keys: dict[str, KeyHistory] = field(default_factory=dict)
    observations: list[dict[str, int | list[int] | None]] = field(default_factory=list)

    def key(self, name: str, kind: Kind) -> KeyHistory:
        h = self.keys.setdefault(name, KeyHistory(kind))
        assert h.kind is kind, (name, h.kind, kind)
        return h

    def next_number(self, name: str, kind: Kind) -> int:
        """The number to write next to ``name`` (counted as sent)."""
        h = self.key(name, kind)
        h.sent += 1
        return h.sent

    def ack(self, name: str, value: int) -> None:
        """The source answered the last write to ``name`` (a counter: with ``value``)."""
        self.keys[name].acked.append(value)

    def observe(self, state: State) -> None:
        self.observations.append({k: _copy(v) for k, v in state.items()})

    def check(self, final: State) -> list[str]:
        problems: list[str] = []
        for name, h in sorted(self.keys.items()):
            problems += _check_final(name, h, final.get(name))
        moments = [*self.observations, {k: _copy(v) for k, v in final.items()}]
        for before, after in itertools.pairwise(moments):
            for name, h in sorted(self.keys.items()):
                problems += _check_step(name, h.kind, before.get(name), after.get(name))
        return problems

    def acknowledged(self) -> int:
        return sum(len(h.acked) for h in self.keys.values())


def _copy(v: int | list[int] | None) -> int | list[int] | None:
    return list(v) if isinstance(v, list) else v


def _check_final(name: str, h: KeyHistory, value: int | list[int] | None) -> list[str]:
    last = max(h.acked, default=0)
    if h.kind is Kind.LIST:
        items = value if isinstance(value, list) else []
        problems = []
        missing = sorted(set(h.acked) - set(items))
        if missing:
            problems.append(f"{name}: acknowledged {missing[:10]} missing ({len(missing)})")
        if any(b <= a for a, b in itertools.pairwise(items)):
            problems.append(f"{name}: out of order or twice: {_around_disorder(items)}")
        strays = [n for n in items if not 1 <= n <= h.sent]
        if strays:
            problems.append(f"{name}: never sent: {strays[:10]}")
        return problems
    n = value if isinstance(value, int) else 0
    if n < last:
        return [f"{name}: holds {n}, the source acknowledged {last}"]
    if n > h.sent:
        return [f"{name}: holds {n}, only {h.sent} sent"]
    return []


def _check_step(
    name: str, kind: Kind, before: int | list[int] | None, after: int | list[int] | None
) -> list[str]:
    if kind is Kind.LIST:
        b = before if isinstance(before, list) else []
        a = after if isinstance(after, list) else []
        if a[: len(b)] != b:
            return [f"{name}: a seen list changed before its end: {b[-5:]} then {a[-5:]}"]
        return []
    b_n = before if isinstance(before, int) else 0
    a_n = after if isinstance(after, int) else 0
    if a_n < b_n:
        return [f"{name}: went back from {b_n} to {a_n}"]
    return []


def _around_disorder(items: Sequence[int]) -> list[int]:
    for i in range(1, len(items)):
        if items[i] <= items[i - 1]:
            return list(items[max(0, i - 3) : i + 3])
    return []


@dataclass(frozen=True)
class Term:
    """One lease term of a job's election, as a watcher polling the leader saw it begin:
    after ``after`` (the last look that showed another term or none) and by ``seen``."""

    worker: str
    token: int  # the leader key's create revision: the fencing token
    after: float
    seen: float


@dataclass(frozen=True)
class Written:
    """One message in the destination: which worker sent it (by its address) and when the
    destination stored it (the same clock as :class:`Term`'s)."""

    worker: str
    stored: float
    where: str  # queue and offset, for the message


def terms_from(looks: Sequence[Mapping[str, object]]) -> list[Term]:
    """The terms in a watcher's looks (``{"t", "leader", "term"}``, in order; a look with an
    ``error`` saw nothing and is skipped)."""
    terms: list[Term] = []
    last_t, last_token = float("-inf"), None
    for look in looks:
        if "error" in look:
            continue
        t, token = float(str(look["t"])), look.get("term")
        if token is not None and token != last_token:
            terms.append(Term(str(look["leader"]), int(str(token)), last_t, t))
        last_t, last_token = t, token
    return terms


def check_terms(terms: Sequence[Term], written: Sequence[Written]) -> list[str]:
    """At most one worker writes per term: a message stored once another worker's term had
    certainly begun (its ``seen``), and before the sender's own next term could have begun
    (its ``after``), came from a worker that had lost its lease."""
    problems = []
    for w in written:
        current = None
        for i, term in enumerate(terms):
            if term.seen <= w.stored:
                current = i
        if current is None or terms[current].worker == w.worker:
            continue
        later = [t for t in terms[current + 1 :] if t.worker == w.worker]
        if later and later[0].after < w.stored:
            continue  # its own next term may have begun by then
        term = terms[current]
        problems.append(
            f"{w.worker} wrote {w.where} {w.stored - term.seen:.3f} s into {term.worker}'s "
            f"term {term.token}"
        )
    return problems


def handover_margins(terms: Sequence[Term], written: Sequence[Written]) -> list[float]:
    """For each term that another worker took over: how long before it was seen the old
    worker's last message (before its own next term) was stored; negative: after."""
    out = []
    for i in range(1, len(terms)):
        old, new = terms[i - 1], terms[i]
        if old.worker == new.worker:
            continue
        again = next((t.after for t in terms[i + 1 :] if t.worker == old.worker), float("inf"))
        last = max(
            (w.stored for w in written if w.worker == old.worker and w.stored < again), default=None
        )
        if last is not None:
            out.append(round(new.seen - last, 3))
    return out
