"""``metaledger offsets commit|fetch|list|reset`` and ``metaledger quota set|list``.

Offsets are opaque bytes, given and shown as text (shown with ``\\xNN`` escapes, or base64
in JSON, when not UTF-8). ``commit`` needs the worker's lease (hex, as etcdctl prints it)
and fencing token (the lease's grant revision or a lock key's create revision).
"""

from __future__ import annotations

import argparse
import base64
from typing import TYPE_CHECKING, Any

from nameserver.cli._common import make_client, non_negative_int, printer, report_revision
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.kv import lease_id
from nameserver.cli.printers import display, format_table

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers
    from nameserver.client.offsets import CommittedOffset, OffsetWrite


def offset_json(o: CommittedOffset) -> dict[str, Any]:
    try:
        text, encoding = o.offset.decode(), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(o.offset).decode(), "base64"
    return {
        "job": o.job,
        "partition": o.partition,
        "offset": text,
        "encoding": encoding,
        "position": o.position,
        "version": o.version,
        "epoch": o.epoch,
        "lease": f"{o.lease_id:x}",
        "fencing_token": o.fencing_token,
        "create_revision": o.create_revision,
        "mod_revision": o.mod_revision,
        "reset_revision": o.reset_revision,
    }


OFFSET_HEADERS = ("JOB", "PARTITION", "OFFSET", "POSITION", "VERSION", "EPOCH", "LEASE", "TOKEN")


def offset_row(o: CommittedOffset) -> list[object]:
    lease = f"{o.lease_id:x}" if o.lease_id else "-"
    return [
        o.job,
        o.partition,
        display(o.offset),
        o.position,
        o.version,
        o.epoch,
        lease,
        o.fencing_token,
    ]


def _report_write(args: argparse.Namespace, what: str, w: OffsetWrite) -> int:
    doc: dict[str, Any] = {"revision": w.revision, "version": w.version, "epoch": w.epoch}
    text = f"{what} (revision {w.revision}, version {w.version}, epoch {w.epoch})"
    if getattr(args, "keepalive", False):
        doc["ttl"] = w.ttl
        text += f"; lease TTL {w.ttl}s" if w.ttl else "; lease expired"
    printer(args).report(doc, text)
    return ExitCode.OK


def run_commit(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        w = client.offsets_commit(
            args.job,
            args.partition,
            args.offset,
            lease_id=args.lease,
            fencing_token=args.token,
            position=args.position,
            expected_version=args.expected_version,
            epoch=args.epoch,
            keepalive=args.keepalive,
        )
    return _report_write(args, "committed", w)


def run_reset(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        w = client.offsets_reset(
            args.job,
            args.partition,
            args.offset,
            position=args.position,
            expected_version=args.expected_version,
        )
    return _report_write(args, "reset", w)


def run_fetch(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        o = client.offsets_fetch(args.job, args.partition)
    doc = offset_json(o) | {"revision": o.revision}
    printer(args).report(doc, format_table(OFFSET_HEADERS, [offset_row(o)]))
    return ExitCode.OK


def run_list(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        result = client.offsets_list(args.job, prefix=args.prefix)
    doc = {
        "offsets": [offset_json(o) for o in result.offsets],
        "revision": result.revision,
        "consistency": result.consistency,
    }
    printer(args).report(doc, format_table(OFFSET_HEADERS, [offset_row(o) for o in result.offsets]))
    return ExitCode.OK


def run_quota_set(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        revision = client.quota_set(args.record_type, args.max_keys, args.max_bytes)
    return report_revision(args, revision)


def run_quota_list(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        usage = client.quota_list()
    rows = [
        [u.record_type, u.keys, u.max_keys or "unlimited", u.bytes, u.max_bytes or "unlimited"]
        for u in usage
    ]
    doc = {
        "quotas": [
            {
                "record_type": u.record_type,
                "keys": u.keys,
                "max_keys": u.max_keys,
                "bytes": u.bytes,
                "max_bytes": u.max_bytes,
            }
            for u in usage
        ]
    }
    printer(args).report(
        doc, format_table(("TYPE", "KEYS", "MAX KEYS", "BYTES", "MAX BYTES"), rows)
    )
    return ExitCode.OK


def _target(p: argparse.ArgumentParser, with_offset: bool) -> None:
    p.add_argument("job")
    p.add_argument("partition")
    if with_offset:
        p.add_argument("offset", help="the offset (opaque text)")
        p.add_argument(
            "--position",
            type=non_negative_int,
            default=0,
            metavar="N",
            help="orders commits: a commit may not lower it (default 0)",
        )
        p.add_argument(
            "--expected-version",
            type=non_negative_int,
            default=0,
            metavar="N",
            help="only if the stored version is N (0: no check)",
        )


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser("offsets", parents=[common], help="replicator offsets")
    cmds = group.add_subparsers(dest="offsets_command", required=True, metavar="COMMAND")
    c = cmds.add_parser("commit", parents=[common], help="commit an offset (fenced by a lease)")
    _target(c, True)
    c.add_argument("--lease", type=lease_id, required=True, metavar="ID", help="lease ID (hex)")
    c.add_argument(
        "--token",
        type=non_negative_int,
        required=True,
        metavar="N",
        help="fencing token: the lease's grant revision or a lock key's create revision",
    )
    c.add_argument(
        "--epoch", type=non_negative_int, default=0, metavar="N", help="only in this epoch"
    )
    c.add_argument("--keepalive", action="store_true", help="also keep the lease alive")
    c.set_defaults(run=run_commit)
    f = cmds.add_parser("fetch", parents=[common], help="the committed offset of a partition")
    _target(f, False)
    f.set_defaults(run=run_fetch)
    ls = cmds.add_parser("list", parents=[common], help="the offsets of a job")
    ls.add_argument("job", nargs="?", default="")
    ls.add_argument("--prefix", action="store_true", help="every job starting with JOB")
    ls.set_defaults(run=run_list)
    r = cmds.add_parser("reset", parents=[common], help="set an offset (backwards too), new epoch")
    _target(r, True)
    r.set_defaults(run=run_reset)

    quota = sub.add_parser("quota", parents=[common], help="quotas per record type")
    qcmds = quota.add_subparsers(dest="quota_command", required=True, metavar="COMMAND")
    qs = qcmds.add_parser("set", parents=[common], help="set a record type's limits")
    qs.add_argument(
        "record_type",
        metavar="TYPE",
        help="kv | lease | offset | replica_group | broker | topic | kvconfig",
    )
    qs.add_argument("--max-keys", type=non_negative_int, default=0, metavar="N", help="0: none")
    qs.add_argument("--max-bytes", type=non_negative_int, default=0, metavar="N", help="0: none")
    qs.set_defaults(run=run_quota_set)
    ql = qcmds.add_parser("list", parents=[common], help="limits and usage per record type")
    ql.set_defaults(run=run_quota_list)
