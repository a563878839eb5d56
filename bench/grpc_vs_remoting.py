"""One broker through its RocketMQ 5 gRPC front against its remoting port: sends/s, and
received-and-acked messages/s, with the same message size and concurrency.

    python -m bench.grpc_vs_remoting [--paths grpc-send,remoting-send,client5-send,
                                              grpc-receive,remoting-pop,remoting-pull]
                                     [--size 1024] [--concurrency 32] [--duration 3]
                                     [--warmup 1] [--count N] [--connections 4] [--queues 4]
                                     [--messages 20000] [--rmq5-venv DIR]
                                     [--loop uvloop|asyncio] [--out-dir DIR] [--no-plot]

One metaledger node and one broker replica (``bench.broker_group`` mode ``single``, with
``--listen-grpc``), one topic of ``--queues`` queues. Every path runs on this one process pair,
one after the other, each a fresh client:

    grpc-send      a raw ``grpc.aio`` apache.rocketmq.v2 stub in this process: SendMessage of
                   one message, ``--connections`` channels (what a 5.x client sends)
    remoting-send  SEND_MESSAGE_V2 over ``--connections`` pipelined remoting connections
                   (bench.rmq_client, as bench.broker_send)
    client5-send   RocketMQ 5's real Python client (``rocketmq-python-client``) as a
                   subprocess (bench/grpc5_send.py), ``--concurrency`` threads each awaiting its
                   receipt; needs ``--rmq5-venv DIR`` (made there with pip when it has no
                   bin/python), skipped without it
    grpc-receive   ReceiveMessage (batch 32, long polling) then one AckMessage of the batch
    remoting-pop   POP_MESSAGE (32, long polling) then one BATCH_ACK_MESSAGE of the batch
    remoting-pull  PULL_MESSAGE (32, long polling) per queue, one worker per queue (a pull
                   consumer acks nothing: it commits offsets)

Sends: ``--concurrency`` tasks, each sending and awaiting the acknowledgement, measured for
``--duration`` s after ``--warmup`` s (bench.broker_send.measure: sends/s, p50/p99 of a send).
Receives: ``--messages`` messages are sent first (over remoting, to a topic of their own),
then each path drains them in its own consumer group with ``--concurrency`` workers (pull: one
per queue), measured from its first round (no warm-up: the messages wait already) until
``--duration`` s or until the group has them all: messages/s and p50/p99 of one
receive-and-ack round. The report gives each gRPC path's ratio to its remoting counterpart.

Results: ``bench/results/grpc_vs_remoting-<date>.json`` and ``.md`` (bench.report) and, with
matplotlib, a ``.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from bench import broker_group  # noqa: E402
from bench.broker_send import _machine_pct, _reason, _run_loop, latency_summary, measure  # noqa: E402
from bench.report import RESULTS_DIR, fmt, machine, pyplot, result_stem, timestamp, write_report  # noqa: E402
from bench.rmq_client import RemotingConnection, RmqTarget, SendFailed, pull_request  # noqa: E402
from broker.grpc.front import GRPC_OPTIONS  # noqa: E402
from nameserver.loadgen.procstats import machine_busy_jiffies, process_cpu_s  # noqa: E402
from protos.apache.rocketmq.v2 import definition_pb2 as v2  # noqa: E402
from protos.apache.rocketmq.v2 import service_pb2 as svc  # noqa: E402
from protos.apache.rocketmq.v2 import service_pb2_grpc as svc_grpc  # noqa: E402
from rmq.codec import RemotingCommand  # noqa: E402
from rmq.codes import RequestCode, ResponseCode  # noqa: E402
from rmq.headers import PopMessageHeader, PopMessageResponseHeader  # noqa: E402
from rmq.message import decode_records  # noqa: E402
from rmq.msgid import uniq_key  # noqa: E402

SENDS = ("grpc-send", "remoting-send", "client5-send")
RECEIVES = ("grpc-receive", "remoting-pop", "remoting-pull")
PATHS = SENDS + RECEIVES
#: (numerator, denominator): each gRPC path against its remoting counterpart
RATIOS = (
    ("grpc-send", "remoting-send"),
    ("client5-send", "remoting-send"),
    ("grpc-receive", "remoting-pop"),
    ("grpc-receive", "remoting-pull"),
)
RECEIVE_TOPIC = "BenchReceive"  # the receive paths' own topic: the sends do not land in it
BATCH = 32
POLL_MS = 5_000  # the gRPC front's shortest long poll (the proxy's)
INVISIBLE_MS = 60_000
META = (("x-mq-client-id", f"bench@{os.getpid()}"), ("x-mq-protocol", "v2"))
GRPC5 = Path(__file__).with_name("grpc5_send.py")


# ----------------------------------------------------------------------------- send targets
class GrpcSendTarget:
    """SendMessage of one message over ``channels`` gRPC channels; worker ``w`` on channel
    ``w % channels`` (bench.broker_send.Target)."""

    def __init__(self, endpoint: str, topic: str, channels: int = 4) -> None:
        self.endpoint, self.topic, self.channels = endpoint, topic, channels
        self._chans: list[grpc.aio.Channel] = []
        self._stubs: list[Any] = []

    async def open(self, timeout_s: float = 30.0) -> None:
        # a subchannel pool per channel: equal channels would share one connection
        options = [*GRPC_OPTIONS[1:], ("grpc.use_local_subchannel_pool", 1)]
        for _ in range(self.channels):
            self._chans.append(grpc.aio.insecure_channel(self.endpoint, options=options))
            self._stubs.append(svc_grpc.MessagingServiceStub(self._chans[-1]))
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return await self.send(0, b"warm-up")
            except (SendFailed, grpc.aio.AioRpcError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def send(self, worker: int, payload: bytes) -> None:
        request = svc.SendMessageRequest()
        m = request.messages.add(body=payload)
        m.topic.name = self.topic
        m.system_properties.message_id = uniq_key()
        m.system_properties.message_type = v2.NORMAL
        m.system_properties.born_timestamp.GetCurrentTime()
        stub = self._stubs[worker % len(self._stubs)]
        answer = await stub.SendMessage(request, metadata=META, timeout=10)
        if answer.status.code != v2.OK:
            raise SendFailed(answer.status.code, answer.status.message)

    async def consume(self, on_payload: Callable[[bytes], None]) -> None:
        raise NotImplementedError("grpc-send measures sends only")

    async def close(self) -> None:
        for chan in self._chans:
            await chan.close()
        self._chans.clear()


# -------------------------------------------------------------------------- receive paths
class GrpcReceive:
    """ReceiveMessage (a batch, long polling) then one AckMessage of what came."""

    def __init__(self, endpoint: str, topic: str, group: str) -> None:
        self.endpoint, self.topic, self.group = endpoint, topic, group
        self._chan: grpc.aio.Channel | None = None
        self._stub: Any = None

    async def round(self, worker: int) -> int:
        if self._chan is None:  # on the loop that runs the rounds
            self._chan = grpc.aio.insecure_channel(self.endpoint, options=GRPC_OPTIONS[1:])
            self._stub = svc_grpc.MessagingServiceStub(self._chan)
        request = svc.ReceiveMessageRequest(batch_size=BATCH, auto_renew=False)
        request.group.name = self.group
        request.message_queue.topic.name = self.topic
        request.message_queue.id = -1
        request.filter_expression.type = v2.TAG
        request.filter_expression.expression = "*"
        request.invisible_duration.FromMilliseconds(INVISIBLE_MS)
        request.long_polling_timeout.FromMilliseconds(POLL_MS)
        ack = svc.AckMessageRequest()
        ack.group.name, ack.topic.name = self.group, self.topic
        stream = self._stub.ReceiveMessage(request, metadata=META, timeout=POLL_MS / 1000 + 5)
        async for r in stream:
            if r.HasField("message"):
                sp = r.message.system_properties
                ack.entries.add(message_id=sp.message_id, receipt_handle=sp.receipt_handle)
            elif r.HasField("status") and r.status.code not in (v2.OK, v2.MESSAGE_NOT_FOUND):
                raise SendFailed(r.status.code, f"receive: {r.status.message}")
        if ack.entries:
            answer = await self._stub.AckMessage(ack, metadata=META, timeout=10)
            if answer.status.code != v2.OK:
                raise SendFailed(answer.status.code, f"ack: {answer.status.message}")
        return len(ack.entries)

    async def close(self) -> None:
        if self._chan is not None:
            await self._chan.close()


def batch_ack_body(group: str, topic: str, broker: str, header: Any, records: list[Any]) -> bytes:
    """BATCH_ACK_MESSAGE's body for one POP answer: per queue its start offset and a Java
    ``BitSet`` (``toByteArray``, base64) of the popped offsets from it (``BatchAck.java``)."""
    starts = {}
    for item in (header.start_offset_info or "").split(";"):
        if item:
            _, q, start = item.split(" ")
            starts[int(q)] = int(start)
    bits: dict[int, int] = collections.defaultdict(int)
    for m in records:
        bits[m.queue_id] |= 1 << (m.queue_offset - starts[m.queue_id])
    acks = [
        {
            "c": group, "t": topic, "so": starts[q], "q": q, "rq": header.revive_qid,
            "pt": header.pop_time, "it": header.invisible_time,
            "b": base64.b64encode(b.to_bytes((b.bit_length() + 7) // 8, "little")).decode(),
        }
        for q, b in bits.items()
    ]  # fmt: skip
    return json.dumps({"brokerName": broker, "acks": acks}).encode()


class RemotingPop:
    """POP_MESSAGE (a batch, long polling) then one BATCH_ACK_MESSAGE of what came."""

    def __init__(self, address: str, topic: str, group: str, connections: int) -> None:
        self.address, self.topic, self.group, self.connections = address, topic, group, connections
        self._conns: list[RemotingConnection] = []

    async def round(self, worker: int) -> int:
        if not self._conns:
            self._conns = [
                await RemotingConnection.open(self.address) for _ in range(self.connections)
            ]
        conn = self._conns[worker % len(self._conns)]
        pop = PopMessageHeader(
            consumer_group=self.group, topic=self.topic, queue_id=-1, max_msg_nums=BATCH,
            invisible_time=INVISIBLE_MS, poll_time=POLL_MS, born_time=int(time.time() * 1000),
            init_mode=0, exp_type="TAG", exp="*", order=False, attempt_id=None,
        )  # fmt: skip
        reply = await conn.call(pop.request(), timeout_s=POLL_MS / 1000 + 5)
        if reply.code == ResponseCode.POLLING_TIMEOUT:
            return 0
        if reply.code != ResponseCode.SUCCESS:
            raise SendFailed(reply.code, f"pop: {reply.remark}")
        records = decode_records(reply.body, check_crc=False)
        header = PopMessageResponseHeader.from_command(reply)
        body = batch_ack_body(self.group, self.topic, broker_group.GROUP, header, records)
        ack = await conn.call(RemotingCommand.request(RequestCode.BATCH_ACK_MESSAGE, body=body))
        if ack.code != ResponseCode.SUCCESS:
            raise SendFailed(ack.code, f"batch ack: {ack.remark}")
        return len(records)

    async def close(self) -> None:
        for conn in self._conns:
            conn.close()


class RemotingPull:
    """PULL_MESSAGE (a batch, long polling) of queue ``worker``, from where it got to."""

    def __init__(self, address: str, topic: str, queues: int) -> None:
        self.address, self.topic = address, topic
        self.offsets = [0] * queues
        self._conn: RemotingConnection | None = None

    async def round(self, worker: int) -> int:
        if self._conn is None:
            self._conn = await RemotingConnection.open(self.address)
        request = pull_request(self.topic, worker, self.offsets[worker], POLL_MS, BATCH)
        reply = await self._conn.call(request, timeout_s=POLL_MS / 1000 + 5)
        self.offsets[worker] = int(reply.ext_fields.get("nextBeginOffset", self.offsets[worker]))
        if reply.code != ResponseCode.SUCCESS:
            return 0
        return len(decode_records(reply.body, check_crc=False))

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


async def measure_receive(
    name: str,
    consumer: Any,
    workers: int,
    args: argparse.Namespace,
    server_cpu_s: Callable[[], float],
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """``workers`` tasks each running ``consumer.round(worker)`` from the start (the messages
    wait already: no warm-up) until ``args.duration`` s passed or ``args.messages`` were
    received; then the rounds still polling are cancelled."""
    got, total, lat = 0, 0, []
    errors: collections.Counter[str] = collections.Counter()
    stop = asyncio.Event()
    t0 = time.perf_counter_ns()
    ended_at = t0 + int(args.duration * 1e9)

    async def worker(w: int) -> None:
        nonlocal got, ended_at, total
        while not stop.is_set():
            start = time.perf_counter_ns()
            try:
                n = await consumer.round(w)
            except Exception as exc:
                errors[_reason(exc)] += 1
                await asyncio.sleep(0.01)
                continue
            end = time.perf_counter_ns()
            total += n
            if n and end <= ended_at:
                got += n
                lat.append(end - start)
            if total >= args.messages:
                ended_at = min(ended_at, end)
                stop.set()

    async def timer() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.progress)
            now = time.perf_counter_ns()
            log(f"  {name}: {(now - t0) / 1e9:5.1f} s {got:>8} received and acked")
            if now >= ended_at:
                stop.set()

    cpu0, server0, machine0 = time.process_time(), server_cpu_s(), machine_busy_jiffies()
    tasks = [asyncio.create_task(worker(w)) for w in range(workers)]
    try:
        await timer()
        window_s = max(1e-9, (min(ended_at, time.perf_counter_ns()) - t0) / 1e9)
        client_cpu, server_cpu = time.process_time() - cpu0, server_cpu_s() - server0
        machine_pct = _machine_pct(machine0, machine_busy_jiffies())
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await consumer.close()
    return {
        "path": name,
        "ops": got,
        "window_s": round(window_s, 3),
        "ops_per_s": round(got / window_s),
        **latency_summary(lat),
        "errors": dict(errors),
        "workers": workers,
        "client_cpu_pct": round(100 * client_cpu / window_s),
        "server_cpu_pct": round(100 * server_cpu / window_s),
        "machine_cpu_pct": machine_pct,
    }


# ------------------------------------------------------------------------------ the runs
class Bench:
    """The broker under test and the paths run against it."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.grpc_port = broker_group.free_block(1)
        extra = ("--listen-grpc", f"{broker_group.HOST}:{self.grpc_port}")
        self.group = broker_group.BrokerGroup(
            broker_group.MODES["single"], queues=args.queues, extra_args=extra
        )
        self.filled = False

    @property
    def endpoint(self) -> str:
        return f"{broker_group.HOST}:{self.grpc_port}"

    def server_cpu_s(self) -> float:
        pids = [p.pid for n, p in self.group.procs.items() if n != "meta"]
        return sum(s or 0.0 for s in process_cpu_s(pids))

    def remoting(self, topic: str = broker_group.TOPIC) -> RmqTarget:
        a = self.args
        return RmqTarget(
            self.group.master_address, topic, broker_group.GROUP,
            queues=a.queues, connections=a.connections,
        )  # fmt: skip

    def run(self, path: str) -> dict[str, Any]:
        a = self.args
        if path == "client5-send":
            return self.client5()
        if path in SENDS:
            target: Any = self.remoting()
            if path == "grpc-send":
                target = GrpcSendTarget(self.endpoint, broker_group.TOPIC, a.connections)
            r = self._loop(measure(path, target, a, self.server_cpu_s))
            r["path"], r["ops"], r["ops_per_s"] = (
                r.pop("system"),
                r.pop("sends"),
                r.pop("sends_per_s"),
            )
            return r
        if not self.filled:
            self._loop(self.fill())
            self.filled = True
        group, topic, master = f"bench-{path}", RECEIVE_TOPIC, self.group.master_address
        consumer: Any
        if path == "grpc-receive":
            consumer, workers = GrpcReceive(self.endpoint, topic, group), a.concurrency
        elif path == "remoting-pop":
            consumer, workers = RemotingPop(master, topic, group, a.connections), a.concurrency
        else:
            consumer, workers = RemotingPull(master, topic, a.queues), a.queues
        return self._loop(measure_receive(path, consumer, workers, a, self.server_cpu_s))

    def _loop(self, coro: Awaitable[Any]) -> Any:
        return _run_loop(coro, self.args.loop)  # type: ignore[arg-type]

    async def fill(self) -> dict[str, Any]:
        """``--messages`` messages for the receive paths, sent over remoting to their topic."""
        from nameserver.client import Client, QueueData

        q = self.args.queues
        with Client([self.group.endpoints], timeout_s=10) as client:
            client.route_topic_create(RECEIVE_TOPIC, [QueueData(broker_group.GROUP, q, q, 6)])
        target = self.remoting(RECEIVE_TOPIC)
        await target.open()  # its warm-up message is one of them
        sent, payload = 1, b"r" * self.args.size
        sent, payload = 0, b"r" * self.args.size

        async def sender(w: int) -> None:
            nonlocal sent
            while sent < self.args.messages:
                sent += 1
                await target.send(w, payload)

        print(f"sending {self.args.messages} messages for the receive paths", flush=True)
        await asyncio.gather(*(sender(w) for w in range(self.args.concurrency)))
        await target.close()
        return {}

    def client5(self) -> dict[str, Any]:
        a = self.args
        python = rmq5_python(a.rmq5_venv) if a.rmq5_venv else None
        if python is None:
            return {"path": "client5-send", "skipped": "no --rmq5-venv given"}
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["HOME"] = str(self.group.root)  # the client logs under $HOME/logs
        argv = [str(python), str(GRPC5), self.endpoint, broker_group.TOPIC, str(a.size)]
        argv += [str(a.concurrency), str(a.warmup), str(a.duration), str(a.count)]
        server0 = self.server_cpu_s()
        t0 = time.monotonic()
        r = subprocess.run(argv, stdout=subprocess.PIPE, timeout=300, env=env, check=False)
        elapsed = time.monotonic() - t0
        lines = [ln for ln in r.stdout.decode().splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not lines:
            return {"path": "client5-send", "failed": f"exit {r.returncode}"}
        out: dict[str, Any] = json.loads(lines[-1])
        out["server_cpu_pct"] = round(100 * (self.server_cpu_s() - server0) / elapsed)
        out["path"], out["ops"], out["ops_per_s"] = (
            "client5-send",
            out.pop("sends"),
            out.pop("sends_per_s"),
        )
        return out


def rmq5_python(venv: Path) -> Path:
    """The python of ``venv``, made with the 5.x client's pins when it has none."""
    python = venv / "bin" / "python"
    if not python.exists():
        from tests.conftest import ROCKETMQ5_CLIENT_PIN, ROCKETMQ5_PINS

        print(f"making {venv} with {ROCKETMQ5_CLIENT_PIN}", flush=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_USER")}
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, ROCKETMQ5_CLIENT_PIN, *ROCKETMQ5_PINS], check=True, env=env)
    return python


