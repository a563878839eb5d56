"""Failover time of a broker replica group: SIGKILL of the master to the first PUT_OK on the new one.

    python -m bench.broker_failover [--runs 5] [--mode quorum2of3] [--heartbeat-timeout-ms 2000]
                                    [--concurrency 8] [--size 1024] [--out-dir DIR]

Issue 17's performance section ("Failover: time from the master's kill to the first PUT_OK
on the new master"). Each run starts a fresh group (bench.broker_group: one metaledger node,
``--mode``'s replicas, each with ``--replica-heartbeat-timeout-ms``), sends 1 KiB messages
from ``--concurrency`` producers to the master for a random 1-3 s (a different kill point each
run), kills the master with SIGKILL and measures until a send is acknowledged (code 0) by
another replica. A producer finds the master in metaledger's replica group
(``Client.replica_group``) and, on a refused or failed send, reads it again and retries, as
RocketMQ's producers retry against the route. The time is the sum of metaledger's heartbeat
timeout (detection), the election, the new master's promotion and its in-sync set regrowing
to ``inSyncReplicas`` (seed 004: no PUT_OK before that).

Prints each run and p50/max; writes ``bench/results/broker_failover-<date>.json`` and ``.md``
through bench.report. Every process is started on free 127.0.0.1 ports and stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import broker_group  # noqa: E402
from bench.broker_send import percentile  # noqa: E402
from bench.report import RESULTS_DIR, fmt, machine, timestamp, write_report  # noqa: E402
from bench.rmq_client import ConnectionLost, RemotingConnection, send_v2_request  # noqa: E402


class FailoverProducer:
    """Producers that follow the master through metaledger; every PUT_OK is timed."""

    def __init__(self, group: broker_group.BrokerGroup, size: int) -> None:
        self.group = group
        self.payload = b"x" * size
        self.master = group.master_address
        self.acks: list[tuple[str, float]] = []  # master address, monotonic time
        self.errors: collections.Counter[str] = collections.Counter()
        self.stopping = False
        self._conns: dict[str, RemotingConnection] = {}
        self._opened: list[RemotingConnection] = []
        self._refreshed = 0.0

    async def _refresh(self) -> None:
        await asyncio.sleep(0.02)
        if time.monotonic() - self._refreshed >= 0.1:
            self._refreshed = time.monotonic()
            g = await asyncio.to_thread(self.group._group)
            if g is not None and g.master_address:
                self.master = g.master_address

    async def _conn(self, addr: str) -> RemotingConnection:
        c = self._conns.get(addr)
        if c is None or c.lost is not None:
            c = await asyncio.wait_for(RemotingConnection.open(addr), 2.0)
            self._opened.append(c)  # workers connect at once: every one is closed
            self._conns[addr] = c
        return c

    async def worker(self, w: int) -> None:
        queues = self.group.queues
        while not self.stopping:
            addr = self.master
            request = send_v2_request(
                broker_group.TOPIC, w % queues, self.payload, broker_group.GROUP, queue_nums=queues
            )
            try:
                reply = await (await self._conn(addr)).call(request, timeout_s=5.0)
            except (ConnectionLost, OSError, TimeoutError) as exc:
                self.errors[type(exc).__name__] += 1
                await self._refresh()
                continue
            if reply.code == 0:
                self.acks.append((addr, time.monotonic()))
            else:
                self.errors[f"code {reply.code}"] += 1
                await self._refresh()

    def close(self) -> None:
        for c in self._opened:
            c.close()


async def one_run(args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    mode = broker_group.MODES[args.mode]
    extra = ("--replica-heartbeat-timeout-ms", str(args.heartbeat_timeout_ms))
    group = broker_group.BrokerGroup(mode, queues=4, extra_args=extra)
    await asyncio.to_thread(group.start)
    producer = FailoverProducer(group, args.size)
    tasks = [asyncio.create_task(producer.worker(w)) for w in range(args.concurrency)]
    try:
        kill_after_s = rng.uniform(1.0, 3.0)
        await asyncio.sleep(kill_after_s)
        old = producer.master
        name = next(n for n in group.ports if group.address(n) == old)
        acked_before = len(producer.acks)
        await asyncio.to_thread(group.kill, name)
        killed = time.monotonic()
        deadline = killed + args.timeout
        first: tuple[str, float] | None = None
        while first is None and time.monotonic() < deadline:
            first = next(((a, t) for a, t in producer.acks if a != old and t > killed), None)
            await asyncio.sleep(0.01)
    finally:
        producer.stopping = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        producer.close()
        await asyncio.to_thread(group.stop)
    return {
        "kill_after_s": round(kill_after_s, 2),
        "acked_before_kill": acked_before,
        "failover_s": None if first is None else round(first[1] - killed, 3),
        "old_master": old,
        "new_master": None if first is None else first[0],
        "errors": dict(producer.errors),
    }


def markdown(report: dict[str, Any]) -> str:
    p = report["params"]
    s = report["summary"]
    lines = [
        f"# Broker failover time ({report['date']})",
        "",
        f"Mode {p['mode']}, replica heartbeat timeout {p['heartbeat_timeout_ms']} ms,"
        f" {p['concurrency']} producers of {p['size']} B; SIGKILL of the master to the first"
        " PUT_OK from the new master.",
        "",
        "| run | kill after (s) | acked before | failover (s) | new master | errors |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(report["runs"], 1):
        errs = ", ".join(f"{k} {v}" for k, v in sorted(r["errors"].items()))
        lines.append(
            f"| {i} | {r['kill_after_s']} | {r['acked_before_kill']} |"
            f" {fmt(r['failover_s'], '.3f')} | {r['new_master'] or '-'} | {errs} |"
        )
    lines += [
        "",
        f"p50 {fmt(s['p50_s'], '.3f')} s, max {fmt(s['max_s'], '.3f')} s over {s['runs']} runs"
        f" ({s['failed']} without a new master within {p['timeout']} s).",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.broker_failover",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--mode", choices=[m for m in broker_group.MODES if m != "single"], default="quorum2of3"
    )
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--timeout", type=float, default=60.0, help="give up on a run after (s)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = ap.parse_args(argv)
    if min(args.runs, args.concurrency, args.size, args.heartbeat_timeout_ms) < 1:
        ap.error("--runs, --concurrency, --size and --heartbeat-timeout-ms must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reason = broker_group.unavailable_reason()
    if reason is not None:
        print(f"skipped: {reason}")
        return 1
    date = timestamp()  # the start, as bench.report names the files
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    runs = []
    for i in range(args.runs):
        r = asyncio.run(one_run(args, rng))
        print(
            f"run {i + 1}: kill after {r['kill_after_s']} s -> failover {r['failover_s']} s"
            f" ({r['old_master']} -> {r['new_master']}); errors {r['errors']}",
            flush=True,
        )
        runs.append(r)
    times = sorted(r["failover_s"] for r in runs if r["failover_s"] is not None)
    summary = {
        "runs": len(runs),
        "failed": len(runs) - len(times),
        "p50_s": percentile(times, 0.5),
        "max_s": times[-1] if times else None,
    }
    params = {
        k: getattr(args, k)
        for k in ("mode", "heartbeat_timeout_ms", "concurrency", "size", "timeout")
    }
    params["seed"] = seed
    report = {
        "date": date,
        "machine": machine(),
        "params": params,
        "runs": runs,
        "summary": summary,
    }
    print(f"failover p50 {summary['p50_s']} s, max {summary['max_s']} s over {len(runs)} runs")
    json_path, md_path = write_report("broker_failover", report, markdown(report), args.out_dir)
    print(f"wrote {json_path} and {md_path}")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
