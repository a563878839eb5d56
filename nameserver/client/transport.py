"""The one transport: channels per endpoint and failover between them.

A request goes to the current endpoint; on UNAVAILABLE (which includes a refused connection)
the transport moves on to the next endpoint, cycling with a short backoff until the
request's deadline (``timeout_s``, covering all attempts) passes. Writes carry the gRPC
metadata ``x-ml-client-id`` (one uuid per client) and ``x-ml-seq`` (one number per request,
the same on every retry of it), so the server can de-duplicate a write that a retry sent
twice. Every gRPC error is converted by :func:`~nameserver.client.errors.error_from_rpc`.

TLS (docs/tls.md): ``cacert`` (the CA that signed the server's certificate; etcdctl's
``--cacert``), ``cert`` and ``key`` (this client's certificate, for servers started with
``--client-cert-auth``), each PEM bytes or a file path. Any of them, or an ``https://``
endpoint, makes every channel TLS (without ``cacert``: the system's CAs); the server's
certificate must name the endpoint's host.

Each surface (``kv``, ``cluster``, ...) is a subclass of :class:`Transport` that adds its
calls; :class:`nameserver.client.Client` combines them.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import grpc

from nameserver.client.auth import authenticated_channel
from nameserver.client.errors import DeadlineExceeded, InvalidArgument, Unavailable, error_from_rpc
from protos.etcdserverpb import rpc_pb2_grpc
from protos.metaledger.v1 import admin_pb2_grpc

__all__ = [
    "CLIENT_ID_METADATA",
    "SEQ_METADATA",
    "Pem",
    "Transport",
    "channel_credentials",
    "normalize_endpoint",
]

#: HTTP/2 keepalive while calls are open: a connection black-holed by a partition (no
#: error, no end-of-file) is closed after a ping goes unanswered, its calls fail UNAVAILABLE
#: and the transport fails over, instead of every call on it timing out until TCP gives up
#: (minutes). gRPC also bounds unacknowledged data by the ping timeout (TCP_USER_TIMEOUT).
#: Every 6 s: metaledger allows a ping every 4 s, etcd's default enforcement one per 5 s.
_CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 6000),
    ("grpc.keepalive_timeout_ms", 3000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.http2.max_pings_without_data", 0),
)

CLIENT_ID_METADATA = "x-ml-client-id"
SEQ_METADATA = "x-ml-seq"

T = TypeVar("T")


@dataclass(slots=True)
class _Stubs:
    channel: grpc.Channel
    kv: Any
    cluster: Any
    maintenance: Any
    admin: Any


#: PEM data, or the path of a file holding it.
Pem = bytes | str | os.PathLike[str]


def _pem(what: str, value: Pem | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    try:
        with open(value, "rb") as f:
            return f.read()
    except OSError as exc:
        raise InvalidArgument(f"{what} {os.fspath(value)}: cannot read: {exc.strerror}") from None


def channel_credentials(
    cacert: Pem | None, cert: Pem | None, key: Pem | None, https: bool = False
) -> grpc.ChannelCredentials | None:
    """TLS credentials for the channels (None: plain text: nothing given, no https://)."""
    if (cert is None) != (key is None):
        raise InvalidArgument("cert and key go together (a client certificate and its key)")
    if cacert is None and cert is None and not https:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_pem("cacert", cacert),
        private_key=_pem("key", key),
        certificate_chain=_pem("cert", cert),
    )


def normalize_endpoint(endpoint: str) -> str:
    ep = endpoint.strip()
    for scheme in ("http://", "https://"):
        if ep.startswith(scheme):
            ep = ep[len(scheme) :]
    ep = ep.rstrip("/")
    if not ep:
        raise InvalidArgument(f"empty endpoint in {endpoint!r}")
    host, colon, port = ep.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")  # [::1]:9877
    if (
        not colon
        or not host
        or (":" in host and not bracketed)
        or not port.isdigit()
        or not 0 < int(port) < 65536
    ):
        raise InvalidArgument(
            f"endpoint {endpoint.strip()!r} is not HOST:PORT (e.g. 127.0.0.1:9877)"
        )
    return ep


