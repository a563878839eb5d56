"""``metaledger bench OP``: the etcd-protocol load generator (:mod:`nameserver.loadgen`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from nameserver.cli._common import endpoints, printer
from nameserver.cli.exitcodes import ExitCode

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers


def run_bench(args: argparse.Namespace) -> int:
    import grpc.aio

    from nameserver import loadgen

    spec = loadgen.spec_from_args(args, args.op, endpoints(args))
    try:
        spec.validate()
    except ValueError as exc:
        print(f"metaledger: bench: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        result = loadgen.run(spec)
    except grpc.aio.AioRpcError as err:  # while writing the keys before the run
        print(
            f"metaledger: bench setup failed: {err.code().name.lower()}: {err.details()}",
            file=sys.stderr,
        )
        return ExitCode.UNAVAILABLE if err.code() == grpc.StatusCode.UNAVAILABLE else ExitCode.ERROR
    printer(args).report(result, loadgen.format_result(result))
    return ExitCode.OK if result["ops"] else ExitCode.UNAVAILABLE


BENCH_HELP = """\
Drive load over etcd's KV service and print throughput and latency (it works against a real
etcd too). CLIENTS concurrent clients, each with one request in flight, spread over the
endpoints; only requests that complete inside the measured window (after --warmup) count.

  put      Put of a random key from the key space
  get      linearizable Range of one random key (the keys are written first)
  get-ser  the same, serializable
  txn      compare-and-swap, one key per client:
           If(mod_revision(k) == last) Then Put(k) Else Range(k)

Besides rates and latencies the result has the client's CPU time per op, the machine's CPU
use, and TCP segments per op (all, and this client's connections alone, per direction).

  metaledger bench put --clients 64 --duration 10
  metaledger bench get --endpoints 127.0.0.1:2379 -w json
"""


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    from nameserver import loadgen

    p = sub.add_parser(
        "bench",
        parents=[common],
        help="drive load over the etcd KV API (works against etcd too)",
        description=BENCH_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("op", choices=loadgen.OPS)
    loadgen.add_load_arguments(p)
    p.set_defaults(run=run_bench)
