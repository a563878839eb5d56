"""CPU per GET_CONSUME_STATS (208) of a group that lags on every queue: an in-process broker
replica and its client in one process, so the figure is both sides' CPU per request.

``python -m bench.consume_stats_cpu [--tree DIR] [--n 2000]``: with ``--tree`` the broker is
that checkout's (``--tree /work/main`` for the baseline: this file runs as a script with
that tree first on PYTHONPATH, so the two trees never share modules); best of 3 rounds of
``--n`` requests after 200 warm-up ones.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

QUEUES = 4


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _measure(n: int) -> float:
    from rmq.headers import GetConsumeStatsHeader
    from tests.unit.broker.front.conftest import TOPIC, Ctx, run_broker

    best: list[float] = []

    async def scenario(ctx: Ctx) -> None:
        for i in range(5 * QUEUES):
            assert (await ctx.send(f"m{i}".encode(), queue_id=i % QUEUES)).code == 0
        for q in range(QUEUES):
            ext = {"consumerGroup": "G", "topic": TOPIC, "queueId": q, "commitOffset": 2}
            assert (await ctx.client.request(15, ext)).code == 0
        header = GetConsumeStatsHeader("G", TOPIC)
        for _ in range(200):
            await ctx.client.call(header.request())
        for _ in range(3):
            c0 = _cpu()
            for _ in range(n):
                await ctx.client.call(header.request())
            best.append((_cpu() - c0) / n * 1e6)

    with tempfile.TemporaryDirectory() as d:
        run_broker(Path(d), scenario)
    return min(best)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tree", help="run the broker of this checkout (default: this one)")
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inner:
        print(f"{_measure(args.n):.0f}")
        return
    if args.tree:
        tree = str(Path(args.tree).resolve())
        out = subprocess.run(
            [sys.executable, __file__, "--inner", "--n", str(args.n)],
            capture_output=True, check=True, cwd=tree, env={**os.environ, "PYTHONPATH": tree},
        )  # fmt: skip
        us = float(out.stdout.decode().split()[-1])
        where = args.tree
    else:
        us, where = _measure(args.n), "this tree"
    print(f"{where}: {us:.0f} µs CPU per GET_CONSUME_STATS ({QUEUES} lagging queues)")


if __name__ == "__main__":
    main()
