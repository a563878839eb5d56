"""Options of the commands that talk to a cluster (``--endpoints``, ``--output``, ``--timeout``,
and TLS: ``--cacert``, ``--cert``, ``--key``, etcdctl's names; env ``METALEDGER_CACERT`` &c.,
as etcdctl's ``ETCDCTL_CACERT``).

Where the command line connects is decided by the client library's one resolver
(:meth:`nameserver.client.ConnectionOptions.resolve`: ``--endpoints``, else
``$METALEDGER_ENDPOINTS``, else ``127.0.0.1:9877``, the client port of node ``n0`` of
``metaledger cluster up`` with its default base port and ``serve``'s default client port), the
same the broker and the replicators use; the flags are in :mod:`nameserver.cli.connection`.

The options are accepted before and after the command name (``metaledger --output json status``
and ``metaledger status --output json``): both parsers declare them with ``SUPPRESS`` defaults,
so a value given at either place survives, and :func:`endpoints` & co. apply env and defaults.
Commands that do not talk to a cluster but print a result take ``--output`` alone
(:func:`output_parent`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from nameserver.cli._output import UsageError as UsageError
from nameserver.cli._output import add_output_option as add_output_option
from nameserver.cli._output import output as output
from nameserver.cli._output import output_parent as output_parent
from nameserver.cli._output import printer as printer
from nameserver.cli.connection import (
    CommonOptions,
    add_auth_options,
    add_endpoints_option,
    add_tls_options,
    connection_options,
)
from nameserver.cli.exitcodes import ExitCode
from nameserver.client import (
    DEFAULT_TIMEOUT_S,
    Client,
    ClientError,
    ConnectionOptions,
    OptionError,
    resolve_endpoints,
)

N = TypeVar("N", int, float)

if TYPE_CHECKING:
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def add_common_options(parser: argparse.ArgumentParser) -> None:
    add_endpoints_option(parser)
    add_output_option(parser)
    parser.add_argument(
        "--timeout",
        dest="timeout_s",
        type=positive_float,
        default=argparse.SUPPRESS,
        metavar="SECONDS",
        help=f"deadline of each request, failover included (default {DEFAULT_TIMEOUT_S:g})",
    )
    add_tls_options(parser)
    add_auth_options(parser)


def common_parent() -> argparse.ArgumentParser:
    """The parent parser of commands that talk to a cluster."""
    parent = argparse.ArgumentParser(add_help=False)
    add_common_options(parent)
    return parent


def common_options() -> CommonOptions:
    """What the command modules of other packages get (:class:`CommonOptions`)."""
    return CommonOptions(parent=common_parent())


def number_type(
    parse: Callable[[str], N], not_a: str, ok: Callable[[N], bool], out_of_range: str
) -> Callable[[str], N]:
    """An argparse ``type``: ``parse(text)``, refused with ``"'text' " + not_a`` when it
    raises ValueError and with ``"'text'" + out_of_range`` unless ``ok(value)``."""

    def convert(text: str) -> N:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} {not_a}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r}{out_of_range}")
        return value

    return convert


positive_float = number_type(float, "is not a number", lambda v: v > 0, " must be > 0")
positive_int = number_type(int, "is not an integer", lambda v: v > 0, " must be > 0")
non_negative_int = number_type(int, "is not an integer", lambda v: v >= 0, " must be >= 0")


def error_line(exc: Exception) -> str:
    """``metaledger: <error>`` for stderr; a server message's own ``metaledger:`` prefix is
    dropped, so the line has one."""
    if isinstance(exc, ClientError):
        where = f" [{exc.endpoint}]" if exc.endpoint else ""
        message = exc.message.removeprefix("metaledger: ")
        return f"metaledger: {exc.code.name.lower()}: {message}{where}"
    return "metaledger: " + str(exc).removeprefix("metaledger: ")


def endpoints(args: argparse.Namespace) -> list[str]:
    """``--endpoints``, else ``$METALEDGER_ENDPOINTS``, else ``127.0.0.1:9877``
    (:func:`nameserver.client.resolve_endpoints`: each checked to be HOST:PORT)."""
    try:
        return list(resolve_endpoints(getattr(args, "endpoints", None)))
    except OptionError as exc:
        raise UsageError(str(exc)) from None


def connection(args: argparse.Namespace) -> ConnectionOptions:
    """The command's connection (:func:`nameserver.cli.connection.connection_options`); a
    value it cannot use is a usage error."""
    try:
        return connection_options(args)
    except OptionError as exc:
        raise UsageError(str(exc)) from None


def timeout_s(args: argparse.Namespace) -> float:
    return float(getattr(args, "timeout_s", None) or DEFAULT_TIMEOUT_S)


def make_client(args: argparse.Namespace, at: list[str] | None = None) -> Client:
    """A client of the command's endpoints (or of ``at``), with its ``--timeout``."""
    return connection(args).connect(at)


def report_revision(args: argparse.Namespace, revision: int) -> int:
    """Print a write's revision ("OK (revision N)", JSON ``{"revision": N}``); exit OK."""
    printer(args).report({"revision": revision}, f"OK (revision {revision})")
    return ExitCode.OK
