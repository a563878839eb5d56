"""Options every command takes (``--endpoints``, ``--output``, ``--timeout``) and their resolution.

The options are accepted before and after the command name (``metaledger --output json status``
and ``metaledger status --output json``): both parsers declare them with ``SUPPRESS`` defaults,
so a value given at either place survives, and :func:`endpoints` & co. apply env and defaults.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, TypeAlias

from nameserver.cli.printers import OUTPUTS, Printer, get_printer
from nameserver.client import Client

DEFAULT_ENDPOINTS = "127.0.0.1:9877"
ENDPOINTS_ENV = "METALEDGER_ENDPOINTS"
DEFAULT_TIMEOUT_S = 5.0

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


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


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