def run_path(bench: Bench, path: str) -> dict[str, Any]:
    """One path; a failure is that path's result."""
    try:
        result = bench.run(path)
    except Exception as exc:
        traceback.print_exc()
        result = {"path": path, "failed": f"{type(exc).__name__}: {exc}"}
    if "skipped" in result or "failed" in result:
        print(f"{path}: {result.get('skipped') or 'FAILED: ' + result['failed']}", flush=True)
    else:
        unit = "sends" if path in SENDS else "messages"
        print(
            f"{path}: {result['ops_per_s']} {unit}/s, p50 {result['p50_ms']} ms,"
            f" p99 {result['p99_ms']} ms, errors {sum(result['errors'].values())}",
            flush=True,
        )
    return result


def ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rate = {r["path"]: r.get("ops_per_s") for r in results}
    return [
        {"of": num, "to": den, "ratio": round(rate[num] / rate[den], 3)}  # type: ignore[operator]
        for num, den in RATIOS
        if rate.get(num) and rate.get(den)
    ]


def markdown(report: dict[str, Any]) -> str:
    p, m = report["params"], report["machine"]
    lines = [
        f"# One broker: gRPC (RocketMQ 5) against remoting, {report['date']}",
        "",
        f"{p['size']}-byte messages, {p['concurrency']} concurrent workers, {p['connections']} "
        f"connections, {p['queues']} queues, {p['warmup']} s warm-up then {p['duration']} s "
        f"measured; receive paths drain {p['messages']} messages each. Load: one Python "
        f"process ({p['loop']}). Machine: {m['nproc']} CPUs, {m['cpu_model']}.",
        "",
        "| path | ops/s | p50 ms | p99 ms | max ms | errors | load CPU % | broker CPU % |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in report["results"]:
        if "ops_per_s" not in r:
            lines.append(f"| {r['path']} | {r.get('skipped') or 'FAILED: ' + r['failed']} |")
            continue
        errors = ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "0"
        lines.append(
            f"| {r['path']} | {r['ops_per_s']} | {fmt(r['p50_ms'], '.2f')} "
            f"| {fmt(r['p99_ms'], '.2f')} | {fmt(r['max_ms'], '.1f')} | {errors} "
            f"| {r['client_cpu_pct']} | {r['server_cpu_pct']} |"
        )
    if report["ratios"]:
        lines += ["", "| ratio of ops/s | value |", "|---|---:|"]
        lines += [f"| {r['of']} / {r['to']} | {r['ratio']} |" for r in report["ratios"]]
    lines += [
        "",
        "Ops are acknowledged sends (send paths) or messages received and acknowledged "
        "(grpc-receive, remoting-pop; remoting-pull only receives). Latency is one send, or "
        "one receive-and-ack round of up to 32 messages. CPU % is per core (100 = one core).",
    ]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> Path | None:
    """Ops/s per path, sends and receives side by side; None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, kind, names in ((axes[0], "sends/s", SENDS), (axes[1], "messages/s", RECEIVES)):
        done = [r for r in report["results"] if r["path"] in names and "ops_per_s" in r]
        colors = [
            "#4c72b0" if r["path"].startswith(("grpc", "client5")) else "#dd8452" for r in done
        ]
        ax.bar([r["path"] for r in done], [r["ops_per_s"] for r in done], color=colors)
        ax.set_ylabel(kind)
        ax.tick_params(axis="x", rotation=15)
    p = report["params"]
    fig.suptitle(
        f"{p['size']} B, {p['concurrency']} workers, gRPC (blue) vs remoting ({report['date']})"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.grpc_vs_remoting",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--paths", default=",".join(PATHS), help="comma-separated, in run order")
    ap.add_argument("--size", type=int, default=1024, help="message bytes (1024)")
    ap.add_argument("--concurrency", type=int, default=32, help="concurrent workers (32)")
    ap.add_argument("--duration", type=float, default=3.0, help="measured seconds (3)")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring (1)")
    ap.add_argument("--count", type=int, default=0, help="stop a send path after N sends")
    ap.add_argument("--connections", type=int, default=4, help="connections or channels (4)")
    ap.add_argument("--queues", type=int, default=4, help="the topic's queues (4)")
    ap.add_argument("--messages", type=int, default=20000, help="for the receive paths")
    ap.add_argument("--rmq5-venv", type=Path, default=None, help="venv of the 5.x client")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument("--progress", type=float, default=1.0, help="seconds between progress lines")
    ap.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    args.paths = [s.strip() for s in args.paths.split(",") if s.strip()]
    unknown = [s for s in args.paths if s not in PATHS]
    if unknown:
        ap.error(f"unknown path(s) {', '.join(unknown)}; known: {', '.join(PATHS)}")
    if args.size < 8 or min(args.concurrency, args.connections, args.queues, args.messages) < 1:
        ap.error(
            "--size must be at least 8; --concurrency, --connections, --queues, --messages positive"
        )
    args.e2e = False  # bench.broker_send.measure's option: sends only here
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    keys = ("size", "concurrency", "duration", "warmup", "count", "connections", "queues")
    report: dict[str, Any] = {
        "date": timestamp(),
        "machine": machine(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "params": {k: getattr(args, k) for k in (*keys, "messages", "loop")},
        "results": [],
    }
    reason = broker_group.unavailable_reason()
    bench = Bench(args)
    if reason is None:
        print("starting a metaledger node and one broker replica (remoting and gRPC)", flush=True)
        bench.group.start()
    try:
        for path in args.paths:
            if reason is not None:
                report["results"].append({"path": path, "skipped": reason})
                continue
            report["results"].append(run_path(bench, path))
    finally:
        bench.group.stop()
    report["ratios"] = ratios(report["results"])
    for r in report["ratios"]:
        print(f"ratio {r['of']} / {r['to']}: {r['ratio']}")
    json_path, md_path = write_report("grpc_vs_remoting", report, markdown(report), args.out_dir)
    print(f"wrote {json_path} and {md_path}")
    if not args.no_plot:
        png = plot(
            report,
            result_stem("grpc_vs_remoting", report["date"], args.out_dir).with_suffix(".png"),
        )
        print(
            f"wrote {png}" if png else "no plot: matplotlib not installed (pip install -e .[bench])"
        )
    return 1 if any("failed" in r for r in report["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
