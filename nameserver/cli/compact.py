"""``metaledger compact``: offline compaction of the change log into a snapshot (DESIGN.md §4).

A base snapshot (optional) plus the change-log segments up to ``--upto`` become a new
snapshot, last write wins per (type, key), deletes dropped. ``--engine spark`` (default) runs
the PySpark job of :mod:`snapshots.compaction` on ``--master`` (``local[*]``, ``spark://HOST:PORT``,
``yarn``; the segments must be readable at the same path on every executor);
``--engine local`` is the single-process fold :func:`snapshots.compact_local`. Both write
the same per-type counts and content hashes. The cluster id defaults to the base's; the
last term to the term of the last record at or below ``--upto``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from nameserver.cli._common import non_negative_int, output_parent, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.printers import format_table

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers

ENGINES = ("spark", "local")


def _memory_size(text: str) -> str:
    """A Spark memory size (``512m``, ``2g``), checked here rather than by the JVM."""
    from snapshots.compaction import parse_memory_size

    try:
        parse_memory_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def run_compact(args: argparse.Namespace) -> int:
    from snapshots import SnapshotError, SnapshotMeta, compact_local, inspect
    from snapshots.compaction import compact_spark, last_term_upto

    started = time.monotonic()
    timings: dict[str, float] = {}
    try:
        if args.engine == "spark":
            meta: SnapshotMeta | str | None = args.cluster_id
            if args.last_term is not None:
                cluster = args.cluster_id or (
                    inspect(args.base_snapshot).cluster_id if args.base_snapshot else None
                )
                if cluster is None:
                    raise ValueError("give --cluster-id when there is no --base-snapshot")
                meta = SnapshotMeta(cluster, args.upto, args.last_term)
            info = compact_spark(
                args.segments,
                args.upto,
                args.out,
                meta,
                args.base_snapshot,
                master=args.master,
                progress=not args.no_progress,
                partitions=args.partitions,
                log_level="WARN" if args.verbose else "ERROR",
                fast_jvm=not args.full_jit,
                driver_memory=args.driver_memory,
                executor_memory=args.executor_memory,
                worker_memory=args.worker_memory,
                timings=timings,
            )
        else:
            base = inspect(args.base_snapshot) if args.base_snapshot else None
            cluster = args.cluster_id or (base.cluster_id if base else None)
            if cluster is None:
                raise ValueError("give --cluster-id when there is no --base-snapshot")
            term = args.last_term
            if term is None:
                term = last_term_upto(args.segments, args.upto, base.last_term if base else 0)
            progress = None
            if not args.no_progress:

                def progress(n: int) -> None:
                    print(f"\rcompact: {n:,} records written", end="", file=sys.stderr)

            info = compact_local(
                args.segments,
                args.base_snapshot,
                args.upto,
                args.out,
                SnapshotMeta(cluster, args.upto, term),
                progress,
            )
            if not args.no_progress:
                print(file=sys.stderr)
    except ValueError as exc:
        print(f"metaledger: compact: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except (SnapshotError, OSError) as exc:
        print(f"metaledger: compact: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    doc: dict[str, Any] = info.to_json()
    doc["engine"] = args.engine
    doc["elapsed_s"] = round(time.monotonic() - started, 3)
    if timings:
        doc["timings"] = {k: round(v, 3) for k, v in timings.items()}
    rows = [[t, c, info.hashes[t]] for t, c in info.counts.items()]
    text = (
        f"wrote {info.path} ({info.size_bytes:,} bytes): {info.record_count:,} records "
        f"at offset {info.last_offset} term {info.last_term}, {args.engine} engine, "
        f"{doc['elapsed_s']:.1f} s\n" + format_table(("TYPE", "COUNT", "HASH"), rows)
    )
    printer(args).report(doc, text)
    return ExitCode.OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "compact",
        parents=[output_parent()],
        help="compact change-log segments (+ a base snapshot) into a snapshot, offline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--segments", required=True, metavar="DIR", help="change-log segment dir")
    p.add_argument("--base-snapshot", metavar="FILE", help="snapshot to start from")
    p.add_argument("--upto", required=True, type=non_negative_int, metavar="OFFSET")
    p.add_argument("--out", required=True, metavar="FILE", help="snapshot to write")
    p.add_argument(
        "--master", default="local[*]", help="Spark master: local[*] (default), spark://..., yarn"
    )
    p.add_argument("--cluster-id", help="cluster id of the snapshot (default: the base's)")
    p.add_argument(
        "--last-term",
        type=non_negative_int,
        help="term at --upto (default: of the last record at or below it)",
    )
    p.add_argument("--engine", choices=ENGINES, default="spark")
    p.add_argument("--partitions", type=int, help="Spark shuffle partitions (default: by size)")
    p.add_argument(
        "--driver-memory",
        type=_memory_size,
        metavar="SIZE",
        help="Spark driver heap, e.g. 2g (on local[N] also the executor's; at least 512m)",
    )
    p.add_argument(
        "--executor-memory",
        type=_memory_size,
        metavar="SIZE",
        help="Spark executor heap on a cluster master, e.g. 4g",
    )
    p.add_argument(
        "--worker-memory",
        type=_memory_size,
        metavar="SIZE",
        help="bound each Spark Python worker, e.g. 128m (spills and smaller folds; "
        "default: a whole segment's keys)",
    )
    p.add_argument(
        "--full-jit",
        action="store_true",
        help="default JVM JIT and GC (slower start, faster on long jobs)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("-v", "--verbose", action="store_true", help="Spark's own logs at WARN")
    p.set_defaults(run=run_compact)
