"""Where a client program connects, and as whom: one default, one set of environment variables.

Every program that is a client of metaledger (``metaledger``'s own commands, the broker, the
replicators, and any outside program) resolves its connection the same way, here::

    endpoints   the given list, else $METALEDGER_ENDPOINTS (comma-separated, as etcdctl's
                ETCDCTL_ENDPOINTS), else 127.0.0.1:9877: the client port of ``serve`` and of
                node n0 of ``metaledger cluster up`` with its default base port
    user        NAME[:PASSWORD] (etcdctl's --user), else $METALEDGER_USER; the password
                given apart wins over the one after ':'; without either it is asked for
                (``ask_password``) or refused (docs/auth.md)
    TLS files   cacert, cert, key (PEM file paths), else $METALEDGER_CACERT, $METALEDGER_CERT,
                $METALEDGER_KEY (docs/tls.md)
    timeout_s   the deadline of each request, failover included (5 s)

:meth:`ConnectionOptions.resolve` applies that order and returns a frozen
:class:`ConnectionOptions`; :meth:`ConnectionOptions.connect` makes the :class:`Client`. A
value that cannot be used raises :class:`OptionError` naming the flag (etcdctl's names) or
variable it came from. The command-line flags themselves live with the command line
(``nameserver/cli/connection.py``), which hands their parsing to the broker's and the
replicators' commands; nothing here reads ``sys.argv`` or a terminal, and importing this
module reads no environment variable.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nameserver.client._client import Client
from nameserver.client.errors import InvalidArgument
from nameserver.client.transport import normalize_endpoint

__all__ = [
    "DEFAULT_CLIENT_PORT",
    "DEFAULT_ENDPOINTS",
    "DEFAULT_TIMEOUT_S",
    "ENDPOINTS_ENV",
    "TLS_ENV",
    "USER_ENV",
    "ConnectionOptions",
    "OptionError",
    "remoting_tls",
    "resolve_endpoints",
]

#: the client port of ``serve`` and of node n0 of ``cluster up`` (its default base port)
DEFAULT_CLIENT_PORT = 9877
DEFAULT_ENDPOINTS = f"127.0.0.1:{DEFAULT_CLIENT_PORT}"
ENDPOINTS_ENV = "METALEDGER_ENDPOINTS"
USER_ENV = "METALEDGER_USER"
#: the TLS files (PEM paths) → their environment variables
TLS_ENV = {"cacert": "METALEDGER_CACERT", "cert": "METALEDGER_CERT", "key": "METALEDGER_KEY"}
DEFAULT_TIMEOUT_S = 5.0


class OptionError(ValueError):
    """A connection option (or its environment variable) that cannot be used."""


@dataclass(frozen=True)
class ConnectionOptions:
    """Where and how a client connects; :meth:`resolve` fills it from values, the environment
    and the defaults. The password is left out of ``repr``."""

    endpoints: tuple[str, ...] = (DEFAULT_ENDPOINTS,)
    timeout_s: float = DEFAULT_TIMEOUT_S
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    cacert: str | None = None
    cert: str | None = None
    key: str | None = None

    @classmethod
    def resolve(
        cls,
        *,
        endpoints: str | None = None,
        timeout_s: float | None = None,
        user: str | None = None,
        password: str | None = None,
        cacert: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        environ: Mapping[str, str] | None = None,
        ask_password: Callable[[str], str | None] | None = None,
    ) -> ConnectionOptions:
        """The options from the values given (None: not given), else ``environ`` (default
        ``os.environ``), else the defaults. ``ask_password(name)`` is called for a user
        without a password anywhere (None from it, or no callable, refuses)."""
        env = os.environ if environ is None else environ
        given = {"cacert": cacert, "cert": cert, "key": key}
        files = {n: v for n, env_name in TLS_ENV.items() if (v := given[n] or env.get(env_name))}
        name, password = _credentials(user or env.get(USER_ENV), password, ask_password)
        return cls(
            endpoints=resolve_endpoints(endpoints, env),
            timeout_s=timeout_s or DEFAULT_TIMEOUT_S,
            user=name,
            password=password,
            **files,
        ).validate()

    def validate(self) -> ConnectionOptions:
        if not self.endpoints:
            raise OptionError("endpoints: no endpoint given")
        if self.timeout_s <= 0:
            raise OptionError(f"timeout_s: {self.timeout_s:g} must be > 0")
        if (self.cert is None) != (self.key is None):
            raise OptionError("--cert and --key go together (a client certificate and its key)")
        return self

    def tls_files(self) -> dict[str, str]:
        """``cacert``/``cert``/``key``, those given: :class:`Client`'s TLS arguments."""
        files = (("cacert", self.cacert), ("cert", self.cert), ("key", self.key))
        return {name: value for name, value in files if value}

    def client_kwargs(self) -> dict[str, Any]:
        """``Client(endpoints, **options.client_kwargs())``: user, password and TLS files
        (those given), without the endpoints and the timeout."""
        out: dict[str, Any] = self.tls_files()
        if self.user is not None:
            out["user"] = self.user
            out["password"] = self.password
        return out

    def connect(self, endpoints: list[str] | None = None) -> Client:
        """A :class:`Client` of these endpoints (or of ``endpoints``), timeout and
        credentials."""
        at = list(self.endpoints) if endpoints is None else endpoints
        return Client(at, timeout_s=self.timeout_s, **self.client_kwargs())


def resolve_endpoints(
    given: str | None, environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """``given`` (comma-separated), else ``$METALEDGER_ENDPOINTS`` of ``environ`` (default
    ``os.environ``), else :data:`DEFAULT_ENDPOINTS`; each endpoint checked
    to be HOST:PORT (``http://`` allowed), so none silently means port 443."""
    env = os.environ if environ is None else environ
    source = "--endpoints" if given else ENDPOINTS_ENV if env.get(ENDPOINTS_ENV) else ""
    raw = given or env.get(ENDPOINTS_ENV) or DEFAULT_ENDPOINTS
    out = []
    for item in raw.split(","):
        if not item.strip():
            continue
        try:
            out.append(normalize_endpoint(item))
        except InvalidArgument as exc:
            raise OptionError(f"{source}: {exc.message}" if source else exc.message) from None
    if not out:
        raise OptionError(f"{source or 'endpoints'}: no endpoint given")
    return tuple(out)


def _credentials(
    raw: str | None, given: str | None, ask: Callable[[str], str | None] | None
) -> tuple[str | None, str | None]:
    """(user, password) of ``NAME[:PASSWORD]`` as etcdctl reads ``--user``: a password
    given apart wins over the one after ':'; (None, None) without a user."""
    if not raw:
        return None, None
    name, sep, password = raw.partition(":")
    if not name:
        raise OptionError("--user: the user name is empty")
    if given is not None:
        return name, given
    if sep:
        return name, password
    asked = ask(name) if ask is not None else None
    if asked is None:
        raise OptionError(f"--user {name}: no password (give --user {name}:PASSWORD or --password)")
    return name, asked


def remoting_tls(files: Mapping[str, Any]) -> ssl.SSLContext | None:
    """A client TLS context for a metaledger node's RocketMQ remoting port from the
    ``cacert``/``cert``/``key`` files of :meth:`ConnectionOptions.tls_files` (the same files
    as the gRPC channels): trusts ``cacert``, presents ``cert``/``key`` when given; None
    without ``cacert``. Raises OptionError when a file cannot be used."""
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
