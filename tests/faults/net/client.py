"""A fault-test client, run inside the bridge's namespace (``ip netns exec``): it talks
to one member and records every operation as a JSON line (tests/faults/net/checker.py's
``Op`` fields), flushed as it goes, so a run's history survives the client's end.

``ops``: puts of unique values and linearizable reads on a few keys of the current key
epoch (``--key-epoch-s``; every client derives the epoch from CLOCK_MONOTONIC, shared by
the machine's processes, so they work on the same keys at the same time and each key's
history stays short). ``status``: one line of each member's Admin.Status (or its error); with ``--etcd``, the
same fields from etcd's Maintenance.Status (for an etcd member: its id and its leader's as
hex, its role as "leader" when the two are the same). Only KV Put and Range go out in
``ops``, so the same workload runs against etcd.

    python -m tests.faults.net.client ops --endpoint IP:PORT --proc P --out FILE
    python -m tests.faults.net.client status [--etcd] IP:PORT ...
    python -m tests.faults.net.client failover IP:PORT ...

``failover``: puts through the project's client library with every endpoint (its
failover), one JSON line each: ``[start, end, ok]``.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time

import grpc

from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import admin_pb2, admin_pb2_grpc

_OPTIONS = [
    ("grpc.enable_http_proxy", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 300),
]


def run_ops(args: argparse.Namespace) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    rng = random.Random(args.seed * 1000 + args.proc)
    channel = grpc.insecure_channel(args.endpoint, options=_OPTIONS)
    kv = rpc_pb2_grpc.KVStub(channel)
    n = 0
    deadline = time.monotonic() + args.seconds
    with open(args.out, "a", buffering=1) as out:
        while not stop.is_set() and time.monotonic() < deadline:
            epoch = int(time.monotonic() / args.key_epoch_s)
            key = f"lin/{epoch}/{rng.randrange(args.keys)}"
            start = time.monotonic()
            if rng.random() < 0.5:
                n += 1
                written = f"{args.proc}-{n}"
                value: str | None = written
                try:
                    put = rpc_pb2.PutRequest(key=key.encode(), value=written.encode())
                    kv.Put(put, timeout=args.timeout_s)
                    status = "ok"
                except grpc.RpcError:
                    status = "info"  # it may still land
                kind = "w"
            else:
                kind, value = "r", None
                try:
                    resp = kv.Range(rpc_pb2.RangeRequest(key=key.encode()), timeout=args.timeout_s)
                    value = resp.kvs[0].value.decode() if resp.kvs else None
                    status = "ok"
                except grpc.RpcError:
                    status = "fail"  # a read changes nothing
            end = time.monotonic()
            out.write(json.dumps([args.proc, kind, key, value, start, end, status]) + "\n")
            stop.wait(args.pause_s)
    channel.close()
    return 0


def run_failover(args: argparse.Namespace) -> int:
    """Puts through ``nameserver.client.Client`` (every endpoint, failover on), one JSON
    line each: ``[start, end, ok]``."""
    from nameserver.client import Client

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Client(args.endpoints, timeout_s=args.timeout_s) as client:
        n = 0
        while not stop.is_set():
            n += 1
            start = time.monotonic()
            try:
                client.put(b"failover/%d" % n, b"v")
                ok = True
            except Exception:
                ok = False
            end = time.monotonic()
            print(json.dumps([start, end, ok]), flush=True)
            stop.wait(args.pause_s)
    return 0


def _etcd_status(ch: grpc.Channel) -> dict[str, object]:
    st = rpc_pb2_grpc.MaintenanceStub(ch).Status(rpc_pb2.StatusRequest(), timeout=1.0)
    me, leader = f"{st.header.member_id:x}", f"{st.leader:x}" if st.leader else ""
    role = "leader" if leader == me else "follower"
    return {"id": me, "role": role, "leader": leader, "term": st.raftTerm}


def run_status(endpoints: list[str], etcd: bool = False) -> int:
    for ep in endpoints:
        with grpc.insecure_channel(ep, options=_OPTIONS) as ch:
            try:
                if etcd:
                    row = _etcd_status(ch)
                else:
                    st = admin_pb2_grpc.AdminStub(ch).Status(admin_pb2.StatusRequest(), timeout=1.0)
                    row = {"id": st.id, "role": st.role, "leader": st.leader, "term": st.term}
            except grpc.RpcError as exc:
                row = {"error": exc.code().name}
        print(json.dumps(row), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests.faults.net.client")
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("ops")
    o.add_argument("--endpoint", required=True)
    o.add_argument("--proc", type=int, required=True)
    o.add_argument("--out", required=True)
    o.add_argument("--seed", type=int, default=0)
    o.add_argument("--seconds", type=float, default=600.0)
    o.add_argument("--keys", type=int, default=4)
    o.add_argument("--key-epoch-s", type=float, default=3.0)
    o.add_argument("--timeout-s", type=float, default=1.0)
    o.add_argument("--pause-s", type=float, default=0.02)
    f = sub.add_parser("failover")
    f.add_argument("endpoints", nargs="+")
    f.add_argument("--timeout-s", type=float, default=5.0)
    f.add_argument("--pause-s", type=float, default=0.05)
    s = sub.add_parser("status")
    s.add_argument("endpoints", nargs="+")
    s.add_argument("--etcd", action="store_true", help="etcd members (Maintenance.Status)")
    args = p.parse_args(argv)
    if args.cmd == "ops":
        return run_ops(args)
    if args.cmd == "failover":
        return run_failover(args)
    return run_status(args.endpoints, args.etcd)


if __name__ == "__main__":
    sys.exit(main())
