"""The partition nemesis for a broker group: members 0-2 of the :class:`Net` are the
replicas, member 3 the metaledger node; ``master`` is the replica metaledger names master.
The clients (the bridge) reach every member throughout.

- ``isolate-master``: the master sees no replica and not metaledger (it fences itself once
  its heartbeats go unanswered; metaledger elects another from the in-sync set).
- ``split``: one replica (the master or not, from the seed) apart from the other two and
  metaledger.
- ``bridge``: one replica sees both others, they do not see each other; metaledger on one
  side (seeded), seen by that side and the middle.
- ``one-way``: the master hears nobody (replicas nor metaledger); its packets still go out.
- ``loss``: a fifth of the packets between any two members dropped at random, both ways.
- ``delay``: every packet between any two members held 50-150 ms (seeded), both ways.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tests.faults.net import nemesis
from tests.faults.net.netns import Net

REPLICAS = (0, 1, 2)
META = 3

Fault = Callable[[Net, int, random.Random], str]


def isolate_master(net: Net, master: int, rng: random.Random) -> str:
    net.partition([[master], [i for i in (*REPLICAS, META) if i != master]])
    return f"isolate-master r{master}"


def split(net: Net, master: int, rng: random.Random) -> str:
    alone = rng.choice(REPLICAS)
    net.partition([[alone], [i for i in (*REPLICAS, META) if i != alone]])
    role = "master" if alone == master else "slave"
    return f"split r{alone} ({role}) | the rest"


def bridge(net: Net, master: int, rng: random.Random) -> str:
    order = list(REPLICAS)
    rng.shuffle(order)
    middle, left, right = order
    if rng.random() < 0.5:
        left, right = right, left
    net.partition([[left, META], [right]])
    return f"bridge r{middle} sees r{left} (with metaledger) and r{right}"


def one_way(net: Net, master: int, rng: random.Random) -> str:
    for i in (*REPLICAS, META):
        if i != master:
            net.cut(i, master, one_way=True)
    return f"one-way: r{master} (master) hears nobody"


FAULTS: dict[str, Fault] = {
    "isolate-master": isolate_master,
    "split": split,
    "bridge": bridge,
    "one-way": one_way,
    "loss": nemesis.loss,  # every member, metaledger included
    "delay": nemesis.delay,  # likewise
}
