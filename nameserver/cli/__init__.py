"""The ``metaledger`` command line.

One module per command group (``serve``, ``cluster`` with ``cluster_restart``, ``status``,
``kv`` for put/get/del,
``txn``, ``watch``, ``member``, ``leader``, ``lease``, ``lock`` for lock/elect, ``snapshot``,
``compact``, ``bench``, ``offsets`` for offsets and quotas, ``replica_group``, ``route`` for
route and kvconfig), each with a
``register(subparsers, common)`` (``common``: the parent parser of commands that talk to a
cluster); command modules of other packages (``broker.cli``: ``broker``, ``send``,
``consume``; ``replicator.cli``: ``replicate``) come in through the entry-point group
``metaledger.commands``, so the nameserver never imports them, and get the connection flags'
parsing from it (``connection.CommonOptions``); results go through ``printers`` (``--output table|json``)
and every exit status is an ``exitcodes.ExitCode`` (the table ``--help`` prints). Where
commands connect is decided in ``_common`` alone; the cluster options (``--endpoints``,
``--timeout``) are given only to commands that talk to a cluster. Commands use the same
:mod:`nameserver.client` users get; the client's root error is caught once, here, and printed
plainly on stderr.
"""

# ruff: noqa: E402  (gRPC core's environment is set before the commands import grpc, below)
from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from nameserver.grpc.env import apply_server_defaults

# The command line is a server's entry point (`serve`, and `cluster up` whose nodes run
# `serve`): gRPC's environment is set before the first module that imports grpc.
apply_server_defaults()

from nameserver.cli._output import UsageError
from nameserver.cli.exitcodes import ExitCode, for_error
from nameserver.cli.exitcodes import table as exit_code_table

__all__ = ["ExitCode", "build_parser", "main"]

#: The command groups (modules of this package) in --help's order, imported as the parser is
#: built.
_GROUPS = (
    "serve",
    "cluster",
    "status",
    "kv",
    "txn",
    "watch",
    "member",
    "leader",
    "lease",
    "lock",
    "snapshot",
    "compact",
    "bench",
    "offsets",
    "replica_group",
    "route",
    "user",
)
_DESCRIPTION = (
    "metaledger: a Raft-backed metadata and coordination server (etcd's KV, watch,"
    " lease and lock API, and RocketMQ's name server)."
)
#: Commands whose group registers them alone and that need no plugin: ``metaledger snapshot
#: ...`` builds the parser of its group only, without importing the other groups and the
#: plugins (a third of a second: seeding a data dir pays it once, at start).
_ALONE = frozenset({"snapshot"})


#: Command modules of other packages (``broker.cli``: ``metaledger broker|send|consume``;
#: ``replicator.cli``: ``metaledger replicate …``) are found through this entry-point group, so
#: the nameserver never imports them; each entry point names a ``register(subparsers, common)``
#: whose ``common`` is a :class:`~nameserver.cli.connection.CommonOptions`: the parent parsers
#: and the reading of the connection flags, which those packages may not import.
COMMANDS_GROUP = "metaledger.commands"


def entry_points(group: str) -> Any:
    """``importlib.metadata.entry_points``, imported when first called (15 ms of start a
    line that loads no plugin does not pay)."""
    from importlib import metadata

    return metadata.entry_points(group=group)


def _plugin_commands() -> Iterator[tuple[str, Any]]:
    """The ``register`` functions of the group's entry points (first of a name wins); one
    that does not load is reported on stderr and skipped, so the rest of the CLI works."""
    seen: set[str] = set()
    for ep in entry_points(group=COMMANDS_GROUP):
        if ep.name in seen:
            continue
        seen.add(ep.name)
        try:
            yield ep.name, ep.load()
        except Exception as exc:  # a broken plugin must not take the nameserver commands along
            print(
                f"metaledger: commands {ep.name!r} ({ep.value}) not loaded: {exc}", file=sys.stderr
            )


def build_parser(only: str | None = None, *, local: bool = False) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` (one of ``_ALONE``) that command's group
    alone; ``local``: without the options of commands that talk to a cluster, and so without
    importing the client library (the group's actions that talk to none: ``LOCAL_ACTIONS``)."""
    parser = argparse.ArgumentParser(
        prog="metaledger",
        description=_DESCRIPTION,
        epilog="exit codes:\n" + exit_code_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if not local:
        from nameserver.cli._common import add_common_options, common_options
        from nameserver.client import DEFAULT_ENDPOINTS, ENDPOINTS_ENV

        parser.description = (
            f"{_DESCRIPTION}\n\nCommands that talk to a cluster connect to --endpoints, else"
            f" ${ENDPOINTS_ENV}, else {DEFAULT_ENDPOINTS} (node n0 of 'metaledger cluster up')."
            " 'metaledger COMMAND --help' for each."
        )
        add_common_options(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = None if local else common_options()
    for name in (only,) if only is not None else _GROUPS:
        module = importlib.import_module(f"nameserver.cli.{name}")
        module.register(sub, None if common is None else common.parent)
    if only is None and common is not None:
        for _name, register in _plugin_commands():
            register(sub, common)
    return parser


def _alone(words: list[str]) -> tuple[str | None, bool]:
    """The group to build alone for ``words`` (or None: the whole line), and whether its
    action talks to no cluster (its ``LOCAL_ACTIONS``)."""
    if not words or words[0] not in _ALONE:
        return None, False
    local = importlib.import_module(f"nameserver.cli.{words[0]}").LOCAL_ACTIONS
    return words[0], len(words) > 1 and words[1] in local


def _exit_at_once(code: int) -> NoReturn:
    """Ends the process without the interpreter's teardown: a command that built a large heap
    (seeding from etcd: a million records) would spend a tenth of a second freeing it. Its
    output is flushed first; what it wrote to files it synced itself."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    only, local = _alone(words)
    parser = build_parser(only, local=local)
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else ExitCode.USAGE
    try:
        code = int(args.run(args))
        if argv is None and getattr(args, "exit_at_once", False):
            _exit_at_once(code)
        return code
    except UsageError as exc:
        print(f"metaledger: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # e.g. `metaledger get --prefix "" | head`: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return ExitCode.OK
    except Exception as exc:
        # a client error, from a command that imported the client (one that did not
        # cannot raise one)
        client = sys.modules.get("nameserver.client")
        if client is None or not isinstance(exc, client.ClientError):
            raise
        from nameserver.cli._common import error_line

        print(error_line(exc), file=sys.stderr)
        return for_error(exc)
