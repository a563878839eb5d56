"""Options of the commands that talk to a cluster (``--endpoints``, ``--output``, ``--timeout``,
and TLS: ``--cacert``, ``--cert``, ``--key``, etcdctl's names; env ``METALEDGER_CACERT`` &c.,
as etcdctl's ``ETCDCTL_CACERT``).

This module is the one place that decides where the command line connects: ``--endpoints``,
else the environment variable ``METALEDGER_ENDPOINTS`` (comma-separated, as etcdctl's
``ETCDCTL_ENDPOINTS``), else ``127.0.0.1:9877``, which is the client port of node ``n0`` of
``metaledger cluster up`` with its default base port, and ``serve``'s default client port.

The options are accepted before and after the command name (``metaledger --output json status``
and ``metaledger status --output json``): both parsers declare them with ``SUPPRESS`` defaults,
so a value given at either place survives, and :func:`endpoints` & co. apply env and defaults.
Commands that do not talk to a cluster but print a result take ``--output`` alone
(:func:`output_parent`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from nameserver import defaults
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.printers import OUTPUTS, Printer, get_printer
from nameserver.client import Client, ClientError, InvalidArgument, options
from nameserver.client.options import add_auth_options, add_tls_options
from nameserver.client.transport import normalize_endpoint

#: the client port of ``serve`` and of node n0 of ``cluster up`` (its default base port)
DEFAULT_CLIENT_PORT = int(defaults.LISTEN_CLIENT.rpartition(":")[2])
DEFAULT_ENDPOINTS = defaults.LISTEN_CLIENT
ENDPOINTS_ENV = "METALEDGER_ENDPOINTS"
DEFAULT_TIMEOUT_S = 5.0

N = TypeVar("N", int, float)

if TYPE_CHECKING:
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoints",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT,...",
        help=f"comma-separated gRPC endpoints (env {ENDPOINTS_ENV}; default {DEFAULT_ENDPOINTS})",
    )
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


def tls_files(args: argparse.Namespace) -> dict[str, str]:
    """The client library's TLS arguments from ``--cacert/--cert/--key`` or their env."""
    try:
        return options.tls_files(args)
    except options.OptionError as exc:
        raise UsageError(str(exc)) from None


def credentials(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(user, password) of ``--user``/``--password`` (or ``$METALEDGER_USER``), as etcdctl
    reads them; (None, None) without a user (:func:`nameserver.client.options.credentials`)."""
    try:
        return options.credentials(args)
    except options.OptionError as exc:
        raise UsageError(str(exc)) from None


def add_output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-w",
        "--output",
        choices=OUTPUTS,
        default=argparse.SUPPRESS,
        help="output format (default table)",
    )


def common_parent() -> argparse.ArgumentParser:
    """The parent parser of commands that talk to a cluster."""
    parent = argparse.ArgumentParser(add_help=False)
    add_common_options(parent)
    return parent


def output_parent() -> argparse.ArgumentParser:
    """The parent parser of commands that print a result but talk to no cluster."""
    parent = argparse.ArgumentParser(add_help=False)
    add_output_option(parent)
    return parent


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


class UsageError(Exception):
    """A flag or environment value the command cannot use (exit USAGE, no traceback)."""


def endpoints(args: argparse.Namespace) -> list[str]:
    """``--endpoints``, else ``$METALEDGER_ENDPOINTS``, else ``127.0.0.1:9877``; each
    endpoint checked to be HOST:PORT (``http://`` allowed), so none silently means port 443."""
    flag = getattr(args, "endpoints", None)
    raw = flag or os.environ.get(ENDPOINTS_ENV) or DEFAULT_ENDPOINTS
    source = "--endpoints" if flag else ENDPOINTS_ENV if os.environ.get(ENDPOINTS_ENV) else ""
    out = []
    for item in raw.split(","):
        if not item.strip():
            continue
        try:
            out.append(normalize_endpoint(item))
        except InvalidArgument as exc:
            raise UsageError(f"{source}: {exc.message}" if source else exc.message) from None
    if not out:
        raise UsageError(f"{source or 'endpoints'}: no endpoint given")
    return out


def output(args: argparse.Namespace) -> str:
    return str(getattr(args, "output", None) or "table")


def timeout_s(args: argparse.Namespace) -> float:
    return float(getattr(args, "timeout_s", None) or DEFAULT_TIMEOUT_S)


def make_client(args: argparse.Namespace, at: list[str] | None = None) -> Client:
    """A client of the command's endpoints (or of ``at``), with its ``--timeout``."""
    user, password = credentials(args)
    return Client(
        at if at is not None else endpoints(args),
        timeout_s=timeout_s(args),
        user=user,
        password=password,
        **tls_files(args),
    )


def printer(args: argparse.Namespace) -> Printer:
    return get_printer(output(args))


def report_revision(args: argparse.Namespace, revision: int) -> int:
    """Print a write's revision ("OK (revision N)", JSON ``{"revision": N}``); exit OK."""
    printer(args).report({"revision": revision}, f"OK (revision {revision})")
    return ExitCode.OK
