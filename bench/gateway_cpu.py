"""Server CPU per put through etcd's JSON gateway, metaledger against etcd 3.4, one client.

    python -m bench.gateway_cpu [--puts 400]

A real etcd 3.4 and a one-node metaledger (tests.harness, loopback, processes stopped by
PID); ``--puts`` sequential ``POST /v3/kv/put`` (a 100-byte value, one connection each, as
``curl`` makes them) to etcd's client port and to metaledger's HTTP port, then the same
puts over gRPC for scale. Reported: the server process's CPU (user + system, from
/proc/PID/stat) and the wall time, per put. Printed, not written to bench/results/.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import tempfile
import time
from collections.abc import Callable

import grpc

from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from tests.etcd_harness import EtcdServer
from tests.harness import Cluster

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
VALUE = b"v" * 100


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def per_put(pid: int, puts: int, put: Callable[[], None]) -> tuple[float, float]:
    """(µs of ``pid``'s CPU, µs of wall time) per call of ``put``."""
    put()  # warm: connection set-up, first-call paths
    cpu0, wall0 = cpu_s(pid), time.perf_counter()
    for _ in range(puts):
        put()
    return (cpu_s(pid) - cpu0) / puts * 1e6, (time.perf_counter() - wall0) / puts * 1e6


def gateway_put(host: str, port: int) -> Callable[[], None]:
    body = json.dumps({"key": "aw==", "value": base64.b64encode(VALUE).decode()})

    def put() -> None:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        try:
            conn.request("POST", "/v3/kv/put", body)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                raise RuntimeError(f"gateway put answered {answer.status}")
        finally:
            conn.close()

    return put


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--puts", type=int, default=400)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="gateway-cpu-")
    with EtcdServer(root + "/etcd") as etcd, Cluster(root + "/ml", n=1) as ml:
        ml.leader()
        ours = ml.procs[0]
        assert ours is not None
        host, port = etcd.address.split(":")
        channels = [
            grpc.insecure_channel(etcd.address),
            grpc.insecure_channel(ml.nodes[0].client_addr),
        ]
        try:
            etcd_kv, ml_kv = (rpc_pb2_grpc.KVStub(c) for c in channels)
            request = rpc_pb2.PutRequest(key=b"k", value=VALUE)
            rows = [
                ("etcd 3.4 gateway", etcd.proc.pid, gateway_put(host, int(port))),
                (
                    "metaledger gateway",
                    ours.pid,
                    gateway_put("127.0.0.1", ml.nodes[0].metrics_port),
                ),
                ("etcd 3.4 gRPC", etcd.proc.pid, lambda: etcd_kv.Put(request) and None),
                ("metaledger gRPC", ours.pid, lambda: ml_kv.Put(request) and None),
            ]
            for name, pid, put in rows:
                cpu_us, wall_us = per_put(pid, args.puts, put)
                print(f"{name:20s} server CPU {cpu_us:6.0f} us/put   wall {wall_us:6.0f} us/put")
        finally:
            for channel in channels:
                channel.close()


if __name__ == "__main__":
    main()
