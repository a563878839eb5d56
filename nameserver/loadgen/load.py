"""An etcd-protocol load generator (grpc.aio), for metaledger and for a real etcd alike.

It uses only etcd's KV service. N clients are coroutines with one request in flight each,
spread round-robin over the endpoints (one channel per endpoint). The run stops itself after
warmup + duration; only requests that complete inside the measured window count.

    put      Put of a random key from the key space
    get      linearizable Range of one random key (the keys are written first)
    get-ser  the same, serializable
    get-rev  linearizable Range of one random key at a past revision (the keys are written,
             the revision taken, the keys written again: each read is of history)
    txn      compare-and-swap, one key per client: If(mod_revision(k) == last)
             Then Put(k) Else Range(k)  (every CAS succeeds; etcd's benchmark txn-put has no
             compare)
    txn-fail the same CAS with a stale mod_revision (0): every one fails and reads k back
             (a lock or election campaign that loses; etcd's store revision stays put)

    python -m nameserver.loadgen --endpoints 127.0.0.1:2379 --op put --clients 64 --duration 10
    python -m nameserver.loadgen ... --json       # one JSON line (the dict run() returns)

``client_cpu_us_per_op`` is this process's CPU time (all threads, gRPC's included) over the
window divided by the operations; ``machine_cpu_pct`` is the whole machine's busy time in
percent of one core (Linux ``/proc/stat``), so callers can tell how busy the box was.
``tcp_in_segs_per_op`` / ``tcp_out_segs_per_op`` are the machine's TCP segments received / sent
over the window (``/proc/net/snmp``) per operation: on loopback every segment is counted once
in each, so either is the client's and the servers' segments in both directions together (and
the members' peer traffic, and anything else the machine sends). ``tcp_client_to_server_segs_
per_op`` / ``tcp_server_to_client_segs_per_op`` count only this process's connections to the
endpoints (the kernel's per-socket ``TCP_INFO``), one number per direction. They show whether
a server coalesces the responses of many calls into one write (etcd: well under one segment per
op from the server) or sends one per call (a Python gRPC server: about one each way).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import math
import os
import random
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from nameserver.loadgen import procstats
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc

OPS = ("put", "get", "get-ser", "txn", "txn-fail", "get-rev")
POPULATE_BATCH = 64  # puts per Txn when writing the key space for get (etcd allows 128)
_POPULATE_CONCURRENCY = 8


@dataclass(frozen=True)
class LoadSpec:
    op: str = "put"
    endpoints: tuple[str, ...] = ("127.0.0.1:2379",)
    clients: int = 16
    duration_s: float = 10.0
    warmup_s: float = 1.0
    value_size: int = 256
    key_size: int = 16
    key_space: int = 10_000
    request_timeout_s: float = 5.0
    use_uvloop: bool = True
    seed: int = 1
    server_pids: tuple[int, ...] = ()  # processes whose CPU to report (Linux /proc)
    #: TLS (PEM files, etcdctl's --cacert/--cert/--key; "" = plain text)
    cacert: str = ""
    cert: str = ""
    key: str = ""
    user: str = ""  # NAME:PASSWORD: authenticate (etcd auth) and send the token on every call

    def validate(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op must be one of {', '.join(OPS)}, not {self.op!r}")
        if not self.endpoints:
            raise ValueError("endpoints: give at least one")
        if self.clients < 1:
            raise ValueError("clients must be >= 1")
        if self.duration_s <= 0 or self.warmup_s < 0 or self.request_timeout_s <= 0:
            raise ValueError("duration_s and request_timeout_s must be > 0, warmup_s >= 0")
        if self.value_size < 0 or self.key_space < 1:
            raise ValueError("value_size must be >= 0 and key_space >= 1")
        digits = max(len(str(self.key_space - 1)), len(str(self.clients - 1)))
        if self.key_size < digits + 1:
            raise ValueError(f"key_size {self.key_size} is too small for {digits}-digit key ids")


def _key(prefix: bytes, i: int, size: int) -> bytes:
    return prefix + b"%0*d" % (size - len(prefix), i)


class _Stats:
    def __init__(self) -> None:
        self.latencies_s: list[float] = []
        self.errors: collections.Counter[str] = collections.Counter()
        self.cas_failed = 0


@dataclass
class _Window:
    start: float  # time.perf_counter() values
    end: float

    def __contains__(self, t: float) -> bool:
        return self.start <= t < self.end


RequestFn = Callable[[], Awaitable[None]]


def _request_fn(
    op: str, index: int, stub: Any, spec: LoadSpec, value: bytes, stats: _Stats, last_mod: int
) -> RequestFn:
    """One client's next-request function (a closure that keeps the client's own state)."""
    rng = random.Random(spec.seed * 1_000_003 + index)
    timeout = spec.request_timeout_s
    if op == "put":

        async def put() -> None:
            key = _key(b"k", rng.randrange(spec.key_space), spec.key_size)
            await stub.Put(rpc_pb2.PutRequest(key=key, value=value), timeout=timeout)

        return put
    if op in ("get", "get-ser", "get-rev"):
        serializable = op == "get-ser"
        revision = last_mod if op == "get-rev" else 0  # get-rev: the past revision

        async def get() -> None:
            key = _key(b"k", rng.randrange(spec.key_space), spec.key_size)
            req = rpc_pb2.RangeRequest(key=key, serializable=serializable, revision=revision)
            await stub.Range(req, timeout=timeout)

        return get

    key = _key(b"c", index, spec.key_size)
    state = {"last": 0 if op == "txn-fail" else last_mod}
    stale = op == "txn-fail"
    put_op = rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=key, value=value))
    get_op = rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=key))

    async def cas() -> None:
        cmp = rpc_pb2.Compare(
            result=rpc_pb2.Compare.EQUAL,
            target=rpc_pb2.Compare.MOD,
            key=key,
            mod_revision=state["last"],
        )
        req = rpc_pb2.TxnRequest(compare=[cmp], success=[put_op], failure=[get_op])
        resp = await stub.Txn(req, timeout=timeout)
        if resp.succeeded:
            state["last"] = resp.header.revision
        else:
            stats.cas_failed += 1
            if stale:
                return
            kvs = resp.responses[0].response_range.kvs if resp.responses else []
            state["last"] = kvs[0].mod_revision if kvs else 0

    return cas


async def _populate(stubs: Sequence[Any], spec: LoadSpec, value: bytes) -> None:
    """Write every key of the key space (for get), in Txn batches."""
    batches = [
        range(lo, min(lo + POPULATE_BATCH, spec.key_space))
        for lo in range(0, spec.key_space, POPULATE_BATCH)
    ]
    queue = collections.deque(batches)

    async def worker(stub: Any) -> None:
        while queue:
            batch = queue.popleft()
            ops = [
                rpc_pb2.RequestOp(
                    request_put=rpc_pb2.PutRequest(key=_key(b"k", i, spec.key_size), value=value)
                )
                for i in batch
            ]
            await stub.Txn(rpc_pb2.TxnRequest(success=ops), timeout=spec.request_timeout_s * 4)

    await asyncio.gather(*(worker(stubs[i % len(stubs)]) for i in range(_POPULATE_CONCURRENCY)))


async def _client(request: RequestFn, window: _Window, stats: _Stats) -> None:
    while True:
        started = time.perf_counter()
        if started >= window.end:
            return
        try:
            await request()
        except grpc.aio.AioRpcError as err:
            if time.perf_counter() in window:
                stats.errors[err.code().name] += 1
            await asyncio.sleep(0.01)  # do not spin on a dead endpoint
            continue
        done = time.perf_counter()
        if done in window:
            stats.latencies_s.append(done - started)


def _percentile_ms(sorted_s: Sequence[float], q: float) -> float:
    if not sorted_s:
        return 0.0
    return sorted_s[min(len(sorted_s) - 1, max(0, math.ceil(q * len(sorted_s)) - 1))] * 1000


class _Token(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Adds an etcd auth token to every call (``--user``)."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = [*(details.metadata or ()), ("token", self.token)]
        return await continuation(details._replace(metadata=metadata), request)


def _dial(spec: LoadSpec, endpoint: str, interceptors: Any = None) -> grpc.aio.Channel:
    """A plain or (``--cacert/--cert/--key``) TLS channel to ``endpoint``."""
    if not (spec.cacert or spec.cert):
        return grpc.aio.insecure_channel(endpoint, interceptors=interceptors)

    def read(path: str) -> bytes | None:
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    creds = grpc.ssl_channel_credentials(read(spec.cacert), read(spec.key), read(spec.cert))
    return grpc.aio.secure_channel(endpoint, creds, interceptors=interceptors)


async def _channel(spec: LoadSpec, endpoint: str) -> grpc.aio.Channel:
    """A channel to ``endpoint``; with ``spec.user`` (NAME:PASSWORD), one whose calls carry
    the token that user got there (etcd's Auth/Authenticate)."""
    if not spec.user:
        return _dial(spec, endpoint)
    name, _, password = spec.user.partition(":")
    async with _dial(spec, endpoint) as plain:
        req = rpc_pb2.AuthenticateRequest(name=name, password=password)
        token = (await rpc_pb2_grpc.AuthStub(plain).Authenticate(req, timeout=10)).token
    return _dial(spec, endpoint, [_Token(token)])


async def _run(spec: LoadSpec) -> dict[str, Any]:
    channels = [await _channel(spec, ep) for ep in spec.endpoints]
    try:
        stubs = [rpc_pb2_grpc.KVStub(ch) for ch in channels]
        value = random.Random(spec.seed).randbytes(spec.value_size)
        stats = _Stats()
        last_mods = [0] * spec.clients
        if spec.op in ("get", "get-ser"):
            await _populate(stubs, spec, value)
        elif spec.op == "get-rev":
            await _populate(stubs, spec, value)
            probe = rpc_pb2.RangeRequest(key=b"k", limit=1)
            past = (await stubs[0].Range(probe, timeout=spec.request_timeout_s)).header.revision
            await _populate(stubs, spec, value[::-1])  # every key gets a newer version
            last_mods = [past] * spec.clients
        elif spec.op in ("txn", "txn-fail"):
            puts = [
                stubs[i % len(stubs)].Put(
                    rpc_pb2.PutRequest(key=_key(b"c", i, spec.key_size), value=value),
                    timeout=spec.request_timeout_s,
                )
                for i in range(spec.clients)
            ]
            last_mods = [r.header.revision for r in await asyncio.gather(*puts)]

        requests = [
            _request_fn(spec.op, i, stubs[i % len(stubs)], spec, value, stats, last_mods[i])
            for i in range(spec.clients)
        ]
        now = time.perf_counter()
        window = _Window(now + spec.warmup_s, now + spec.warmup_s + spec.duration_s)
        tasks = [asyncio.create_task(_client(r, window, stats)) for r in requests]

        await asyncio.sleep(max(0.0, window.start - time.perf_counter()))
        cpu0, wall0, machine0 = (
            time.process_time(),
            time.perf_counter(),
            procstats.machine_busy_jiffies(),
        )
        servers0, segs0 = procstats.process_cpu_s(spec.server_pids), procstats.tcp_segments()
        ports = {int(ep.rsplit(":", 1)[1]) for ep in spec.endpoints}
        conn0 = procstats.connection_segments(ports)
        await asyncio.sleep(max(0.0, window.end - time.perf_counter()))
        cpu1, wall1, machine1 = (
            time.process_time(),
            time.perf_counter(),
            procstats.machine_busy_jiffies(),
        )
        servers1, segs1 = procstats.process_cpu_s(spec.server_pids), procstats.tcp_segments()
        conn1 = procstats.connection_segments(ports)

        _, pending = await asyncio.wait(tasks, timeout=spec.request_timeout_s + 1.0)
        for t in pending:
            t.cancel()
        for t in tasks:
            failure = None if t.cancelled() or not t.done() else t.exception()
            if failure is not None:
                raise failure
    finally:
        await asyncio.gather(*(ch.close() for ch in channels), return_exceptions=True)

    # Ops are those completed inside the nominal window; CPU was sampled around it (the loop
    # may wake late), so CPU figures are rates over the sampled interval.
    window_s = window.end - window.start
    sampled_s = max(wall1 - wall0, 1e-9)
    lat = sorted(stats.latencies_s)
    ops = len(lat)
    client_cpu_pct = (cpu1 - cpu0) / sampled_s * 100
    machine_pct = None
    if machine0 is not None and machine1 is not None and machine1[1] > machine0[1]:
        cores = os.cpu_count() or 1
        share = (machine1[0] - machine0[0]) / (machine1[1] - machine0[1])
        machine_pct = round(share * cores * 100, 1)
    server_pcts = [
        round((b - a) / sampled_s * 100, 1) if a is not None and b is not None else None
        for a, b in zip(servers0, servers1, strict=True)
    ]
    server_pct = sum(p for p in server_pcts if p is not None)

    def per_op_us(pct: float) -> float:
        return round(pct / 100 * window_s / ops * 1e6, 1) if ops else 0.0

    def segs_per_op(a: tuple[int, int] | None, b: tuple[int, int] | None, i: int) -> float | None:
        if a is None or b is None or not ops:
            return None
        return round((b[i] - a[i]) / sampled_s * window_s / ops, 2)

    return {
        "op": spec.op,
        "clients": spec.clients,
        "endpoints": list(spec.endpoints),
        "duration_s": round(window_s, 3),
        "warmup_s": spec.warmup_s,
        "value_size": spec.value_size,
        "key_size": spec.key_size,
        "key_space": spec.key_space,
        "ops": ops,
        "ops_per_s": round(ops / window_s, 1),
        "p50_ms": round(_percentile_ms(lat, 0.50), 3),
        "p99_ms": round(_percentile_ms(lat, 0.99), 3),
        "mean_ms": round(sum(lat) / ops * 1000, 3) if ops else 0.0,
        "max_ms": round(lat[-1] * 1000, 3) if lat else 0.0,
        "errors": sum(stats.errors.values()),
        "error_codes": dict(stats.errors),
        "cas_failed": stats.cas_failed,
        "client_cpu_us_per_op": per_op_us(client_cpu_pct),
        "client_cpu_pct": round(client_cpu_pct, 1),
        "server_pids": list(spec.server_pids),
        "server_cpu_pct": server_pcts,  # per pid, in percent of one core
        "server_cpu_us_per_op": per_op_us(server_pct) if spec.server_pids else None,
        "machine_cpu_pct": machine_pct,  # the whole machine, in percent of one core
        "foreign_cpu_pct": (
            round(machine_pct - client_cpu_pct - server_pct, 1)
            if machine_pct is not None and spec.server_pids
            else None
        ),
        "tcp_in_segs_per_op": segs_per_op(segs0, segs1, 0),  # machine-wide: see the docstring
        "tcp_out_segs_per_op": segs_per_op(segs0, segs1, 1),
        "tcp_client_to_server_segs_per_op": segs_per_op(conn0, conn1, 0),  # our connections
        "tcp_server_to_client_segs_per_op": segs_per_op(conn0, conn1, 1),
        "loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
        "python": sys.version.split()[0],
        "grpc": grpc.__version__,
    }


def run(spec: LoadSpec | None = None, **fields: Any) -> dict[str, Any]:
    """Run one load and return its result dict; ``fields`` override ``spec`` (or the defaults)."""
    spec = dataclasses.replace(spec or LoadSpec(), **fields)
    if isinstance(spec.endpoints, str):
        spec = dataclasses.replace(spec, endpoints=tuple(spec.endpoints.split(",")))
    spec.validate()
    loop_factory = None
    if spec.use_uvloop:
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:
            pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(_run(spec))


def format_result(r: dict[str, Any]) -> str:
    cas = f"  cas failed {r['cas_failed']}" if r["op"].startswith("txn") else ""
    errors = f" {r['error_codes']}" if r["errors"] else ""
    server = ""
    if r.get("server_cpu_us_per_op") is not None:
        server = f"  server CPU {r['server_cpu_us_per_op']:.0f} µs/op"
    if r.get("tcp_client_to_server_segs_per_op") is not None:
        server += (
            f"  TCP segs/op {r['tcp_client_to_server_segs_per_op']:.2f} out"
            f" / {r['tcp_server_to_client_segs_per_op']:.2f} in"
        )
    return (
        f"{r['op']:<7} clients {r['clients']:>3}  {r['ops_per_s']:>9.1f} ops/s  "
        f"p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  errors {r['errors']}{errors}{cas}  "
        f"client CPU {r['client_cpu_us_per_op']:.0f} µs/op ({r['client_cpu_pct']:.0f}% of a core)"
        f"{server}  "
        f"[{r['ops']} ops in {r['duration_s']:g} s, {r['loop']}]"
    )


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def _pid_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated pid list") from None


def add_load_arguments(p: argparse.ArgumentParser) -> None:
    """The load's shape (shared with ``metaledger bench``); op and endpoints are the caller's."""
    d = LoadSpec()
    p.add_argument("--clients", type=int, default=d.clients, help=f"default {d.clients}")
    p.add_argument(
        "--duration", type=_positive_float, default=d.duration_s, metavar="S", help="measured s"
    )
    p.add_argument("--warmup", type=float, default=d.warmup_s, metavar="S", help="unmeasured s")
    p.add_argument("--value-size", type=int, default=d.value_size, metavar="B")
    p.add_argument("--key-size", type=int, default=d.key_size, metavar="B")
    p.add_argument("--key-space", type=int, default=d.key_space, metavar="K")
    p.add_argument(
        "--request-timeout", type=_positive_float, default=d.request_timeout_s, metavar="S"
    )
    p.add_argument("--no-uvloop", action="store_true", help="use asyncio's default loop")
    p.add_argument(
        "--server-pids",
        type=_pid_list,
        default=(),
        metavar="PID,...",
        help="also report these processes' CPU (the servers on this machine)",
    )


def spec_from_args(args: argparse.Namespace, op: str, endpoints: Sequence[str]) -> LoadSpec:
    return LoadSpec(
        op=op,
        endpoints=tuple(endpoints),
        clients=args.clients,
        duration_s=args.duration,
        warmup_s=args.warmup,
        value_size=args.value_size,
        key_size=args.key_size,
        key_space=args.key_space,
        request_timeout_s=args.request_timeout,
        use_uvloop=not args.no_uvloop,
        server_pids=tuple(args.server_pids),
        # ``metaledger bench`` takes them from the client commands' --cacert/--cert/--key
        cacert=getattr(args, "tls_cacert", None) or "",
        cert=getattr(args, "tls_cert", None) or "",
        key=getattr(args, "tls_key", None) or "",
        user=getattr(args, "user", None) or "",  # --user NAME:PASSWORD (etcd auth)
    )
