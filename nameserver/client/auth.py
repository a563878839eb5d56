"""Client-side auth: a user's token on every call, as etcd's clients send it.

An etcd client authenticates once (``Auth/Authenticate`` with the user's name and password)
and sends the token it gets in the gRPC metadata ``token`` of every later call. Tokens may
be node-local (etcd's ``simple`` tokens), so :class:`TokenInterceptor` authenticates per
endpoint, on the channel's first call, and again when a unary call answers UNAUTHENTICATED
("invalid auth token": the token expired). Every call kind carries it (unary and streams:
watch, lease keep-alive, election observe), through a channel interceptor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc

from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc

__all__ = ["TokenInterceptor", "authenticated_channel"]

TOKEN_METADATA = "token"


class _Details(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, base: Any, metadata: list[tuple[str, str]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class TokenInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds ``token`` to every call's metadata; the token comes from ``authenticate()``."""

    def __init__(self, authenticate: Callable[[], str]) -> None:
        self._authenticate = authenticate
        self._lock = threading.Lock()
        self._token: str | None = None

    def token(self, renew: bool = False) -> str:
        with self._lock:
            if self._token is None or renew:
                # an RpcError (wrong password, node down) reaches the caller as the call's
                # own error: the transport converts it and fails over as for any call
                self._token = self._authenticate()
            return self._token

    def _details(self, details: Any, renew: bool = False) -> _Details:
        metadata = [(k, v) for k, v in (details.metadata or ()) if k != TOKEN_METADATA]
        metadata.append((TOKEN_METADATA, self.token(renew)))
        return _Details(details, metadata)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        call = continuation(self._details(details), request)
        if call.code() == grpc.StatusCode.UNAUTHENTICATED:  # expired: once more, anew
            call = continuation(self._details(details, renew=True), request)
        return call

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


def authenticated_channel(
    channel: grpc.Channel, endpoint: str, user: str, password: str, timeout_s: float
) -> grpc.Channel:
    """``channel`` (to ``endpoint``) whose calls carry ``user``'s token (authenticated there
    on first use)."""

    def authenticate() -> str:
        stub = rpc_pb2_grpc.AuthStub(channel)
        request = rpc_pb2.AuthenticateRequest(name=user, password=password)
        token: str = stub.Authenticate(request, timeout=timeout_s).token
        return token

    intercepted: grpc.Channel = grpc.intercept_channel(channel, TokenInterceptor(authenticate))
    return intercepted
