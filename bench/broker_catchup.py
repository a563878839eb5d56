"""Catch-up pull throughput: a consumer pulling messages already stored, from offset 0.

    python -m bench.broker_catchup [--count 100000] [--size 1024] [--mode single] [--queues 4]
                                   [--batch 32] [--concurrency 64] [--out-dir DIR]

Issue 17's performance section ("pull throughput of a consumer catching up on 1M messages";
``--count 1000000`` for the full size, the default is smaller so a run takes a minute). A
fresh group (bench.broker_group) is filled with ``--count`` messages of ``--size`` bytes
(``--concurrency`` producers, SEND_MESSAGE_V2 acknowledged), then one consumer, one
connection, one pull loop per queue, PULL_MESSAGE with ``--batch`` messages per request
(the Java consumer's ``pullBatchSize``, 32; the broker caps a pull at 32 messages and
256 KiB), reads every queue from offset 0 to its end. Reported: messages/s and MB/s of
bodies (and of the pulled bytes on the wire, stored records with their headers), the number
of pulls and the fill rate. Every body pulled is checked to be the size sent.

Writes ``bench/results/broker_catchup-<date>.json`` and ``.md`` through bench.report. Every
process is started on free 127.0.0.1 ports and stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import broker_group  # noqa: E402
from bench.report import RESULTS_DIR, machine, timestamp, write_report  # noqa: E402
from bench.rmq_client import (  # noqa: E402
    PULL_NOT_FOUND,
    PULL_OFFSET_MOVED,
    PULL_RETRY_IMMEDIATELY,
    SUCCESS,
    RemotingConnection,
    RmqTarget,
    SendFailed,
    heartbeat_request,
    pull_request,
    record_bodies,
)
from rmq.codec import RemotingCommand  # noqa: E402

GET_MAX_OFFSET = 30


async def fill(target: RmqTarget, count: int, size: int, concurrency: int) -> float:
    """Send ``count`` messages (the warm-up's one included); the fill rate, messages/s."""
    payload = b"f" * size
    left = count - 1  # RmqTarget.open sent one
    t0 = time.perf_counter()

    async def sender(w: int) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await target.send(w, payload)

    await asyncio.gather(*(sender(w) for w in range(concurrency)))
    return count / (time.perf_counter() - t0)


async def pull_queue(
    conn: RemotingConnection, queue_id: int, batch: int, size: int, totals: dict[str, int]
) -> None:
    reply = await conn.call(
        RemotingCommand.request(GET_MAX_OFFSET, {"topic": broker_group.TOPIC, "queueId": queue_id})
    )
    end, offset = int(reply.ext_fields["offset"]), 0
    while offset < end:
        reply = await conn.call(pull_request(broker_group.TOPIC, queue_id, offset, 0, batch))
        totals["pulls"] += 1
        if reply.code == SUCCESS:
            bodies = record_bodies(reply.body)
            totals["messages"] += len(bodies)
            totals["body_bytes"] += sum(len(b) for b in bodies)
            totals["wire_bytes"] += len(reply.body)
            totals["wrong_size"] += sum(len(b) not in (size, len(b"warm-up")) for b in bodies)
        elif reply.code not in (PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED):
            raise SendFailed(reply.code, f"pull: {reply.remark}")
        offset = int(reply.ext_fields.get("nextBeginOffset", offset))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    mode = broker_group.MODES[args.mode]
    group = broker_group.BrokerGroup(mode, queues=args.queues)
    await asyncio.to_thread(group.start)
    try:
        target = RmqTarget(
            group.master_address,
            broker_group.TOPIC,
            broker_group.GROUP,
            queues=args.queues,
            connections=4,
        )
        await target.open()
        print(f"filling {args.count} messages of {args.size} B ...", flush=True)
        fill_rate = await fill(target, args.count, args.size, args.concurrency)
        await target.close()
        print(f"  filled at {fill_rate:.0f} msgs/s; pulling from offset 0", flush=True)
        conn = await RemotingConnection.open(group.master_address)
        await conn.call(heartbeat_request(broker_group.TOPIC))
        totals = dict.fromkeys(("pulls", "messages", "body_bytes", "wire_bytes", "wrong_size"), 0)
        t0 = time.perf_counter()
        await asyncio.gather(
            *(pull_queue(conn, q, args.batch, args.size, totals) for q in range(args.queues))
        )
        elapsed = time.perf_counter() - t0
        conn.close()
    finally:
        await asyncio.to_thread(group.stop)
    return {
        "messages": totals["messages"],
        "pulls": totals["pulls"],
        "seconds": round(elapsed, 3),
        "msgs_per_s": round(totals["messages"] / elapsed),
        "body_mb_per_s": round(totals["body_bytes"] / elapsed / 1e6, 1),
        "wire_mb_per_s": round(totals["wire_bytes"] / elapsed / 1e6, 1),
        "wrong_size": totals["wrong_size"],
        "fill_msgs_per_s": round(fill_rate),
    }


def markdown(report: dict[str, Any]) -> str:
    p, r = report["params"], report["result"]
    return "\n".join(
        [
            f"# Broker catch-up pull throughput ({report['date']})",
            "",
            f"Mode {p['mode']}: {p['count']} messages of {p['size']} B stored (filled at"
            f" {r['fill_msgs_per_s']} msgs/s), then one consumer pulls {p['queues']} queues"
            f" from offset 0, {p['batch']} messages per PULL_MESSAGE.",
            "",
            "| messages | pulls | seconds | msgs/s | body MB/s | wire MB/s |",
            "| --- | --- | --- | --- | --- | --- |",
            f"| {r['messages']} | {r['pulls']} | {r['seconds']} | {r['msgs_per_s']} |"
            f" {r['body_mb_per_s']} | {r['wire_mb_per_s']} |",
        ]
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.broker_catchup",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--count", type=int, default=100_000, help="messages stored (1000000: 1M)")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--mode", choices=list(broker_group.MODES), default="single")
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32, help="maxMsgNums of each pull (32)")
    ap.add_argument("--concurrency", type=int, default=64, help="producers while filling")
    ap.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = ap.parse_args(argv)
    if min(args.count, args.size, args.queues, args.batch, args.concurrency) < 1:
        ap.error("--count, --size, --queues, --batch and --concurrency must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reason = broker_group.unavailable_reason()
    if reason is not None:
        print(f"skipped: {reason}")
        return 1
    date = timestamp()  # the start, as bench.report names the files
    result = asyncio.run(run(args))
    params = {
        k: getattr(args, k) for k in ("mode", "count", "size", "queues", "batch", "concurrency")
    }
    report = {"date": date, "machine": machine(), "params": params, "result": result}
    print(
        f"catch-up: {result['messages']} messages in {result['seconds']} s:"
        f" {result['msgs_per_s']} msgs/s, {result['body_mb_per_s']} MB/s of bodies"
        f" ({result['wire_mb_per_s']} MB/s on the wire), {result['pulls']} pulls"
    )
    json_path, md_path = write_report("broker_catchup", report, markdown(report), args.out_dir)
    print(f"wrote {json_path} and {md_path}")
    ok = result["messages"] == args.count and result["wrong_size"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
