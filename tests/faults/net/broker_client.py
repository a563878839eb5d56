"""The broker workload's clients, run inside the bridge's namespace (``ip netns exec``),
where every broker replica and the metaledger node are reachable.

``setup``: once the first replica is the group's master, the quorum policy (3 replicas, 2
in sync, no automatic shrinking), a line ``policy``; once all three are in the in-sync set
and the topic is created on the group, a line ``ready``.

``produce``: one worker per queue sends SEND_MESSAGE_V2 (WAIT=true) with bodies
``q<queue>-<seq>|<filler>``, one at a time, retrying the same body until a replica answers
PUT_OK; after any other answer, an error or a timeout it tries the next replica (so a
worker that still reaches a deposed master keeps sending to it: clients on both sides of a
split). One JSON line per attempt (``Send`` in tests/faults/net/broker_checker.py), one per
change of the group as metaledger tells it (``group``), and one per message a consumer
pulled while the faults ran (``seen``; it pulls from the replicas in turn, slaves
included), flushed as they go.

``drain``: after the last heal, waits until the group has a master, every replica in sync
and every replica's commit log at the master's end, then pulls every queue of the topic
from the master from offset 0: one JSON line per stored message (``Stored``), then one
``{"done": ...}`` line.

    python -m tests.faults.net.broker_client setup --endpoint IP:PORT --group G --replicas A,B,C
    python -m tests.faults.net.broker_client produce ... --out FILE [--seconds S]
    python -m tests.faults.net.broker_client drain ... --out FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
import time
import zlib
from typing import IO, Any

from nameserver.client import Client, GroupPolicy, QueueData
from rmq.codes import RequestCode
from rmq.connection import RemotingConnection
from rmq.message import StoredMessage, decode_records, properties_text
from rmq.msgid import parse_offset_msg_id

TOPIC = "NetFaultTopic"
QUEUES = 4
FILLER = bytes(range(64)) * 2
PERM_RW = 6
NOT_YET = (19, 20, 21)  # PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED


def _print(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def _group_line(client: Client, group: str) -> dict[str, Any]:
    g = client.replica_group(group)
    return {
        "t": time.monotonic(),
        "master_id": g.master_id,
        "master": g.master_address,
        "epoch": g.master_epoch,
        "isr": sorted(g.sync_state_set),
        "isr_epoch": g.sync_state_set_epoch,
        "ids": {r.address: r.broker_id for r in g.replicas},
        "alive": sorted(r.broker_id for r in g.replicas if r.alive),
    }


def _until(pred: Any, timeout: float, what: str) -> Any:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            value = pred()
        except Exception as exc:  # metaledger or a replica not there yet
            value, last = None, exc
        if value:
            return value
        time.sleep(0.1)  # polling a condition with a deadline
    raise SystemExit(f"{what}: not within {timeout:g} s (last error: {last!r})")


# ---------------------------------------------------------------------------- setup
def setup(args: argparse.Namespace) -> int:
    replicas = args.replicas.split(",")
    client = Client([args.endpoint], timeout_s=5.0)
    try:
        _until(lambda: _group_line(client, args.group)["master"] == replicas[0], 60, "first master")
        policy = GroupPolicy(3, 2, 1, False, 1 << 30)
        _until(lambda: client.replica_set_policy(args.group, policy) or True, 30, "policy")
        _print({"step": "policy"})
        _until(lambda: len(_group_line(client, args.group)["isr"]) == 3, 90, "in-sync set of 3")
        queues = [QueueData(args.group, QUEUES, QUEUES, PERM_RW)]
        _until(lambda: client.route_topic_create(TOPIC, queues), 30, "topic")
        _print({"step": "ready", **_group_line(client, args.group)})
    finally:
        client.close()
    return 0


# ---------------------------------------------------------------------------- produce
def _send_header(queue_id: int) -> dict[str, object]:
    return {
        "a": "net-producer", "b": TOPIC, "c": "TBW102", "d": QUEUES, "e": queue_id, "f": 0,
        "g": int(time.time() * 1000), "h": 0, "i": properties_text({"WAIT": "true"}), "j": 0,
        "k": False, "m": False,
    }  # fmt: skip


class Producer:
    def __init__(self, replicas: list[str], out: IO[str], timeout_s: float, pause_s: float) -> None:
        self.replicas = replicas
        self.pause_s = pause_s
        self.out = out
        self.timeout_s = timeout_s
        self.conns: dict[tuple[int, str], RemotingConnection] = {}
        self.stopping = False

    async def _conn(self, w: int, addr: str) -> RemotingConnection:
        c = self.conns.get((w, addr))
        if c is None or not c.usable:
            host, _, port = addr.rpartition(":")
            c = await RemotingConnection.connect(host, int(port), timeout_s=1.0)
            self.conns[(w, addr)] = c
        return c

    def _drop(self, w: int, addr: str) -> None:
        c = self.conns.pop((w, addr), None)
        if c is not None:
            c.close()

    async def worker(self, q: int) -> None:
        target = q % len(self.replicas)
        seq = 0
        while not self.stopping:
            mid = f"q{q}-{seq}"
            body = mid.encode() + b"|" + FILLER
            crc = zlib.crc32(body)
            while not self.stopping:
                addr = self.replicas[target]
                start = time.monotonic()
                row: dict[str, Any] = {"id": mid, "q": q, "seq": seq, "crc": crc}
                row.update(replica=addr, start=start)
                connected = False
                try:
                    c = await self._conn(q, addr)
                    connected = True
                    reply = await c.request(
                        RequestCode.SEND_MESSAGE_V2, _send_header(q), body, self.timeout_s
                    )
                except (OSError, TimeoutError) as exc:
                    self._drop(q, addr)
                    # not connected: certainly not stored; else it may have been
                    row.update(status="info" if connected else "fail", code=type(exc).__name__)
                else:
                    row.update(code=reply.code, remark=reply.remark or "")
                    if reply.code == 0:
                        ext = reply.ext_fields
                        row.update(
                            status="ok",
                            queue_offset=int(ext["queueOffset"]),
                            phys=parse_offset_msg_id(str(ext["msgId"])).offset,
                        )
                    else:
                        row.update(status="info")
                row["end"] = time.monotonic()
                self.out.write(json.dumps(row) + "\n")
                if row["status"] == "ok":
                    break
                target = (target + 1) % len(self.replicas)
                await asyncio.sleep(0.02)
            seq += 1
            await asyncio.sleep(self.pause_s)  # a steady stream, not the machine's limit

    async def consumer(self) -> None:
        """Pulls every queue from the replicas in turn (masters and slaves alike), from
        where it got to, and records each message seen."""
        offsets = [0] * QUEUES
        target = 0
        while not self.stopping:
            addr = self.replicas[target]
            target = (target + 1) % len(self.replicas)
            for q in range(QUEUES):
                try:
                    c = await self._conn(-1, addr)
                    reply = await c.request(
                        RequestCode.PULL_MESSAGE, pull_header(q, offsets[q]), b"", self.timeout_s
                    )
                except (OSError, TimeoutError):
                    self._drop(-1, addr)
                    break
                if reply.code != 0:
                    continue
                now = time.monotonic()
                for m in decode_records(reply.body):
                    row = seen_row(m)
                    row.update(replica=addr, t=now)
                    self.out.write(json.dumps(row) + "\n")
                offsets[q] = max(offsets[q], int(reply.ext_fields.get("nextBeginOffset", 0)))
            await asyncio.sleep(0.05)


def pull_header(queue_id: int, offset: int) -> dict[str, object]:
    return {
        "consumerGroup": "net-checker", "topic": TOPIC, "queueId": queue_id,
        "queueOffset": offset, "maxMsgNums": 32, "sysFlag": 0x4, "commitOffset": 0,
        "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
        "expressionType": "TAG",
    }  # fmt: skip


def seen_row(m: StoredMessage) -> dict[str, Any]:
    """A pulled message as the checker reads it (``seen``: its id)."""
    mid = m.body.split(b"|", 1)[0].decode(errors="replace")
    return {
        "seen": mid, "q": m.queue_id, "queue_offset": m.queue_offset,
        "phys": m.physical_offset, "crc": zlib.crc32(m.body),
    }  # fmt: skip


def _watch_group(
    client: Client, group: str, out: IO[str], stop: threading.Event, lock: threading.Lock
) -> None:
    last: tuple[object, ...] | None = None
    while not stop.is_set():
        try:
            g = _group_line(client, group)
        except Exception:  # metaledger out of reach from here: try again
            stop.wait(0.2)
            continue
        key = (g["master_id"], g["epoch"], tuple(g["isr"]), g["isr_epoch"], tuple(g["alive"]))
        if key != last:
            last = key
            with lock:
                out.write(json.dumps({"group": g}) + "\n")
        stop.wait(0.1)


async def _produce(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    with open(args.out, "a", buffering=1) as out:
        lock = threading.Lock()
        client = Client([args.endpoint], timeout_s=2.0)
        watch_stop = threading.Event()
        watcher = threading.Thread(
            target=_watch_group, args=(client, args.group, out, watch_stop, lock), daemon=True
        )
        watcher.start()
        p = Producer(
            args.replicas.split(","), _Locked(out, lock), args.timeout_s, args.pause_ms / 1000
        )
        tasks = [asyncio.create_task(p.worker(q)) for q in range(QUEUES)]
        tasks.append(asyncio.create_task(p.consumer()))
        try:
            await asyncio.wait_for(stop.wait(), args.seconds)
        except TimeoutError:
            pass
        p.stopping = True
        _, late = await asyncio.wait(tasks, timeout=args.timeout_s + 2)
        for t in late:
            t.cancel()
        watch_stop.set()
        watcher.join(5)
        for c in p.conns.values():
            c.close()
        client.close()


class _Locked:
    """Writes of whole lines under the watcher's lock."""

    def __init__(self, out: IO[str], lock: threading.Lock) -> None:
        self._out, self._lock = out, lock

    def write(self, text: str) -> None:
        with self._lock:
            self._out.write(text)


