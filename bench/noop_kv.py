"""A do-nothing etcd KV server: the measuring stick for what any Python gRPC server costs here.

    python -m bench.noop_kv --port 23790 [--mode aio|sync] [--workers 4] [--value-size 256]

It is NOT a key-value store. Put, Range and Txn return well-formed canned responses at once:
no Raft, no log, no state beyond a revision counter (each Put, and each Txn with a put in its
success branch, takes the next revision, so callers that read ``header.revision`` see it move).
Maintenance.Status and Cluster.MemberList describe a one-member cluster that is its own leader,
enough for ``nameserver.loadgen`` (KV only) and ``bench.compare_etcd`` (which asks Status for the
leader) to drive it like etcd or metaledger. Everything else is UNIMPLEMENTED.

Why it exists: issue 2 asks metaledger for >= 0.5x etcd's writes; the gap to etcd is only
meaningful next to the ceiling, the throughput a Python gRPC server reaches when its handlers
cost nothing. ``--mode aio`` is the server metaledger runs (grpc.aio on uvloop, the same
server options); ``--mode sync`` is grpc's thread-pool server, which measured cheaper per
call on this machine (grpc.aio adds an asyncio task per RPC and a hand-off from its
completion-queue poller thread to the event loop). Handlers build the response from the request only, so neither mode waits on
anything but gRPC itself.
"""

# ruff: noqa: E402  (gRPC core's environment is set before `import grpc`, below)
from __future__ import annotations

import argparse
import asyncio
import importlib
import itertools
import signal
import sys
import threading
from collections.abc import Sequence
from concurrent import futures
from typing import Any

from nameserver.grpc.env import apply_server_defaults

apply_server_defaults()  # before grpc: gRPC core's environment, as the server has it

import grpc
import grpc.aio

from nameserver.grpc.accept import HOT_METHODS, Acceptors
from nameserver.grpc.methods import MethodTable
from nameserver.server import GRPC_SERVER_OPTIONS as SERVER_OPTIONS
from protos.etcdserverpb import kv_pb2, rpc_pb2, rpc_pb2_grpc

#: every gRPC service module metaledger's server registers
SERVICE_MODULES = tuple(
    importlib.import_module(f"protos.{name}_pb2_grpc")
    for name in (
        "etcdserverpb.rpc",
        "etcdserverpb.v3election",
        "etcdserverpb.v3lock",
        "metaledger.v1.admin",
        "metaledger.v1.offsets",
        "metaledger.v1.quotas",
        "metaledger.v1.replica_groups",
        "metaledger.v1.routing",
    )
)
_CANNED = ("KVServicer", "MaintenanceServicer", "ClusterServicer")

MEMBER_ID = 0x6E6F6F70  # "noop"
CLUSTER_ID = 0x6B76  # "kv"
VERSION = "noop-kv (bench/noop_kv.py)"


