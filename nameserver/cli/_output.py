"""``--output`` and the printer of a command's result, apart from :mod:`._common` (which
imports the client library, and with it gRPC): commands that talk to no cluster
(``metaledger snapshot restore|inspect|list``) need only these."""

from __future__ import annotations

import argparse

from nameserver.cli.printers import OUTPUTS, Printer, get_printer


class UsageError(Exception):
    """A flag or environment value the command cannot use (exit USAGE, no traceback)."""


def add_output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-w",
        "--output",
        choices=OUTPUTS,
        default=argparse.SUPPRESS,
        help="output format (default table)",
    )


def output_parent() -> argparse.ArgumentParser:
    """The parent parser of commands that print a result but talk to no cluster."""
    parent = argparse.ArgumentParser(add_help=False)
    add_output_option(parent)
    return parent


def output(args: argparse.Namespace) -> str:
    return str(getattr(args, "output", None) or "table")


def printer(args: argparse.Namespace) -> Printer:
    return get_printer(output(args))
