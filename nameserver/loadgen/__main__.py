"""``python -m nameserver.loadgen``: one load from the command line, printed as a line or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import grpc.aio

from nameserver.loadgen import load
from nameserver.loadgen.load import OPS, add_load_arguments, format_result, run, spec_from_args


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m nameserver.loadgen",
        description=(load.__doc__ or "").split("\n")[0],
    )
    p.add_argument("--op", choices=OPS, default="put")
    p.add_argument("--endpoints", default="127.0.0.1:2379", help="comma-separated host:port")
    add_load_arguments(p)
    for name in ("cacert", "cert", "key"):  # TLS, etcdctl's names (PEM files)
        p.add_argument(f"--{name}", dest=f"tls_{name}", metavar="PEM", help=f"TLS: {name} file")
    p.add_argument("--user", default="", metavar="NAME:PASSWORD", help="authenticate (etcd auth)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    endpoints = [e.strip() for e in args.endpoints.split(",") if e.strip()]
    try:
        spec = spec_from_args(args, args.op, endpoints)
        spec.validate()
    except ValueError as exc:
        p.error(str(exc))
    try:
        result = run(spec)
    except grpc.aio.AioRpcError as err:  # while writing the keys before the run
        print(f"loadgen: setup failed: {err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    print(json.dumps(result) if args.json else format_result(result), flush=True)
    return 0 if result["ops"] else 1


if __name__ == "__main__":
    sys.exit(main())
