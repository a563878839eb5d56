"""Every exit code of the ``metaledger`` command, with its meaning: the one table.

Scripts may rely on the numbers. ``metaledger --help`` shows :func:`table` as its epilog, and a
unit test checks that every code a command returns is listed here.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (grpc and the client only where a client error is mapped: for_error)
    from nameserver.client import ClientError


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    UNAVAILABLE = 3
    NOT_FOUND = 4
    TXN_FAILED = 5
    INVALID = 6
    TIMEOUT = 7
    MEMBER_DOWN = 8
    FATAL = 70
    REMOVED = 77
    CANNOT_START = 78
    INTERRUPTED = 130


#: what each code means, as ``metaledger --help`` prints it
MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "success",
    ExitCode.ERROR: "any other failure (a node or a local file; the message says which)",
    ExitCode.USAGE: "bad flags, arguments or environment (e.g. an endpoint without a port)",
    ExitCode.UNAVAILABLE: "no endpoint answered (is the cluster up? check --endpoints)",
    ExitCode.NOT_FOUND: "the thing named does not exist (a lease, a member, a topic's route);"
    " deleting what is absent is not an error (exit 0)",
    ExitCode.TXN_FAILED: "txn ran its failure branch (only with --exit-code-on-failure)",
    ExitCode.INVALID: "the server (or the txn parser) refused the request as invalid",
    ExitCode.TIMEOUT: "the request's deadline passed (a write may still be applied)",
    ExitCode.MEMBER_DOWN: "status: a member did not answer (the others are listed)",
    ExitCode.FATAL: "serve: the node stopped itself on damage or a bug on its apply path",
    ExitCode.REMOVED: "serve: the member was removed from the cluster (member remove); wipe its"
    " data dir before adding it back",
    ExitCode.CANNOT_START: "serve, cluster up: the node cannot start (a port in use, a data dir"
    " that cannot be used or is another node's or cluster's, an unreadable file)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}


def table() -> str:
    """The exit codes and their meanings, one per line (for ``--help`` and the docs)."""
    return "\n".join(f"  {int(code):>3}  {MEANINGS[code]}" for code in ExitCode)


#: exit codes by gRPC status code name (a client error's ``code``)
_BY_STATUS: dict[str, ExitCode] = {
    "UNAVAILABLE": ExitCode.UNAVAILABLE,
    "NOT_FOUND": ExitCode.NOT_FOUND,
    "INVALID_ARGUMENT": ExitCode.INVALID,
    "OUT_OF_RANGE": ExitCode.INVALID,
    "DEADLINE_EXCEEDED": ExitCode.TIMEOUT,
}


def for_error(exc: ClientError) -> ExitCode:
    """The exit code for a client error (by its gRPC status code class attribute)."""
    return _BY_STATUS.get(exc.code.name, ExitCode.ERROR)
