"""``metaledger watch KEY``: print changes as they happen, like ``etcdctl watch``.

Table output is etcdctl's: per event its type, then (with ``--prev-kv``) the previous key and
value, then the key and value. JSON output is one object per line. Runs until Ctrl-C
(exit INTERRUPTED) or ``--max-events`` events; when the watched node fails it resumes on
another endpoint from the last revision + 1 (:mod:`nameserver.client.watch`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from nameserver.cli._common import make_client, non_negative_int, output
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.printers import display, kv_json
from nameserver.client.watch import SNAPSHOT_END, WatchEvent

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers


def print_event(ev: WatchEvent, fmt: str, out: TextIO) -> None:
    if fmt == "json":
        doc: dict[str, Any] = {"type": ev.type, "revision": ev.revision}
        if ev.kv is not None:
            doc["kv"] = kv_json(ev.kv)
        if ev.prev_kv is not None:
            doc["prev_kv"] = kv_json(ev.prev_kv)
        if ev.snapshot_revision:
            doc["snapshot_revision"] = ev.snapshot_revision
        print(json.dumps(doc), file=out)
    else:
        print(ev.type, file=out)
        for kv in (ev.prev_kv, ev.kv):
            if kv is not None:
                print(display(kv.key), file=out)
                print(display(kv.value), file=out)
    out.flush()


def run_watch(args: argparse.Namespace) -> int:
    fmt = output(args)
    seen = 0
    with (
        make_client(args) as client,
        client.watch(
            args.key,
            prefix=args.prefix,
            range_end=args.range_end,
            start_revision=args.rev,
            prev_kv=args.prev_kv,
            snapshot_if_compacted=args.snapshot_if_compacted,
        ) as events,
    ):
        for ev in events:
            print_event(ev, fmt, sys.stdout)
            if ev.type != SNAPSHOT_END:
                seen += 1
            if args.max_events and seen >= args.max_events:
                break
    return ExitCode.OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("watch", parents=[common], help="print changes of a key or range")
    p.add_argument("key")
    p.add_argument("range_end", nargs="?", help="exclusive end of the range [KEY, RANGE_END)")
    p.add_argument("--prefix", action="store_true", help="every key starting with KEY")
    p.add_argument(
        "--rev", type=non_negative_int, default=0, help="start at this revision (default: now)"
    )
    p.add_argument("--prev-kv", action="store_true", help="print the previous key-value too")
    p.add_argument(
        "--snapshot-if-compacted",
        action="store_true",
        help="if --rev is compacted, print the range's current state (then changes) instead",
    )
    p.add_argument(
        "--max-events", type=non_negative_int, default=0, help="stop after N events (0: never)"
    )
    p.set_defaults(run=run_watch)
