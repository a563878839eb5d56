"""``metaledger member add|promote|remove|list``: membership, through etcd's Cluster service.

``member add PEER_URL`` prints the new member's id and the whole ``serve`` command the new node
runs with, as ``etcdctl member add`` prints the ``ETCD_INITIAL_CLUSTER`` to use: its id, data
dir (``--data-dir``, default the node's name: ``cluster up``'s layout when run from its DIR),
its ports (``cluster up``'s layout around the peer port: client one below, remoting and
metrics one and two above), every member in ``--initial-cluster``, and the cluster's password
file (``--cluster-password-file``, default ``cluster-password``, ``cluster up``'s) and token
(``--initial-cluster-token``, when given). docs/operations.md's order is start, then add: the
command is the one to start it with before, and to check it against after. ``member remove``
takes the member's hex id (as ``member list`` shows it) or its name (the node id).

``member add --learner`` adds a non-voting member (etcd 3.4's learner: it gets the log but
neither votes nor counts for a quorum); ``member promote ID|NAME`` makes it a voter once it
has caught up (refused before, as etcd refuses it).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nameserver.cli._common import make_client, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.client import InvalidArgument, Member, NotFound, normalize_peer_url

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers

_HEX_ID = re.compile(r"(0x)?[0-9a-fA-F]{1,16}")


def member_id_text(member_id: int) -> str:
    """A member id as etcdctl writes it: lower-case hex, no prefix."""
    return f"{member_id:x}"


def resolve_member(members: Sequence[Member], text: str) -> Member:
    """The member named ``text`` (its node id), else the one whose hex id it is.

    A name wins over an id that happens to read as hex (a node named ``abc``)."""
    for m in members:
        if m.name and m.name == text:
            return m
    if _HEX_ID.fullmatch(text):
        wanted = int(text, 16)
        for m in members:
            if m.member_id == wanted:
                return m
    known = ", ".join(f"{m.name or '(unstarted)'}={member_id_text(m.member_id)}" for m in members)
    raise NotFound(f"no member named {text!r} or with that hex id (members: {known})")


def next_name(members: Sequence[Member]) -> str:
    """The first ``n<i>`` no member uses (``cluster up`` names nodes n0, n1, ...)."""
    taken = {m.name for m in members}
    i = 0
    while f"n{i}" in taken:
        i += 1
    return f"n{i}"


def _address(url: str) -> str:
    return url.removeprefix("http://").removeprefix("https://").rstrip("/")


def serve_flags(
    members: Sequence[Member],
    new: Member,
    name: str,
    data_dir: str = "",
    password_file: str = "",
    token: str = "",
) -> list[str]:
    """``serve`` flags for the new member: its id and peer address, and every member (named,
    or by hex id when unstarted) plus itself in ``--initial-cluster``; then, when given, its
    data dir, its other ports (``cluster up``'s layout around the peer port), the cluster
    token and the password file."""
    peer = _address(new.peer_urls[0])
    cluster = [
        f"{m.name or member_id_text(m.member_id)}={_address(m.peer_urls[0])}"
        for m in members
        if m.member_id != new.member_id and m.peer_urls
    ]
    cluster.append(f"{name}={peer}")
    flags = ["--id", name, "--listen-peer", peer, "--initial-cluster", ",".join(cluster)]
    if data_dir:
        flags += ["--data-dir", data_dir]
        host, _, port = peer.rpartition(":")
        if 1 < int(port) < 65534:  # client B, peer B+1, remoting B+2, metrics B+3
            for flag, at in (("client", -1), ("remoting", 1), ("metrics", 2)):
                flags += [f"--listen-{flag}", f"{host}:{int(port) + at}"]
    if token:
        flags += ["--initial-cluster-token", token]
    if password_file:
        flags += ["--cluster-password-file", password_file]
    return flags


def add_report(new: Member, name: str, flags: list[str]) -> tuple[dict[str, Any], str]:
    doc = {
        "member": dataclasses.asdict(new),
        "id": member_id_text(new.member_id),
        "name": name,
        "serve_flags": flags,
    }
    text = "\n".join(
        [
            f"Member {member_id_text(new.member_id)} added to the cluster"
            + (
                " as a learner (`member promote` it once it has caught up)"
                if new.is_learner
                else ""
            ),
            "",
            f"Node {name} runs with (start it so, from an empty data dir, if it is not running"
            " yet: docs/operations.md starts a new member, then adds it):",
            "metaledger serve " + " ".join(flags),
        ]
    )
    return doc, text


def run_member_add(args: argparse.Namespace) -> int:
    url = normalize_peer_url(args.peer_url)
    with make_client(args) as client:
        before = client.members()
        name = args.name or next_name(before)
        if any(m.name == name for m in before):
            raise InvalidArgument(f"a member is already named {name!r}; choose --name")
        new = client.member_add(url, learner=args.learner)
        members = client.members()
    flags = serve_flags(
        members, new, name, args.data_dir or name, args.cluster_password_file, args.token
    )
    doc, text = add_report(new, name, flags)
    printer(args).report(doc, text)
    return ExitCode.OK


def _change_one(args: argparse.Namespace, done: str, text: str) -> int:
    """``member remove`` / ``member promote``: the member ``args.member`` resolved, the
    change made; ``done`` names it in the JSON report, ``text`` follows "Member ID (NAME)"."""
    with make_client(args) as client:
        target = resolve_member(client.members(), args.member)
        if done == "removed":
            members = client.member_remove(target.member_id)
        else:
            members = client.member_promote(target.member_id)
    doc = {
        done: dataclasses.asdict(target),
        "id": member_id_text(target.member_id),
        "members": [dataclasses.asdict(m) for m in members],
    }
    what = member_id_text(target.member_id) + (f" ({target.name})" if target.name else "")
    printer(args).report(doc, f"Member {what} {text}")
    return ExitCode.OK


def run_member_remove(args: argparse.Namespace) -> int:
    return _change_one(args, "removed", "removed from the cluster; stop that node now")


def run_member_promote(args: argparse.Namespace) -> int:
    return _change_one(args, "promoted", "promoted: it votes from now on")


def run_member_list(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        members = client.members()
    printer(args).members(members)
    return ExitCode.OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser("member", help="cluster membership")
    actions = group.add_subparsers(dest="member_command", required=True, metavar="ACTION")

    add = actions.add_parser(
        "add",
        parents=[common],
        help="add a voting member (or --learner); prints the serve command it runs with",
    )
    add.add_argument(
        "--learner",
        action="store_true",
        help="add a non-voting member (a learner); `member promote` makes it vote",
    )
    add.add_argument("peer_url", metavar="PEER_URL", help="the new node's http://host:port")
    add.add_argument(
        "--name",
        default="",
        help="the new node's id (default: the first n<i> no member uses)",
    )
    add.add_argument(
        "--data-dir",
        default="",
        metavar="DIR",
        help="the new node's data dir, in the printed command (default: its name)",
    )
    add.add_argument(
        "--cluster-password-file",
        default="cluster-password",
        metavar="PATH",
        help="the members' password file, in the printed command (default cluster-password:"
        " `cluster up`'s, from its DIR)",
    )
    add.add_argument(
        "--initial-cluster-token",
        dest="token",
        default="",
        metavar="TOKEN",
        help="the cluster's token, in the printed command (`cluster up`: DIR/cluster-token)",
    )
    add.set_defaults(run=run_member_add)

    promote = actions.add_parser(
        "promote", parents=[common], help="make a learner a voting member once caught up"
    )
    promote.add_argument("member", metavar="ID|NAME", help="hex member id or node name")
    promote.set_defaults(run=run_member_promote)

    remove = actions.add_parser("remove", parents=[common], help="remove a member")
    remove.add_argument("member", metavar="ID|NAME", help="hex member id or node name")
    remove.set_defaults(run=run_member_remove)

    ls = actions.add_parser("list", parents=[common], help="list the members")
    ls.set_defaults(run=run_member_list)
