"""The partition nemesis: which packets to drop, chosen from who leads now.

Each fault is a function ``(net, leader, rng) -> description`` that installs iptables
drops through :class:`tests.faults.net.netns.Net`; ``net.heal()`` removes them all.
Clients are never cut off: they reach every member throughout (on both sides of a split).

- ``isolate-leader``: the leader sees no member.
- ``split``: a random minority apart from the majority (with 3 members: one follower).
- ``bridge``: one member sees both halves, the halves do not see each other.
- ``one-way``: the leader hears no member, its own packets still go out.
- ``loss``: a fifth of the packets between members dropped at random, both ways.
- ``delay``: every packet between members held 50-150 ms (from the seed), give or take a
  quarter of that, both ways (so a round trip between members takes twice that); this
  kernel has no netem, a queueing helper holds them (:meth:`Net.delay`).
- ``client-delay``: the same between the clients and every member instead (what a client
  sends, and what a member answers it: :meth:`Net.delay` with ``CLIENTS``); members see
  each other at once.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tests.faults.net.netns import CLIENTS, Net

Fault = Callable[[Net, int, random.Random], str]


def _names(members: list[int]) -> str:
    return ",".join(f"n{i}" for i in members)


def isolate_leader(net: Net, leader: int, rng: random.Random) -> str:
    others = [i for i in range(len(net.members)) if i != leader]
    net.partition([[leader], others])
    return f"isolate-leader n{leader}"


def split(net: Net, leader: int, rng: random.Random) -> str:
    n = len(net.members)
    followers = [i for i in range(n) if i != leader]
    minority = sorted(rng.sample(followers, (n - 1) // 2))
    majority = [i for i in range(n) if i not in minority]
    net.partition([minority, majority])
    return f"split {_names(minority)} | {_names(majority)}"


def bridge(net: Net, leader: int, rng: random.Random) -> str:
    n = len(net.members)
    order = list(range(n))
    rng.shuffle(order)
    middle, rest = order[0], order[1:]
    left, right = rest[: len(rest) // 2], rest[len(rest) // 2 :]
    net.partition([left, right])
    return f"bridge n{middle} sees {_names(left)} and {_names(right)}"


def one_way(net: Net, leader: int, rng: random.Random) -> str:
    for i in range(len(net.members)):
        if i != leader:
            net.cut(i, leader, one_way=True)
    return f"one-way: n{leader} (leader) hears nobody"


def loss(net: Net, leader: int, rng: random.Random) -> str:
    n = len(net.members)
    for a in range(n):
        for b in range(n):
            if a != b:
                net.cut(a, b, one_way=True, probability=0.2)
    return "loss 20 % between members"


def _delay_ms(rng: random.Random) -> tuple[int, int, int]:
    """(delay, jitter, the helpers' seed) drawn from the run's generator."""
    delay_ms = rng.randrange(50, 151)
    return delay_ms, delay_ms // 4, rng.randrange(1 << 30)


def delay(net: Net, leader: int, rng: random.Random) -> str:
    delay_ms, jitter_ms, seed = _delay_ms(rng)
    n = len(net.members)
    for a in range(n):
        for b in range(a + 1, n):
            net.delay(a, b, delay_ms, jitter_ms, seed=seed)
    return f"delay {delay_ms} ms (+- {jitter_ms} ms) between members"


def client_delay(net: Net, leader: int, rng: random.Random) -> str:
    delay_ms, jitter_ms, seed = _delay_ms(rng)
    for i in range(len(net.members)):
        net.delay(CLIENTS, i, delay_ms, jitter_ms, seed=seed)
    return f"delay {delay_ms} ms (+- {jitter_ms} ms) between clients and members"


FAULTS: dict[str, Fault] = {
    "isolate-leader": isolate_leader,
    "split": split,
    "bridge": bridge,
    "one-way": one_way,
    "loss": loss,
    "delay": delay,
    "client-delay": client_delay,
}
