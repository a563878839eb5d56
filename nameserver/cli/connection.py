"""The connection flags of every command that talks to a cluster, and their reading.

etcdctl's names: ``--endpoints`` (env ``METALEDGER_ENDPOINTS``), ``--user NAME[:PASSWORD]`` and
``--password`` (env ``METALEDGER_USER``) for auth (docs/auth.md), ``--cacert``, ``--cert``,
``--key`` (env ``METALEDGER_CACERT`` …) for TLS (docs/tls.md). Every parser declares them with
``SUPPRESS`` defaults, so a value given before or after the command name survives;
:func:`connection_options` hands what was given to
:meth:`nameserver.client.ConnectionOptions.resolve`, which applies the environment and the one
default endpoint (``nameserver/client/connection.py``), and asks for a missing password on a
terminal (never when stdin is not one: a service has no one to ask).

The broker's and the replicators' commands may import only the client library, so they get
these flags and their reading from ``register(subparsers, common)``: ``common`` is a
:class:`CommonOptions` (the parent parsers and :meth:`CommonOptions.connection`).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from nameserver.client import (
    DEFAULT_ENDPOINTS,
    ENDPOINTS_ENV,
    TLS_ENV,
    USER_ENV,
    ConnectionOptions,
)

__all__ = [
    "CommonOptions",
    "add_auth_options",
    "add_endpoints_option",
    "add_tls_options",
    "ask_password",
    "connection_options",
]

#: the TLS flags' help
TLS_HELP = {
    "cacert": "verify the server's certificate with this CA (turns TLS on)",
    "cert": "this client's certificate (for --client-cert-auth servers)",
    "key": "the key of --cert",
}


def add_endpoints_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoints",
        default=argparse.SUPPRESS,
        metavar="HOST:PORT,...",
        help=f"comma-separated gRPC endpoints (env {ENDPOINTS_ENV}; default {DEFAULT_ENDPOINTS})",
    )


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    for name, env in TLS_ENV.items():
        parser.add_argument(
            f"--{name}",
            dest=f"tls_{name}",  # not "key": the kv commands' argument
            default=argparse.SUPPRESS,
            metavar="PEM",
            help=f"{TLS_HELP[name]} (env {env})",
        )


def add_auth_options(parser: argparse.ArgumentParser) -> None:
    """etcdctl's ``--user name[:password]`` and ``--password`` (auth, docs/auth.md)."""
    parser.add_argument(
        "--user",
        default=argparse.SUPPRESS,
        metavar="NAME[:PASSWORD]",
        help=f"authenticate as this user (etcdctl's --user; env {USER_ENV})",
    )
    parser.add_argument(
        "--password",
        default=argparse.SUPPRESS,
        metavar="PASSWORD",
        help="the user's password (else after ':' in --user, else asked on a terminal)",
    )


def ask_password(name: str) -> str | None:
    """The password of ``name`` asked on a terminal; None when stdin is not one."""
    if not sys.stdin.isatty():
        return None
    import getpass

    return getpass.getpass("Password: ")


def connection_options(args: argparse.Namespace) -> ConnectionOptions:
    """The connection of a parsed command line: its flags, else the environment, else the
    defaults. Raises :class:`nameserver.client.OptionError` for a value it cannot use."""
    return ConnectionOptions.resolve(
        endpoints=getattr(args, "endpoints", None),
        timeout_s=getattr(args, "timeout_s", None),
        user=getattr(args, "user", None),
        password=getattr(args, "password", None),
        cacert=getattr(args, "tls_cacert", None),
        cert=getattr(args, "tls_cert", None),
        key=getattr(args, "tls_key", None),
        ask_password=ask_password,
    )


@dataclass(frozen=True)
class CommonOptions:
    """What ``register(subparsers, common)`` of a command module of another package gets:
    the parent parsers to build its commands on, and the reading of what they parsed."""

    #: ``--endpoints``, ``--output``, ``--timeout``, TLS and auth: a command that talks to a
    #: cluster
    parent: argparse.ArgumentParser

    def connection(self, args: argparse.Namespace) -> ConnectionOptions:
        """:func:`connection_options`: raises :class:`nameserver.client.OptionError`."""
        return connection_options(args)
