"""``metaledger compact``: offline compaction of the change log into a snapshot; the help
text (:data:`DESCRIPTION`) says what it does and what it checks. The checks run before
anything else (:func:`check_inputs`), so a wrong input never starts Spark nor writes a file.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from nameserver.cli._common import non_negative_int, output_parent, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.printers import format_table
from nameserver.startup import IDENTITY_FILE, IdentityError, read_identity

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers
    from snapshots import SnapshotInfo
    from snapshots.compaction import LogEnd

ENGINES = ("spark", "local")
_CLUSTER_ID = re.compile(r"^[0-9a-f]{16}$")
_SNAPSHOT_NAME = re.compile(r"^\d{20}\.snap$")
#: what a node records about itself in its data dir on first start (node id, cluster id)

DESCRIPTION = """\
Compact a node's change log (plus, optionally, a base snapshot) into a new snapshot, offline:
the state at offset --upto, last write wins per key, deleted keys dropped. --engine spark
(default) runs a PySpark job on --master (local[*], spark://HOST:PORT, yarn; the segments must
be readable at the same path on every executor); --engine local folds in this one process.
Both write the same per-type counts and content hashes. Spark's Python workers run
$PYSPARK_PYTHON if set, else this command's own Python on a local or loopback master (a
virtualenv's install serves them), else python3 on the executors' PATH. On a cluster the
job ships its code to the executors: their Python needs protobuf and crc32c, not metaledger.

--segments is a node's change-log directory (<data-dir>/log), or the node's data dir itself:
a directory with no segment files but a log/ directory that has some is read from there (said
on stderr).

The new snapshot's cluster id comes from --cluster-id, else the base snapshot, else the
segments' data dir (<data-dir>/identity.json, which the node writes on its first start, or
the node's snapshots in <data-dir>/snap/ and <data-dir>/raft/dump.snap); when more than one
of these is known they must agree. Its last term is the term of the last
record at or below --upto (the base's when there is none), unless --last-term says.

The inputs are checked before anything runs, and nothing is written when one is wrong:
--upto past the log's last record (and the base's offset), a directory without segments, a
base snapshot of another cluster or past --upto, a cluster id that is not 16 hex digits, no
--base-snapshot for a log whose start the node keeps only in a snapshot (its older segments
deleted, or the member seeded from a snapshot): the error names the snapshot to give.
"""

EPILOG = """\
exit codes:
  0  the snapshot was written
  2  bad flags or inputs (see above); nothing was written
  1  the segments or the base snapshot are damaged or unreadable, or the job failed;
     nothing was written
