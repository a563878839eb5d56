"""Named exit codes of the ``metaledger`` command (scripts may rely on the numbers)."""

from __future__ import annotations

from enum import IntEnum

import grpc

from nameserver.client import ClientError


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # anything not named below
    USAGE = 2  # bad flags or configuration (argparse uses 2 as well)
    UNAVAILABLE = 3  # no endpoint answered
    NOT_FOUND = 4  # the server said NOT_FOUND (e.g. an unknown lease)
    TXN_FAILED = 5  # txn ran its failure branch (only with --exit-code-on-failure)
    INVALID = 6  # the server (or the txn parser) refused the input
    TIMEOUT = 7  # the request's deadline passed; a write may still be applied
    FATAL = 70  # the node cannot go on (a bug or damage on the apply path; EX_SOFTWARE)
    #: serve / cluster up: the node cannot start (a port in use, a data dir that cannot be
    #: used or is another node's or cluster's, an unreadable file; sysexits' EX_CONFIG)
    CANNOT_START = 78
    INTERRUPTED = 130  # Ctrl-C


_BY_STATUS: dict[grpc.StatusCode, ExitCode] = {
    grpc.StatusCode.UNAVAILABLE: ExitCode.UNAVAILABLE,
    grpc.StatusCode.NOT_FOUND: ExitCode.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT: ExitCode.INVALID,
    grpc.StatusCode.OUT_OF_RANGE: ExitCode.INVALID,
    grpc.StatusCode.DEADLINE_EXCEEDED: ExitCode.TIMEOUT,
}


def for_error(exc: ClientError) -> ExitCode:
    """The exit code for a client error (by its gRPC status code class attribute)."""
    return _BY_STATUS.get(exc.code, ExitCode.ERROR)