def produce(args: argparse.Namespace) -> int:
    asyncio.run(_produce(args))
    return 0


# ---------------------------------------------------------------------------- drain
async def _info(addr: str) -> dict[str, str]:
    host, _, port = addr.rpartition(":")
    c = await RemotingConnection.connect(host, int(port), timeout_s=2.0)
    try:
        r = await c.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}, timeout_s=3.0)
        table: dict[str, str] = json.loads(r.body)["table"]
        return table
    finally:
        c.close()


async def _drain(args: argparse.Namespace) -> None:
    replicas = args.replicas.split(",")
    client = Client([args.endpoint], timeout_s=5.0)
    began = time.monotonic()
    deadline = began + args.timeout_s
    g: dict[str, Any] = {}
    infos: list[dict[str, str]] = []
    while time.monotonic() < deadline:
        try:
            g = await asyncio.to_thread(_group_line, client, args.group)
            infos = [await _info(a) for a in replicas]
        except Exception:
            await asyncio.sleep(0.2)
            continue
        ends = {i["commitLogMaxOffset"] for i in infos}
        master = next((i for i in infos if i["brokerAddr"] == g["master"]), None)
        if (
            len(g["isr"]) == 3
            and len(ends) == 1
            and master is not None
            and master["writable"] == "true"
            and master["confirmOffset"] == master["commitLogMaxOffset"]
        ):
            break
        await asyncio.sleep(0.2)
    else:
        raise SystemExit(f"the group did not settle: {g} {infos}")
    settled = time.monotonic() - began
    addr = g["master"]
    host, _, port = addr.rpartition(":")
    c = await RemotingConnection.connect(host, int(port), timeout_s=2.0)
    count = 0
    with open(args.out, "w") as out:
        for q in range(QUEUES):
            r = await c.request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": q})
            end = int(r.ext_fields["offset"])
            offset = 0
            while offset < end:
                if time.monotonic() > deadline + 60:
                    raise SystemExit(f"queue {q}: stuck at {offset} of {end}")
                reply = await c.request(RequestCode.PULL_MESSAGE, pull_header(q, offset))
                if reply.code == 0:
                    for m in decode_records(reply.body):
                        row = seen_row(m)
                        row["id"] = row.pop("seen")
                        out.write(json.dumps(row) + "\n")
                        count += 1
                elif reply.code not in NOT_YET:
                    raise SystemExit(f"pull queue {q} at {offset}: {reply.code} {reply.remark}")
                else:
                    await asyncio.sleep(0.05)
                offset = int(reply.ext_fields.get("nextBeginOffset", offset))
        out.write(json.dumps({"done": {"group": g, "settled_s": settled, "messages": count}}))
        out.write("\n")
    c.close()
    client.close()


def drain(args: argparse.Namespace) -> int:
    asyncio.run(_drain(args))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests.faults.net.broker_client")
    p.add_argument("command", choices=["setup", "produce", "drain"])
    p.add_argument("--endpoint", required=True, help="the metaledger node's gRPC address")
    p.add_argument("--group", required=True)
    p.add_argument("--replicas", required=True, help="the replicas' remoting addresses")
    p.add_argument("--out", default="")
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--timeout-s", type=float, default=3.0)
    p.add_argument("--pause-ms", type=float, default=5.0, help="between a worker's sends")
    args = p.parse_args(argv)
    if args.command == "drain" and args.timeout_s == 3.0:
        args.timeout_s = 60.0
    return {"setup": setup, "produce": produce, "drain": drain}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
