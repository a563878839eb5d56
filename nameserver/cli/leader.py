"""``metaledger leader transfer [ID|NAME]``: hand leadership over (Maintenance.MoveLeader).

Without a member the leader picks its most caught-up follower (``--to`` is the same argument
as a flag). The command finds the leader
among ``--endpoints`` itself (as ``etcdctl move-leader`` needs every endpoint for), and ends
once the old leader names the new one.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from nameserver.cli._common import UsageError, make_client, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.member import member_id_text, resolve_member

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers


def transfer_target(args: argparse.Namespace) -> str:
    """The member named positionally or with ``--to`` ("" for the leader's choice)."""
    if args.member and args.to and args.member != args.to:
        raise UsageError(f"leader transfer: two members given ({args.member!r}, --to {args.to!r})")
    return str(args.member or args.to or "")


def run_leader_transfer(args: argparse.Namespace) -> int:
    target = transfer_target(args)
    with make_client(args) as client:
        target_id = resolve_member(client.members(), target).member_id if target else 0
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
        "member",
        nargs="?",
        default="",
        metavar="ID|NAME",
        help="node name (n1) or hex member id (default: the most caught-up follower)",
    )
    transfer.add_argument("--to", metavar="ID|NAME", default="", help="the same as ID|NAME")
    transfer.set_defaults(run=run_leader_transfer)