class Transport:
    """Endpoints, their channels and the failover loop (see the module docstring);
    thread-safe."""

    _BACKOFF_FIRST_S = 0.05
    _BACKOFF_MAX_S = 0.5

    def __init__(
        self,
        endpoints: Sequence[str],
        timeout_s: float = 5.0,
        *,
        cacert: Pem | None = None,
        cert: Pem | None = None,
        key: Pem | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        https = any(e.strip().startswith("https://") for e in endpoints)
        self._credentials = channel_credentials(cacert, cert, key, https)
        eps = [normalize_endpoint(e) for e in endpoints if e.strip()]
        if not eps:
            raise InvalidArgument("no endpoints given")
        if timeout_s <= 0:
            raise InvalidArgument("timeout_s must be > 0")
        self.endpoints: tuple[str, ...] = tuple(eps)
        self.timeout_s = timeout_s
        self.client_id = str(uuid.uuid4())
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self._current = 0
        self._stubs: dict[str, _Stubs] = {}
        #: etcd auth (nameserver.client.auth): every call carries this user's token
        self._user, self._password = user, password

    # -- lifecycle

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            stubs, self._stubs = list(self._stubs.values()), {}
        for s in stubs:
            s.channel.close()

    # -- plumbing

    def _call_once(
        self,
        endpoint: str,
        method: Callable[[_Stubs], Callable[..., T]],
        request: Any,
        deadline: float,
    ) -> T:
        """One request to one endpoint, no failover (errors converted, as everywhere)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded(f"no answer within {self.timeout_s:g}s", endpoint)
        try:
            return method(self._stubs_for(endpoint))(request, timeout=remaining)
        except grpc.RpcError as err:
            raise error_from_rpc(err, endpoint) from None

    def _stubs_for(self, endpoint: str) -> _Stubs:
        with self._lock:
            stubs = self._stubs.get(endpoint)
            if stubs is None:
                channel = (
                    grpc.insecure_channel(endpoint, options=_CHANNEL_OPTIONS)
                    if self._credentials is None
                    else grpc.secure_channel(endpoint, self._credentials, options=_CHANNEL_OPTIONS)
                )
                if self._user is not None:
                    channel = authenticated_channel(
                        channel, endpoint, self._user, self._password or "", self.timeout_s
                    )
                stubs = _Stubs(
                    channel,
                    rpc_pb2_grpc.KVStub(channel),
                    rpc_pb2_grpc.ClusterStub(channel),
                    rpc_pb2_grpc.MaintenanceStub(channel),
                    admin_pb2_grpc.AdminStub(channel),
                )
                self._stubs[endpoint] = stubs
            return stubs

    def _write_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((CLIENT_ID_METADATA, self.client_id), (SEQ_METADATA, str(next(self._seq))))

    def _call(
        self,
        method: Callable[[_Stubs], Callable[..., T]],
        request: Any,
        *,
        write: bool,
        avoid: frozenset[str] = frozenset(),
        timeout_s: float | None = None,
    ) -> T:
        return self._call_at(method, request, write=write, avoid=avoid, timeout_s=timeout_s)[0]

    def _call_at(
        self,
        method: Callable[[_Stubs], Callable[..., T]],
        request: Any,
        *,
        write: bool,
        avoid: frozenset[str] = frozenset(),
        timeout_s: float | None = None,
    ) -> tuple[T, str]:
        """Send one request, failing over between endpoints on UNAVAILABLE until the deadline.

        Endpoints in ``avoid`` are skipped (it must leave at least one). ``timeout_s``
        replaces the client's deadline for this request (``math.inf``: none, for requests
        that block until something happens, like Lock). Returns the response and the
        endpoint that gave it.
        """
        metadata = self._write_metadata() if write else None
        budget_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget_s
        backoff = self._BACKOFF_FIRST_S
        failures: dict[str, str] = {}
        n = len(self.endpoints)
        while True:
            for _ in range(n):
                index = self._current
                endpoint = self.endpoints[index]
                if endpoint in avoid:
                    self._current = (index + 1) % n
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    response = method(self._stubs_for(endpoint))(
                        request,
                        timeout=None if math.isinf(remaining) else remaining,
                        metadata=metadata,
                    )
                    return response, endpoint
                except grpc.RpcError as err:
                    exc = error_from_rpc(err, endpoint)
                    if not isinstance(exc, Unavailable):
                        raise exc from None
                    failures[endpoint] = exc.message
                    if self._current == index:
                        self._current = (index + 1) % n
            if time.monotonic() + backoff >= deadline:
                break
            time.sleep(backoff)
            backoff = min(backoff * 2, self._BACKOFF_MAX_S)
        tried = "; ".join(f"{ep}: {msg}" for ep, msg in failures.items())
        if failures:
            raise Unavailable(f"no endpoint answered within {budget_s:g}s ({tried})")
        raise DeadlineExceeded(f"no answer within {budget_s:g}s")
