"""``metaledger snapshot SUBCOMMAND``: snapshot files (DESIGN.md §4).

``inspect FILE`` prints a snapshot's header (offset, term, cluster, per-type counts and
content hashes); ``--verify`` reads the whole file and checks every frame, the checksum and
the hashes. Each action is a ``_register_<name>(subparsers, common)`` listed in
``_SUBCOMMANDS``, so ``save``/``list``/``restore`` slot in the same way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nameserver.cli._common import printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.printers import format_table

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers


def run_inspect(args: argparse.Namespace) -> int:
    from snapshots import SnapshotError, inspect

    try:
        info = inspect(args.file, verify=args.verify)
    except (SnapshotError, OSError) as exc:
        print(f"metaledger: snapshot inspect: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    doc: dict[str, Any] = info.to_json()
    if args.verify:
        doc["verified"] = True
    fields = [
        ("path", doc["path"]),
        ("cluster id", info.cluster_id),
        ("last offset", info.last_offset),
        ("last term", info.last_term),
        ("raft index", info.raft_index),
        ("created ms", info.created_ms),
        ("records", info.record_count),
        ("size bytes", info.size_bytes),
        ("format", f"v{info.format_version}, {info.hash_algorithm}"),
        ("verified", "yes" if args.verify else "header only (--verify checks all)"),
    ]
    width = max(len(name) for name, _ in fields)
    lines = [f"{name.ljust(width)}  {value}" for name, value in fields]
    rows = [[t, c, info.hashes[t]] for t, c in info.counts.items()]
    text = "\n".join(lines) + "\n\n" + format_table(("TYPE", "COUNT", "HASH"), rows)
    printer(args).report(doc, text)
    return ExitCode.OK


def _register_inspect(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("inspect", parents=[common], help="print a snapshot file's header")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--verify", action="store_true", help="read and verify the whole file")
    p.set_defaults(run=run_inspect)


_SUBCOMMANDS: tuple[Callable[[Subparsers, argparse.ArgumentParser], None], ...] = (
    _register_inspect,
)


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser(
        "snapshot",
        help="snapshot files (inspect)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = group.add_subparsers(dest="snapshot_command", required=True, metavar="ACTION")
    for add in _SUBCOMMANDS:
        add(actions, common)