class CannedKV:
    """The canned answers, shared by both server modes (no gRPC types, no I/O).

    ``next(itertools.count())`` is atomic under the GIL, so the sync server's worker threads
    hand out distinct revisions without a lock.
    """

    def __init__(self, value_size: int = 256, client_url: str = "") -> None:
        self._revisions = itertools.count(2)  # revision 1 is the empty store, as in etcd
        self.revision = 1
        self.value = b"v" * value_size
        self.client_url = client_url

    def header(self, revision: int) -> rpc_pb2.ResponseHeader:
        return rpc_pb2.ResponseHeader(
            cluster_id=CLUSTER_ID, member_id=MEMBER_ID, revision=revision, raft_term=1
        )

    def _next_revision(self) -> int:
        rev = next(self._revisions)
        self.revision = rev  # racy between workers, but only Range's header reads it
        return rev

    def put(self, request: rpc_pb2.PutRequest) -> rpc_pb2.PutResponse:
        return rpc_pb2.PutResponse(header=self.header(self._next_revision()))

    def _range(self, request: rpc_pb2.RangeRequest, revision: int) -> rpc_pb2.RangeResponse:
        response = rpc_pb2.RangeResponse(header=self.header(revision))
        if request.count_only:
            response.count = 1
            return response
        response.kvs.append(
            kv_pb2.KeyValue(
                key=request.key,
                value=b"" if request.keys_only else self.value,
                create_revision=1,
                mod_revision=1,
                version=1,
            )
        )
        response.count = 1
        return response

    def range(self, request: rpc_pb2.RangeRequest) -> rpc_pb2.RangeResponse:
        return self._range(request, self.revision)

    def txn(self, request: rpc_pb2.TxnRequest) -> rpc_pb2.TxnResponse:
        """Every comparison "holds": the success branch runs, one revision for all its puts."""
        ops = request.success
        writes = any(op.WhichOneof("request") == "request_put" for op in ops)
        revision = self._next_revision() if writes else self.revision
        response = rpc_pb2.TxnResponse(header=self.header(revision), succeeded=True)
        for op in ops:
            kind = op.WhichOneof("request")
            if kind == "request_put":
                response.responses.add(response_put=rpc_pb2.PutResponse(header=response.header))
            elif kind == "request_range":
                response.responses.add(response_range=self._range(op.request_range, revision))
            elif kind == "request_delete_range":
                response.responses.add(
                    response_delete_range=rpc_pb2.DeleteRangeResponse(header=response.header)
                )
            else:  # a nested txn: answer it the same way
                response.responses.add(response_txn=self.txn(op.request_txn))
        return response

    def status(self) -> rpc_pb2.StatusResponse:
        return rpc_pb2.StatusResponse(
            header=self.header(self.revision),
            version=VERSION,
            leader=MEMBER_ID,
            raftIndex=self.revision,
            raftTerm=1,
            raftAppliedIndex=self.revision,
        )

    def member_list(self) -> rpc_pb2.MemberListResponse:
        member = rpc_pb2.Member(
            ID=MEMBER_ID, name="noop", peerURLs=[], clientURLs=[self.client_url]
        )
        return rpc_pb2.MemberListResponse(header=self.header(self.revision), members=[member])


# --------------------------------------------------------------------------- grpc.aio


class AioKV(rpc_pb2_grpc.KVServicer):
    """``answer_every_s`` > 0: a Put waits for the next tick of that period and is answered
    with everything else that arrived since, the way a replicated log answers a commit
    group (here without any work in between)."""

    def __init__(self, canned: CannedKV, answer_every_s: float = 0.0) -> None:
        self.canned = canned
        self.answer_every_s = answer_every_s
        self._group: list[asyncio.Future[None]] = []
        self._ticker: asyncio.Task[None] | None = None

    async def Put(self, request: Any, context: Any) -> Any:
        if self.answer_every_s > 0:
            loop = asyncio.get_running_loop()
            if self._ticker is None:
                self._ticker = loop.create_task(self._tick())
            fut = loop.create_future()
            self._group.append(fut)
            await fut
        return self.canned.put(request)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.answer_every_s)
            group, self._group = self._group, []
            for fut in group:
                if not fut.done():
                    fut.set_result(None)

    async def Range(self, request: Any, context: Any) -> Any:
        return self.canned.range(request)

    async def Txn(self, request: Any, context: Any) -> Any:
        return self.canned.txn(request)


class AioMaintenance(rpc_pb2_grpc.MaintenanceServicer):
    def __init__(self, canned: CannedKV) -> None:
        self.canned = canned

    async def Status(self, request: Any, context: Any) -> Any:
        return self.canned.status()


class AioCluster(rpc_pb2_grpc.ClusterServicer):
    def __init__(self, canned: CannedKV) -> None:
        self.canned = canned

    async def MemberList(self, request: Any, context: Any) -> Any:
        return self.canned.member_list()


