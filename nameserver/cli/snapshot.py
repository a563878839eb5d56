"""``metaledger snapshot save|list|inspect|restore``: snapshot files.

``save`` asks a node (``--endpoints``) for its current state; ``list``, ``inspect`` and
``restore`` work on local files only, so they take ``--output`` but no cluster options.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nameserver.cli._output import output_parent, printer
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.printers import format_table

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers

#: the actions that talk to no cluster: ``metaledger snapshot ACTION`` of one of these
#: builds a parser without the cluster options (and so imports no client library)
LOCAL_ACTIONS = frozenset({"inspect", "list", "restore"})


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
    p = sub.add_parser("inspect", parents=[output_parent()], help="print a snapshot file's header")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--verify", action="store_true", help="read and verify the whole file")
    p.set_defaults(run=run_inspect)


def run_save(args: argparse.Namespace) -> int:
    from nameserver.cli._common import make_client
    from snapshots import inspect

    def progress(received: int, total: int) -> None:
        if sys.stderr.isatty():
            print(f"\rreceived {received}/{total} bytes", end="", file=sys.stderr)

    with make_client(args) as client:
        size = client.snapshot(args.file, progress)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    info = inspect(args.file, verify=True)
    doc = {"path": args.file, "size_bytes": size, **info.to_json()}
    text = f"Snapshot saved at {args.file} (offset {info.last_offset}, {size} bytes)"
    printer(args).report(doc, text)
    return ExitCode.OK


def run_list(args: argparse.Namespace) -> int:
    import os

    from snapshots import FileSnapshotStore

    directory = os.path.join(args.data_dir, "snap")
    if not os.path.isdir(directory):
        print(f"metaledger: snapshot list: {directory}: no such directory", file=sys.stderr)
        return ExitCode.NOT_FOUND
    infos = FileSnapshotStore(directory, keep=10**6).list()
    doc = {"snapshots": [i.to_json() for i in infos]}
    rows = [
        [i.last_offset, i.last_term, i.raft_index, i.record_count, i.size_bytes, str(i.path)]
        for i in infos
    ]
    text = format_table(("OFFSET", "TERM", "RAFT INDEX", "RECORDS", "BYTES", "PATH"), rows)
    printer(args).report(doc, text)
    return ExitCode.OK


def run_restore(args: argparse.Namespace) -> int:
    if args.from_etcd:
        return _restore_from_etcd(args)
    from nameserver.state.snapshotting import seed_data_dir
    from snapshots import SnapshotError

    if args.offset_revisions:
        print(
            "metaledger: snapshot restore: --offset-revisions is for --from-etcd (a "
            "metaledger snapshot keeps the count its store had)",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    try:
        offset = seed_data_dir(args.file, args.data_dir)
    except (SnapshotError, OSError) as exc:
        print(f"metaledger: snapshot restore: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    doc = {"data_dir": args.data_dir, "last_offset": offset}
    text = (
        f"restored {args.file} into {args.data_dir} (offset {offset}); seed every member of "
        "the new cluster from the same file, then start them with metaledger serve"
    )
    printer(args).report(doc, text)
    return ExitCode.OK


def _restore_from_etcd(args: argparse.Namespace) -> int:
    """``restore --from-etcd FILE``: seed from an etcd 3.4 snapshot; progress on stderr."""
    from nameserver.etcd_seed import seed_from_etcd
    from snapshots import SnapshotError
    from snapshots.etcdfmt import EtcdFormatError

    def progress(line: str) -> None:
        print(f"metaledger: snapshot restore: {line}", file=sys.stderr, flush=True)

    try:
        seeded = seed_from_etcd(args.file, args.data_dir, progress, args.offset_revisions)
    except EtcdFormatError as exc:
        print(f"metaledger: snapshot restore: {args.file}: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    except (SnapshotError, OSError) as exc:
        print(f"metaledger: snapshot restore: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    doc = {
        "data_dir": args.data_dir,
        "last_offset": seeded.revision,
        "revision": seeded.revision,
        "keys": seeded.keys,
        "leases": seeded.leases,
        "users": seeded.users,
        "roles": seeded.roles,
        "auth_enabled": seeded.auth_enabled,
        "revisions": "offset" if args.offset_revisions else "etcd",
    }
    text = (
        f"restored etcd snapshot {args.file} into {args.data_dir} (revision {seeded.revision}: "
        f"{seeded.keys} keys, {seeded.leases} leases, {seeded.users} users, {seeded.roles} "
        "roles); seed every member of the new cluster from the same file, then start them "
        "with metaledger serve"
    )
    printer(args).report(doc, text)
    return ExitCode.OK


def _register_save(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("save", parents=[common], help="save a node's current state to FILE")
    p.add_argument("file", metavar="FILE")
    p.set_defaults(run=run_save)


def _register_list(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("list", parents=[output_parent()], help="list the snapshots in a data dir")
    p.add_argument("--data-dir", required=True, help="a node's data dir")
    p.set_defaults(run=run_list)


def _register_restore(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("restore", parents=[output_parent()], help="seed a new data dir from FILE")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--data-dir", required=True, help="the new node's (empty) data dir")
    p.add_argument(
        "--from-etcd",
        action="store_true",
        help="FILE is an etcd 3.4 snapshot (etcdctl snapshot save) or member/snap/db: keys "
        "keep their revisions and versions, leases their TTLs, users and roles come along; "
        "the store counts revisions as etcd does from the start (only key changes move it)",
    )
    p.add_argument(
        "--offset-revisions",
        action="store_true",
        help="with --from-etcd: seed a store that counts revisions by log offset (every "
        "request moves it) until a leader switches it; for members run with "
        "serve --offset-revisions",
    )
    p.set_defaults(run=run_restore, exit_at_once=True)  # its heap is not freed (cli.main)


_SUBCOMMANDS: tuple[Callable[[Subparsers, argparse.ArgumentParser], None], ...] = (
    _register_inspect,
    _register_save,
    _register_list,
    _register_restore,
)


def register(sub: Subparsers, common: argparse.ArgumentParser | None) -> None:
    """The group's parser; without ``common`` (the cluster options' parent), its
    ``LOCAL_ACTIONS`` only."""
    group = sub.add_parser(
        "snapshot",
        help="snapshots: save, list, inspect, restore",
        description=SNAPSHOT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = group.add_subparsers(dest="snapshot_command", required=True, metavar="ACTION")
    for add in _SUBCOMMANDS:
        if common is not None:
            add(actions, common)
        elif add is not _register_save:
            add(actions, argparse.ArgumentParser(add_help=False))


SNAPSHOT_HELP = """\
A snapshot file holds a node's whole state at one log offset.

  save FILE             ask a node (--endpoints) for a snapshot of its current state
  list --data-dir DIR   the snapshots a node keeps in its data dir
  inspect FILE          a snapshot's header: offset, term, cluster, counts and content
                        hashes per record type (--verify reads and checks the whole file)
  restore FILE --data-dir DIR
                        seed a new, empty data dir from FILE, to start a new cluster from
  restore --from-etcd FILE --data-dir DIR
                        the same from an etcd 3.4 snapshot (etcdctl snapshot save): keys
                        with their revisions, versions and leases, leases with their TTLs,
                        users (etcd's password hashes) and roles; a file that is not one is
                        refused with one line saying what is wrong and where, and nothing
                        is written; the store counts revisions as etcd does from the start
                        (--offset-revisions: by log offset, as serve --offset-revisions)

`etcdctl snapshot save` against a node writes etcd's format (etcd's tools read it); `save`
here writes metaledger's own, with routes, offsets and replica groups.
"""
