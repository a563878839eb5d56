"""``metaledger user set-secret-key NAME SECRET``: a user's RocketMQ ACL 1.0 secret key.

Remoting clients sign their writes with (access key = the user's name, this secret key);
users, roles and auth on/off are etcdctl's (``etcdctl user|role|auth``; docs/auth.md).
Root only while auth is on: give ``--user root[:PASSWORD]``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from nameserver.cli._common import make_client, report_revision

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers


def run_set_secret_key(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        revision = client.user_set_secret_key(args.name, args.secret_key)
    return report_revision(args, revision)


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser("user", parents=[common], help="users' remoting secret keys (ACL)")
    cmds = group.add_subparsers(dest="user_command", required=True, metavar="COMMAND")
    s = cmds.add_parser(
        "set-secret-key",
        parents=[common],
        help="set a user's RocketMQ ACL secret key (the access key is the user's name)",
    )
    s.add_argument("name", help="the user (the access key)")
    s.add_argument("secret_key", metavar="SECRET", help='the secret key ("" clears it)')
    s.set_defaults(run=run_set_secret_key)
