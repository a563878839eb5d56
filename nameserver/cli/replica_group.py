"""``metaledger replica-group show NAME | list | elect NAME | alter-isr NAME | policy NAME``.

Replica groups of quorum-write brokers (RocketMQ 5 controller semantics). ``show`` prints the
member group and its need_ack_nums; ``alter-isr`` is the epoch-fenced compare-and-set of the
in-sync set (give the epochs ``show`` printed); ``elect`` picks a master by policy, or
``--broker-id``, from outside the in-sync set only with ``--unclean``.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from nameserver.cli._common import make_client, non_negative_int, positive_int, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.printers import format_table

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers
    from nameserver.client.replica_groups import ReplicaGroupInfo


def group_json(g: ReplicaGroupInfo) -> dict[str, Any]:
    return dataclasses.asdict(g)


def group_text(g: ReplicaGroupInfo) -> str:
    p = g.policy
    lines = [
        f"group {g.broker_name} (cluster {g.cluster_name})",
        f"master: {g.master_id or 'none'} {g.master_address}".rstrip()
        + f", master epoch {g.master_epoch}",
        f"in-sync set: {','.join(map(str, g.sync_state_set)) or '-'}"
        f" (epoch {g.sync_state_set_epoch})",
        f"policy: totalReplicas={p.total_replicas} inSyncReplicas={p.in_sync_replicas} "
        f"minInSyncReplicas={p.min_in_sync_replicas} "
        f"enableAutoInSyncReplicas={str(p.enable_auto_in_sync_replicas).lower()} "
        f"haMaxGapNotInSync={p.ha_max_gap_not_in_sync}",
    ]
    if g.need_ack is not None:
        n = g.need_ack
        lines.append(
            f"need_ack_nums: {n.need_ack_nums} (in sync {n.in_sync_replicas}, "
            f"alive {n.alive_replicas}): {n.status}"
        )
    rows = [
        [
            r.broker_id,
            r.address,
            "master" if r.broker_id == g.master_id else "slave",
            "yes" if r.alive else "no",
            "yes" if r.in_sync else "no",
        ]
        for r in g.replicas
    ]
    lines.append(format_table(("ID", "ADDRESS", "ROLE", "ALIVE", "IN SYNC"), rows))
    return "\n".join(lines)


def run_show(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        g = client.replica_group(args.name)
    printer(args).report(group_json(g), group_text(g))
    return ExitCode.OK


def run_list(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        groups = client.replica_groups(args.cluster)
    rows = [
        [
            g.broker_name,
            g.cluster_name,
            g.master_id or "-",
            g.master_epoch,
            ",".join(map(str, g.sync_state_set)) or "-",
            g.sync_state_set_epoch,
            ",".join(str(r.broker_id) for r in g.replicas if r.alive) or "-",
        ]
        for g in groups
    ]
    headers = ("GROUP", "CLUSTER", "MASTER", "EPOCH", "IN SYNC", "ISR EPOCH", "ALIVE")
    printer(args).report({"groups": [group_json(g) for g in groups]}, format_table(headers, rows))
    return ExitCode.OK


def run_elect(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        w = client.replica_elect(args.name, args.broker_id, args.unclean)
    g = w.group
    doc = {"revision": w.revision, "changed": w.changed, "code": w.code, "group": group_json(g)}
    if w.changed:
        text = f"elected {g.master_id} ({g.master_address}), master epoch {g.master_epoch}"
    else:
        text = f"master {g.master_id} is still valid, master epoch {g.master_epoch} ({w.code})"
    printer(args).report(doc, text)
    return ExitCode.OK


def run_alter_isr(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        current = client.replica_group(args.name) if args.master is None else None
        w = client.replica_alter_isr(
            args.name,
            master_id=args.master if current is None else current.master_id,
            master_epoch=args.master_epoch,
            sync_state_set_epoch=args.isr_epoch,
            sync_state_set=args.isr,
        )
    g = w.group
    doc = {"revision": w.revision, "group": group_json(g)}
    text = (
        f"in-sync set {','.join(map(str, g.sync_state_set))} "
        f"(epoch {g.sync_state_set_epoch}, revision {w.revision})"
    )
    printer(args).report(doc, text)
    return ExitCode.OK


def run_policy(args: argparse.Namespace) -> int:
    from nameserver.client.replica_groups import GroupPolicy

    policy = GroupPolicy(
        args.total_replicas,
        args.in_sync_replicas,
        args.min_in_sync_replicas,
        args.auto,
        args.ha_max_gap_not_in_sync,
    )
    with make_client(args) as client:
        w = client.replica_set_policy(args.name, policy, args.cluster)
    printer(args).report(
        {"revision": w.revision, "group": group_json(w.group)}, f"OK (revision {w.revision})"
    )
    return ExitCode.OK


def id_list(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of broker ids: {text!r}"
        ) from None
    if not ids or any(i < 1 for i in ids):
        raise argparse.ArgumentTypeError(f"broker ids are >= 1: {text!r}")
    return ids


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser(
        "replica-group", parents=[common], help="replica groups of quorum-write brokers"
    )
    cmds = group.add_subparsers(dest="replica_group_command", required=True, metavar="COMMAND")
    s = cmds.add_parser("show", parents=[common], help="a member group and its need_ack_nums")
    s.add_argument("name", metavar="NAME", help="broker name")
    s.set_defaults(run=run_show)
    ls = cmds.add_parser("list", parents=[common], help="every replica group")
    ls.add_argument("--cluster", default="", help="only this cluster's groups")
    ls.set_defaults(run=run_list)
    e = cmds.add_parser("elect", parents=[common], help="elect a master")
    e.add_argument("name", metavar="NAME")
    e.add_argument(
        "--broker-id", type=positive_int, default=0, metavar="N", help="elect this replica"
    )
    e.add_argument("--unclean", action="store_true", help="allow a replica outside the in-sync set")
    e.set_defaults(run=run_elect)
    a = cmds.add_parser("alter-isr", parents=[common], help="change the in-sync set (fenced)")
    a.add_argument("name", metavar="NAME")
    a.add_argument("--master-epoch", type=non_negative_int, required=True, metavar="E")
    a.add_argument("--isr-epoch", type=non_negative_int, required=True, metavar="E")
    a.add_argument("--isr", type=id_list, required=True, metavar="1,2,...")
    a.add_argument(
        "--master",
        type=positive_int,
        default=None,
        metavar="N",
        help="the master's broker id (default: the current master)",
    )
    a.set_defaults(run=run_alter_isr)
    p = cmds.add_parser("policy", parents=[common], help="set the quorum-write policy")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--cluster", default="", help="required when the group does not exist yet")
    p.add_argument("--total-replicas", type=positive_int, default=1, metavar="N")
    p.add_argument("--in-sync-replicas", type=positive_int, default=1, metavar="N")
    p.add_argument("--min-in-sync-replicas", type=positive_int, default=1, metavar="N")
    p.add_argument("--auto", action="store_true", help="enableAutoInSyncReplicas")
    p.add_argument(
        "--ha-max-gap-not-in-sync",
        type=non_negative_int,
        default=0,
        metavar="BYTES",
        help="0: 262144",
    )
    p.set_defaults(run=run_policy)
