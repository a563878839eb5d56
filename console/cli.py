"""``metaledger console``: registered through the ``metaledger.commands`` entry point (the
nameserver never imports this package), with the connection flags every command has.

``--endpoints`` (with ``--user``, ``--cacert`` …) names the cluster called ``default``;
``--cluster NAME=HOST:PORT,...`` (repeatable) adds others under their names, connected with
the same credentials and TLS files. Without ``--allow-writes`` the console only reads.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from typing import TYPE_CHECKING, Any

from console.config import (
    DEFAULT_LISTEN,
    DEFAULT_QUOTA_BYTES,
    ClusterSpec,
    ConsoleConfig,
    parse_cluster,
    parse_listen,
)
from nameserver.client import OptionError

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["build_config", "register", "run_console"]

EXIT_OK = 0
EXIT_USAGE = 2


def build_config(args: argparse.Namespace, common: Any) -> ConsoleConfig:
    """The configuration of a parsed command line; ValueError (OptionError) names the flag."""
    host, port = parse_listen(args.listen)
    connection = common.connection(args)
    specs: list[ClusterSpec] = []
    if getattr(args, "endpoints", None) or not args.cluster:
        specs.append(ClusterSpec("default", connection))
    for value in args.cluster:
        name, endpoints = parse_cluster(value)
        eps = tuple(e.strip() for e in endpoints.split(",") if e.strip())
        specs.append(ClusterSpec(name, dataclasses.replace(connection, endpoints=eps)))
    return ConsoleConfig(
        host=host,
        port=port,
        clusters=tuple(specs),
        allow_writes=args.allow_writes,
        quota_bytes=args.quota_bytes,
        sample_every_s=args.sample_every_s,
    ).validate()


def run_console(args: argparse.Namespace, common: Any) -> int:
    import uvicorn

    from console.app import create_app

    try:
        config = build_config(args, common)
    except (ValueError, OptionError) as exc:
        print(f"metaledger console: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s [%(name)s] %(message)s"
    )
    mode = "read-write" if config.allow_writes else "read-only"
    names = ", ".join(f"{c.name}={','.join(c.connection.endpoints)}" for c in config.clusters)
    logging.getLogger("console").info(
        "console (%s) of %s on http://%s:%d", mode, names, config.host, config.port
    )
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            host=config.host,
            port=config.port,
            log_level="warning",
            access_log=False,
            lifespan="on",
        )
    )
    server.run()
    return EXIT_OK


def register(subparsers: Subparsers, common: Any) -> None:
    p = subparsers.add_parser(
        "console",
        parents=[common.parent],
        help="a web console of one or more clusters (read-only unless --allow-writes)",
        description=(
            "Serve the web console: the Cluster page (members, leader, offsets and lag,"
            " alarms, a live commits/s chart) and the Keys page (a paged prefix tree, search"
            " by key and value, values as text/JSON/hex, history by revision)."
        ),
    )
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"where to serve (default {DEFAULT_LISTEN})",
    )
    p.add_argument(
        "--cluster",
        action="append",
        default=[],
        metavar="NAME=HOST:PORT,...",
        help="another cluster by name (repeatable); --endpoints is the one called 'default'",
    )
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="let the Keys and Users pages change keys, users and roles (each change asks for "
        "confirmation)",
    )
    p.add_argument(
        "--quota-bytes",
        type=int,
        default=DEFAULT_QUOTA_BYTES,
        metavar="BYTES",
        help="the servers' --quota-backend-bytes, to show the database size against"
        " (default 2 GiB, the servers' default)",
    )
    p.add_argument(
        "--sample-every",
        dest="sample_every_s",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often the console samples each cluster for its charts (default 1)",
    )
    p.set_defaults(run=lambda args: run_console(args, common))
