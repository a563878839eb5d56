"""The connection options of every program that is a client of metaledger, in one place.

``metaledger``'s own commands (``nameserver/cli/_common.py``), the broker
(``metaledger broker``) and the replicators (``metaledger replicate …``) take the same
options, with etcdctl's names: ``--user NAME[:PASSWORD]`` and ``--password`` (env
``METALEDGER_USER``) for auth (docs/auth.md), ``--cacert``, ``--cert``, ``--key`` (env
``METALEDGER_CACERT`` …) for TLS (docs/tls.md). The broker and the replicators may import
only the client library (an import-linter contract), so the options and the reading of their
values live here, and the command line reuses them.

Both parsers of a command (before and after its name) declare the options with ``SUPPRESS``
defaults; :func:`client_options` applies the environment and returns the keyword arguments
of :class:`nameserver.client.Client`. A value that cannot be used raises
:class:`OptionError` (the command line turns it into a usage error).
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
from collections.abc import Mapping
from typing import Any

USER_ENV = "METALEDGER_USER"

#: TLS options → (environment variable, help): PEM files for the client library.
TLS_OPTIONS = {
    "cacert": ("METALEDGER_CACERT", "verify the server's certificate with this CA (turns TLS on)"),
    "cert": ("METALEDGER_CERT", "this client's certificate (for --client-cert-auth servers)"),
    "key": ("METALEDGER_KEY", "the key of --cert"),
}


class OptionError(ValueError):
    """A connection option (or its environment variable) that cannot be used."""


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    for name, (env, help_text) in TLS_OPTIONS.items():
        parser.add_argument(
            f"--{name}",
            dest=f"tls_{name}",  # not "key": the kv commands' argument
            default=argparse.SUPPRESS,
            metavar="PEM",
            help=f"{help_text} (env {env})",
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


def tls_files(args: argparse.Namespace) -> dict[str, str]:
    """The client library's TLS arguments from ``--cacert/--cert/--key`` or their env."""
    out = {}
    for name, (env, _) in TLS_OPTIONS.items():
        value = getattr(args, f"tls_{name}", None) or os.environ.get(env)
        if value:
            out[name] = value
    if ("cert" in out) != ("key" in out):
        raise OptionError("--cert and --key go together (a client certificate and its key)")
    return out


def credentials(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(user, password) of ``--user``/``--password`` (or ``$METALEDGER_USER``), as etcdctl
    reads them; (None, None) without a user. Without a password anywhere the password is
    asked on a terminal, and refused when stdin is not one (a service has no one to ask)."""
    raw = getattr(args, "user", None) or os.environ.get(USER_ENV)
    if not raw:
        return None, None
    name, sep, password = raw.partition(":")
    if not name:
        raise OptionError("--user: the user name is empty")
    given = getattr(args, "password", None)
    if given is not None:
        return name, given
    if sep:
        return name, password
    if not sys.stdin.isatty():
        raise OptionError(f"--user {name}: no password (give --user {name}:PASSWORD or --password)")
    import getpass

    return name, getpass.getpass("Password: ")


def client_options(args: argparse.Namespace) -> dict[str, Any]:
    """``Client(endpoints, **client_options(args))``: user, password and TLS files (only
    those given), from the options or the environment."""
    user, password = credentials(args)
    out: dict[str, Any] = dict(tls_files(args))
    if user is not None:
        out["user"] = user
        out["password"] = password
    return out


def remoting_tls(files: Mapping[str, Any]) -> ssl.SSLContext | None:
    """A client TLS context for a metaledger node's RocketMQ remoting port from the
    ``cacert``/``cert``/``key`` files of :func:`tls_files` (or :func:`client_options`):
    trusts ``cacert``, presents ``cert``/``key`` when given; None without ``cacert``.
    Raises OptionError when a file cannot be used."""
    cacert = files.get("cacert")
    if not cacert:
        return None
    try:
        context = ssl.create_default_context(cafile=str(cacert))
        if files.get("cert"):
            context.load_cert_chain(str(files["cert"]), str(files["key"]))
    except (OSError, ssl.SSLError) as exc:
        raise OptionError(f"--cacert/--cert/--key: cannot use the TLS files: {exc}") from None
    return context
