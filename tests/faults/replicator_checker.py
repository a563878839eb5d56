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
