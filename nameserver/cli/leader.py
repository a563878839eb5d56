"""``metaledger leader transfer [--to ID|NAME]``: hand leadership over (Maintenance.MoveLeader).

Without ``--to`` the leader picks its most caught-up follower. The command finds the leader
among ``--endpoints`` itself (as ``etcdctl move-leader`` needs every endpoint for), and ends
once the old leader names the new one.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from nameserver.cli._common import make_client, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.member import member_id_text, resolve_member

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers


def run_leader_transfer(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        target_id = resolve_member(client.members(), args.to).member_id if args.to else 0
        result = client.move_leader(target_id)
    doc = {
        "previous": result.previous,
        "leader": result.leader,
        "target_id": member_id_text(target_id) if target_id else "",
    }
    if result.previous == result.leader:
        text = f"{result.leader} already leads"
    else:
        text = f"Leadership transferred from {result.previous} to {result.leader}"
    printer(args).report(doc, text)
    return ExitCode.OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser("leader", help="Raft leadership")
    actions = group.add_subparsers(dest="leader_command", required=True, metavar="ACTION")
    transfer = actions.add_parser(
        "transfer", parents=[common], help="hand leadership to another member"
    )
    transfer.add_argument(
        "--to",
        metavar="ID|NAME",
        default="",
        help="hex member id or node name (default: the most caught-up follower)",
    )
    transfer.set_defaults(run=run_leader_transfer)