"""


class InputError(Exception):
    """An input of ``compact`` is wrong; the message says which and why (exit 2)."""


def cluster_id_arg(text: str) -> str:
    """A cluster id as ``metaledger status`` and ``snapshot inspect`` show it: 16 hex digits
    (case-insensitive, kept in lower case)."""
    value = text.strip().lower()
    if not _CLUSTER_ID.match(value):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a cluster id (16 hex digits, as `metaledger status -w json` or "
            "`metaledger snapshot inspect` show it)"
        )
    return value


def _memory_size(text: str) -> str:
    """A Spark memory size (``512m``, ``2g``), checked here rather than by the JVM."""
    from snapshots.compaction import parse_memory_size

    try:
        parse_memory_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


class Inputs(NamedTuple):
    """The checked inputs of a compaction."""

    segments: Path
    end: LogEnd
    base: SnapshotInfo | None
    cluster_id: str
    #: what the caller should say on stderr once the inputs are good (a data dir given)
    note: str | None = None


class NodeSnapshot(NamedTuple):
    """A snapshot a node keeps next to its change log, by its header."""

    path: Path
    last_offset: int
    cluster_id: str


def node_snapshots(segments: Path) -> list[NodeSnapshot]:
    """The snapshots kept next to a node's change log, newest first: when `segments` is a
    data dir's ``log/``, those in ``<data-dir>/snap/`` and the engine's
    ``<data-dir>/raft/dump.snap`` whose headers read. Empty for a node that has written
    none yet, or a bare copy of segments."""
    from snapshots import SnapshotError, inspect

    segments = segments.resolve()
    if segments.name != "log":
        return []
    data = segments.parent
    snap_dir = data / "snap"
    paths = [snap_dir / n for n in _listdir(snap_dir) if _SNAPSHOT_NAME.match(n)]
    paths.append(data / "raft" / "dump.snap")
    found = []
    for path in paths:
        if not path.is_file():
            continue
        try:
            info = inspect(path)
        except (SnapshotError, OSError):
            continue  # a damaged or vanishing snapshot: another may do
        found.append(NodeSnapshot(path, info.last_offset, info.cluster_id))
    found.sort(key=lambda s: (s.last_offset, s.path.name != "dump.snap"), reverse=True)
    return found


def data_dir_cluster_id(segments: Path, kept: list[NodeSnapshot]) -> tuple[str, Path] | None:
    """The cluster id of the node whose change log `segments` is, and the file that says
    so: the data dir's ``identity.json`` (written by the node on its first start), else its
    newest snapshot in `kept`. None for a bare copy of segments, or a data dir with neither
    (a node of an older version that has not written a snapshot yet)."""
    segments = segments.resolve()
    if segments.name == "log":
        try:
            identity = read_identity(str(segments.parent))
        except IdentityError:
            identity = None  # unreadable: the node's own start reports that
        if identity is not None and identity.cluster_id:
            return identity.cluster_id, segments.parent / IDENTITY_FILE
    if kept:
        return kept[0].cluster_id, kept[0].path
    return None


def _listdir(path: Path) -> list[str]:
    try:
        return [p.name for p in path.iterdir()]
    except OSError:
        return []


def check_inputs(args: argparse.Namespace) -> Inputs:
    """Resolve and check the flags against the files (see the module docstring). Raises
    InputError; ChangeLogError, SnapshotError or OSError for unreadable inputs."""
    from snapshots import inspect
    from snapshots.compaction import log_end

    segments = Path(args.segments)
    note = None
    if not segments.is_dir():
        raise InputError(f"--segments {args.segments}: not a directory")
    end = log_end(segments)
    if end.segments == 0:
        inner = segments / "log"
        inner_end = log_end(inner) if inner.is_dir() else None
        if inner_end is None or inner_end.segments == 0:
            raise InputError(
                f"--segments {args.segments} holds no change-log segments "
                "(<first-offset>.seg files); give a node's data dir or its log/ directory"
            )
        note = f"{args.segments} is a node's data dir; reading its change log in {inner}"
        segments, end = inner, inner_end
    base = inspect(args.base_snapshot) if args.base_snapshot else None
    if base is not None and base.last_offset > args.upto:
        raise InputError(
            f"--base-snapshot {args.base_snapshot} is at offset {base.last_offset}, "
            f"past --upto {args.upto}"
        )
    last = end.last_offset if end.last_offset is not None else -1
    if args.upto > max(last, base.last_offset if base is not None else -1):
        if end.last_offset is None:
            raise InputError(f"--upto {args.upto}: the change log in {segments} holds no records")
        beyond = (
            f" and the base snapshot's offset is {base.last_offset}"
            if base is not None and base.last_offset > last
            else ""
        )
        raise InputError(
            f"--upto {args.upto} is past the end of the change log in {segments}: "
            f"its last record is at offset {last}{beyond}"
        )
    kept = node_snapshots(segments)
    cluster_id = _cluster_id(args, segments, base, kept)
    if base is None and end.first_offset is not None and end.first_offset > 1:
        _check_log_start(args.upto, segments, end.first_offset, kept)
    return Inputs(segments, end, base, cluster_id, note)


def _check_log_start(upto: int, segments: Path, first: int, kept: list[NodeSnapshot]) -> None:
    """Without a base snapshot, refuse a log that starts after offset 1 in a data dir that
    keeps snapshots: its older segments were deleted after a snapshot, or the member was
    seeded from one, and the state before `first` would be missing from the result. (A log
    whose first offsets changed nothing is refused too: the safe side; the base fixes it.)"""
    if not kept:
        return
    usable = [s for s in kept if s.last_offset <= upto]
    if usable:
        raise InputError(
            f"the change log in {segments} starts at offset {first}; the state before it is "
            f"in the node's snapshots: give --base-snapshot {usable[0].path}"
        )
    raise InputError(
        f"the change log in {segments} starts at offset {first}, and the node's oldest "
        f"snapshot is at offset {kept[-1].last_offset}, past --upto {upto}: the state at "
        f"{upto} cannot be built from this data dir"
    )


def _cluster_id(
    args: argparse.Namespace,
    segments: Path,
    base: SnapshotInfo | None,
    kept: list[NodeSnapshot],
) -> str:
    """The one cluster id the flag, the base snapshot and the data dir agree on."""
    known: list[tuple[str, str]] = []
    if args.cluster_id is not None:
        known.append((args.cluster_id, "--cluster-id"))
    if base is not None:
        known.append((base.cluster_id, f"--base-snapshot {args.base_snapshot}"))
    found = data_dir_cluster_id(segments, kept)
    if found is not None:
        known.append((found[0], f"the segments (by {found[1]})"))
    if not known:
        raise InputError(
            f"no cluster id: {segments} is not in a node's data dir that records one, and there "
            "is no --base-snapshot; give --cluster-id (16 hex digits, as `metaledger status -w "
            "json` shows it)"
        )
    first, where = known[0]
    for other, other_where in known[1:]:
        if other != first:
            raise InputError(f"{where} is of cluster {first}, but {other_where} of cluster {other}")
    return first


def run_compact(args: argparse.Namespace) -> int:
    from snapshots import SnapshotError, SnapshotMeta, compact_local
    from snapshots.compaction import compact_spark, last_term_upto

    started = time.monotonic()
    timings: dict[str, float] = {}
    try:
        inputs = check_inputs(args)
        if inputs.note:
            print(f"metaledger: compact: {inputs.note}", file=sys.stderr)
        cluster, base = inputs.cluster_id, inputs.base
        if args.engine == "spark":
            meta: SnapshotMeta | str = cluster
            if args.last_term is not None:
                meta = SnapshotMeta(cluster, args.upto, args.last_term)
            info = compact_spark(
                inputs.segments,
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
            term = args.last_term
            if term is None:
                term = last_term_upto(inputs.segments, args.upto, base.last_term if base else 0)
            progress = None
            if not args.no_progress:

                def progress(n: int) -> None:
                    print(f"\rcompact: {n:,} records written", end="", file=sys.stderr)

            info = compact_local(
                inputs.segments,
                args.base_snapshot,
                args.upto,
                args.out,
                SnapshotMeta(cluster, args.upto, term),
                progress,
            )
            if not args.no_progress:
                print(file=sys.stderr)
    except (InputError, ValueError) as exc:
        print(f"metaledger: compact: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except SnapshotError as exc:
        print(f"metaledger: compact: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"metaledger: compact: {where}{exc.strerror or exc}", file=sys.stderr)
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
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--segments",
        required=True,
        metavar="DIR",
        help="a node's change-log directory (<data-dir>/log) or its data dir",
    )
    p.add_argument("--base-snapshot", metavar="FILE", help="snapshot to start from")
    p.add_argument(
        "--upto",
        required=True,
        type=non_negative_int,
        metavar="OFFSET",
        help="last offset the snapshot holds (at most the log's last record's)",
    )
    p.add_argument("--out", required=True, metavar="FILE", help="snapshot to write")
    p.add_argument(
        "--master", default="local[*]", help="Spark master: local[*] (default), spark://..., yarn"
    )
    p.add_argument(
        "--cluster-id",
        type=cluster_id_arg,
        metavar="HEX16",
        help="cluster id of the snapshot, needed only when neither the base snapshot nor the "
        "segments' data dir has one",
    )
    p.add_argument(
        "--last-term",
        type=non_negative_int,
        help="term at --upto (default: of the last record at or below it)",
    )
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="spark",
        help="spark (default): a PySpark job; local: one process, no Spark",
    )
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