async def serve_aio(
    address: str,
    canned: CannedKV,
    answer_every_s: float = 0.0,
    methods: str = "registered",
    acceptors: int = 0,
) -> None:
    """``methods``: how the handlers reach grpc.aio. "registered": as the generated code
    registers them (KV, Maintenance, Cluster); "all-registered": every service metaledger
    serves, registered the same way (the others unimplemented); "table": all of them behind
    metaledger's one generic handler (:class:`nameserver.server.MethodTable`), with
    ``acceptors`` extra pending accepts per hot method as the server keeps
    (:mod:`nameserver.grpc.accept`)."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    target: Any = MethodTable() if methods == "table" else server
    rpc_pb2_grpc.add_KVServicer_to_server(AioKV(canned, answer_every_s), target)
    rpc_pb2_grpc.add_MaintenanceServicer_to_server(AioMaintenance(canned), target)
    rpc_pb2_grpc.add_ClusterServicer_to_server(AioCluster(canned), target)
    if methods != "registered":
        for module in SERVICE_MODULES:
            for name in dir(module):
                if name.startswith("add_") and name.endswith("Servicer_to_server"):
                    servicer = getattr(module, name[len("add_") : -len("_to_server")])
                    if servicer.__name__ not in _CANNED:
                        getattr(module, name)(servicer(), target)
    extra = None
    if isinstance(target, MethodTable):
        server.add_generic_rpc_handlers((target,))
        extra = Acceptors(server, target.methods(HOT_METHODS), (target,), acceptors)
        extra.register()
    server.add_insecure_port(address)
    await server.start()
    if extra is not None:
        extra.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"noop_kv: aio server on {address}", file=sys.stderr, flush=True)
    await stop.wait()
    await server.stop(0)
    if extra is not None:
        await extra.stop()


# --------------------------------------------------------------------------- sync grpc.server


class SyncKV(rpc_pb2_grpc.KVServicer):
    def __init__(self, canned: CannedKV) -> None:
        self.canned = canned

    def Put(self, request: Any, context: Any) -> Any:
        return self.canned.put(request)

    def Range(self, request: Any, context: Any) -> Any:
        return self.canned.range(request)

    def Txn(self, request: Any, context: Any) -> Any:
        return self.canned.txn(request)


class SyncMaintenance(rpc_pb2_grpc.MaintenanceServicer):
    def __init__(self, canned: CannedKV) -> None:
        self.canned = canned

    def Status(self, request: Any, context: Any) -> Any:
        return self.canned.status()


class SyncCluster(rpc_pb2_grpc.ClusterServicer):
    def __init__(self, canned: CannedKV) -> None:
        self.canned = canned

    def MemberList(self, request: Any, context: Any) -> Any:
        return self.canned.member_list()


def serve_sync(address: str, canned: CannedKV, workers: int) -> None:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="noop-kv"),
        options=SERVER_OPTIONS,
    )
    rpc_pb2_grpc.add_KVServicer_to_server(SyncKV(canned), server)
    rpc_pb2_grpc.add_MaintenanceServicer_to_server(SyncMaintenance(canned), server)
    rpc_pb2_grpc.add_ClusterServicer_to_server(SyncCluster(canned), server)
    server.add_insecure_port(address)
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    print(f"noop_kv: sync server ({workers} workers) on {address}", file=sys.stderr, flush=True)
    while not stop.wait(0.5):  # a bare wait() would not let the signal handler run
        pass
    server.stop(0).wait()


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.noop_kv",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", choices=("aio", "sync"), default="aio")
    p.add_argument("--workers", type=int, default=4, help="thread pool size (sync mode)")
    p.add_argument("--value-size", type=int, default=256, metavar="B", help="Range's value")
    p.add_argument("--no-uvloop", action="store_true", help="aio mode: asyncio's default loop")
    p.add_argument(
        "--answer-every-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="aio mode: answer Puts in groups every MS (like commit groups; 0 = at once)",
    )
    p.add_argument(
        "--methods",
        choices=("registered", "all-registered", "table"),
        default="registered",
        help="aio mode: KV, Maintenance and Cluster registered as generated code does; or "
        "every service metaledger serves registered that way; or all of them behind "
        "metaledger's one generic handler (what the server does)",
    )
    p.add_argument(
        "--acceptors",
        type=int,
        default=0,
        metavar="N",
        help="aio mode, --methods table: pending accepts per hot method besides grpc.aio's "
        "own loop, as the server keeps (its default: 32)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if not 0 < args.port < 65536:
        p.error(f"--port must be in 1..65535, not {args.port}")
    if args.workers < 1:
        p.error(f"--workers must be >= 1, not {args.workers}")
    if args.value_size < 0:
        p.error(f"--value-size must be >= 0, not {args.value_size}")
    if args.acceptors < 0 or (args.acceptors and args.methods != "table"):
        p.error(f"--acceptors must be >= 0, and only with --methods table, not {args.acceptors}")
    if args.answer_every_ms < 0:
        p.error(f"--answer-every-ms must be >= 0, not {args.answer_every_ms}")
    address = f"{args.host}:{args.port}"
    canned = CannedKV(args.value_size, client_url=f"http://{address}")
    if args.mode == "sync":
        serve_sync(address, canned, args.workers)
        return 0
    loop_factory = None
    if not args.no_uvloop:
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(
            serve_aio(address, canned, args.answer_every_ms / 1000, args.methods, args.acceptors)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
