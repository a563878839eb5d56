"""Options every command takes (``--endpoints``, ``--output``, ``--timeout``) and their resolution.

The options are accepted before and after the command name (``metaledger --output json status``
and ``metaledger status --output json``): both parsers declare them with ``SUPPRESS`` defaults,
so a value given at either place survives, and :func:`endpoints` & co. apply env and defaults.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.printers import OUTPUTS, Printer, get_printer
from nameserver.client import Client

DEFAULT_ENDPOINTS = "127.0.0.1:9877"
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
    parser.add_argument(
        "-w",
        "--output",
        choices=OUTPUTS,
        default=argparse.SUPPRESS,
        help="output format (default table)",
    )
    parser.add_argument(
        "--timeout",
        dest="timeout_s",
        type=positive_float,
        default=argparse.SUPPRESS,
        metavar="SECONDS",
        help=f"deadline of each request, failover included (default {DEFAULT_TIMEOUT_S:g})",
    )


def common_parent() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    add_common_options(parent)
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


def endpoints(args: argparse.Namespace) -> list[str]:
    raw = getattr(args, "endpoints", None) or os.environ.get(ENDPOINTS_ENV) or DEFAULT_ENDPOINTS
    return [e.strip() for e in raw.split(",") if e.strip()]


def output(args: argparse.Namespace) -> str:
    return str(getattr(args, "output", None) or "table")


def timeout_s(args: argparse.Namespace) -> float:
    return float(getattr(args, "timeout_s", None) or DEFAULT_TIMEOUT_S)


def make_client(args: argparse.Namespace) -> Client:
    return Client(endpoints(args), timeout_s=timeout_s(args))


def printer(args: argparse.Namespace) -> Printer:
    return get_printer(output(args))


def report_revision(args: argparse.Namespace, revision: int) -> int:
    """Print a write's revision ("OK (revision N)", JSON ``{"revision": N}``); exit OK."""
    printer(args).report({"revision": revision}, f"OK (revision {revision})")
    return ExitCode.OK
