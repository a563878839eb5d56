"""The RocketMQ page's consumer groups, clients and message lookup against a real broker
replica (in process) with many groups: wall time and CPU (this process: the console's
functions and the broker both) per request.

``python -m bench.console_groups [--groups 1000] [--rounds 5]``: every group commits an
offset on each of the topic's 4 queues (so every group lags on every queue: the most store
reads GET_CONSUME_STATS does), then the first and a middle page of 50 groups, one group's
clients, and a lookup by key are asked ``--rounds`` times each.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from console import rocketmq_groups
from nameserver.client import BrokerGroup, BrokerInfo, ClusterInfo, QueueData, Route
from tests.unit.broker.front.conftest import TOPIC, Ctx, props, run_broker

QUEUES = 4


class Routes:
    """The two reads the page makes of metaledger, answered from memory."""

    def __init__(self, master: str) -> None:
        self.master = master

    def route_get(self, topic: str) -> Route:
        group = BrokerGroup("c", "b1", {0: self.master}, "", False)
        return Route(topic, [group], [QueueData("b1", QUEUES, QUEUES, 6)], "", 1)

    def route_cluster_info(self) -> ClusterInfo:
        return ClusterInfo({"c": ["b1"]}, [BrokerInfo("c", "b1", 0, self.master, "", "", 6000, 1)], 1)  # fmt: skip


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _time(name: str, rounds: int, fn: Callable[[], Any]) -> None:
    walls, cpus = [], []
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), _cpu()
        await asyncio.to_thread(fn)
        walls.append((time.perf_counter() - t0) * 1000)
        cpus.append((_cpu() - c0) * 1e6)
    print(
        f"| {name} | {statistics.median(walls):.1f} | {max(walls):.1f} |"
        f" {statistics.median(cpus):,.0f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()

    async def scenario(ctx: Ctx) -> None:
        for i in range(10 * QUEUES):
            r = await ctx.send(
                f"m{i}".encode(), queue_id=i % QUEUES, properties=props(KEYS=f"k{i}")
            )
            assert r.code == 0, r.remark
        for g in range(args.groups):
            for q in range(QUEUES):
                ext = {"consumerGroup": f"G{g:05d}", "topic": TOPIC, "queueId": q, "commitOffset": 2}  # fmt: skip
                assert (await ctx.client.request(15, ext)).code == 0
        c: Any = Routes(f"127.0.0.1:{ctx.port}")
        print(f"{args.groups} groups, each lagging on {QUEUES} queues")
        print("| request | median ms | worst ms | CPU µs/request |\n|---|---:|---:|---:|")
        await _time("groups, first 50", args.rounds, lambda: rocketmq_groups.group_page(c, "", 50))
        mid = f"G{args.groups // 2:05d}"
        await _time("groups, 50 mid-way", args.rounds, lambda: rocketmq_groups.group_page(c, mid, 50))  # fmt: skip
        await _time("a group's clients", args.rounds, lambda: rocketmq_groups.group_clients(c, mid))
        await _time("a message by key", args.rounds, lambda: rocketmq_groups.find_messages(c, TOPIC, "k7"))  # fmt: skip

    with tempfile.TemporaryDirectory() as d:
        run_broker(Path(d), scenario)


if __name__ == "__main__":
    main()
