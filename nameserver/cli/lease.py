"""``metaledger lease grant TTL | revoke ID | keep-alive ID [--once] | ttl ID [--keys] | list``.

Lease ids are hexadecimal, as ``etcdctl`` prints and takes them, and the table output uses
etcdctl's sentences. ``grant`` also prints the fencing token (the grant's revision). An unknown
or expired lease is NOT_FOUND (exit code 4) for ``revoke``, ``keep-alive`` and ``ttl``;
``keep-alive`` without ``--once`` renews at TTL/3 until Ctrl-C (exit 0) or until the lease is
lost (exit 4 when the server says it is gone, 3 when no endpoint answered within its TTL).
"""

from __future__ import annotations

import argparse
import threading
from typing import TYPE_CHECKING

from nameserver.cli._common import make_client, number_type, positive_int, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.lock import stop_signals

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers


#: A lease id as etcdctl writes it: hexadecimal, without ``0x``.
lease_id = number_type(
    lambda text: int(text, 16),
    "is not a hexadecimal lease ID",
    lambda v: 0 < v < 1 << 63,
    ": a lease ID is > 0 and below 2^63",
)


def run_grant(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        lease = client.lease_grant(args.ttl)
    doc = {"id": f"{lease.id:x}", "ttl": lease.ttl_s, "fencing_token": lease.fencing_token}
    text = (
        f"lease {lease.id:x} granted with TTL({lease.ttl_s}s), fencing token {lease.fencing_token}"
    )
    printer(args).report(doc, text)
    return ExitCode.OK


def run_revoke(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        revision = client.lease_revoke(args.id)
    printer(args).report({"id": f"{args.id:x}", "revision": revision}, f"lease {args.id:x} revoked")
    return ExitCode.OK


def run_keep_alive(args: argparse.Namespace) -> int:
    out = printer(args)

    def renewed(ttl_s: int) -> None:
        out.report(
            {"id": f"{args.id:x}", "ttl": ttl_s}, f"lease {args.id:x} keepalived with TTL({ttl_s})"
        )

    with make_client(args) as client:
        if args.once:
            renewed(client.lease_keep_alive_once(args.id))
            return ExitCode.OK
        lost = threading.Event()
        keeper = client.keep_alive(args.id, on_lost=lambda _: lost.set(), on_renew=renewed)
        with stop_signals(lost), keeper:
            lost.wait()
        if not keeper.lost.is_set():
            return ExitCode.OK
    out.report(
        {"id": f"{args.id:x}", "lost": keeper.error},
        f"lease {args.id:x} expired or revoked: {keeper.error}",
    )
    gone = keeper.error is not None and "TTL 0" in keeper.error
    return ExitCode.NOT_FOUND if gone else ExitCode.UNAVAILABLE


def run_ttl(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        ttl = client.lease_time_to_live(args.id, keys=args.keys)
    keys = [k.decode("utf-8", "backslashreplace") for k in ttl.keys]
    doc = {
        "id": f"{args.id:x}",
        "ttl": ttl.ttl_s,
        "granted_ttl": ttl.granted_ttl_s,
        **({"keys": keys} if args.keys else {}),
    }
    if not ttl.exists:
        printer(args).report(doc, f"lease {args.id:x} already expired (or was never granted)")
        return ExitCode.NOT_FOUND
    text = f"lease {args.id:x} granted with TTL({ttl.granted_ttl_s}s), remaining({ttl.ttl_s}s)"
    if args.keys:
        text += f", attached keys([{' '.join(keys)}])"
    printer(args).report(doc, text)
    return ExitCode.OK


def run_list(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        ids = client.lease_leases()
    lines = [f"found {len(ids)} leases", *(f"{i:x}" for i in ids)]
    printer(args).report({"leases": [f"{i:x}" for i in ids]}, "\n".join(lines))
    return ExitCode.OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser("lease", help="leases (etcd's Lease service)")
    actions = group.add_subparsers(dest="lease_command", required=True, metavar="ACTION")

    grant = actions.add_parser("grant", parents=[common], help="grant a lease")
    grant.add_argument("ttl", metavar="TTL", type=positive_int, help="time to live in seconds")
    grant.set_defaults(run=run_grant)

    revoke = actions.add_parser("revoke", parents=[common], help="revoke a lease and its keys")
    revoke.add_argument("id", metavar="ID", type=lease_id, help="lease ID (hex)")
    revoke.set_defaults(run=run_revoke)

    keep = actions.add_parser("keep-alive", parents=[common], help="renew a lease")
    keep.add_argument("id", metavar="ID", type=lease_id, help="lease ID (hex)")
    keep.add_argument("--once", action="store_true", help="renew once and exit")
    keep.set_defaults(run=run_keep_alive)

    ttl = actions.add_parser("ttl", parents=[common], help="remaining time of a lease")
    ttl.add_argument("id", metavar="ID", type=lease_id, help="lease ID (hex)")
    ttl.add_argument("--keys", action="store_true", help="also list the attached keys")
    ttl.set_defaults(run=run_ttl)

    listing = actions.add_parser("list", parents=[common], help="every live lease")
    listing.set_defaults(run=run_list)
