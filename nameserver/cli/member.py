"""``metaledger member list``: the members, through etcd's Cluster.MemberList."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from nameserver.cli._common import make_client, printer
from nameserver.cli.exitcodes import ExitCode

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers


def run_member_list(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        members = client.members()
    printer(args).members(members)
    return ExitCode.OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser("member", help="cluster membership")
    actions = group.add_subparsers(dest="member_command", required=True, metavar="ACTION")
    ls = actions.add_parser("list", parents=[common], help="list the members")
    ls.set_defaults(run=run_member_list)
