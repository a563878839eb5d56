"""``metaledger status``: Admin.Status of every endpoint (role, term, leader, three offsets)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from nameserver.cli._common import make_client, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.client import ClientError, NodeStatus

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers


def split_results(
    results: list[NodeStatus | ClientError],
) -> tuple[list[NodeStatus], list[ClientError]]:
    nodes = [r for r in results if isinstance(r, NodeStatus)]
    errors = [r for r in results if isinstance(r, ClientError)]
    return nodes, errors


def run_status(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        nodes, errors = split_results(client.status_all())
    for err in errors:
        print(f"metaledger: {err}", file=sys.stderr)
    if not nodes:
        return ExitCode.UNAVAILABLE
    printer(args).status(nodes)
    return ExitCode.OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("status", parents=[common], help="status of every endpoint")
    p.set_defaults(run=run_status)
