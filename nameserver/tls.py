"""TLS on the server's ports, from etcd's flags: files checked at start, contexts built once.

etcd 3.4 (``embed/config.go``, ``pkg/transport/listener.go``) takes ``--cert-file``,
``--key-file``, ``--trusted-ca-file`` and ``--client-cert-auth`` for the client port, and
the same four with ``--peer-`` for the peer port. Here the client set covers the client
gRPC port, the RocketMQ remoting port and the metrics port; the peer set covers the native
engine's Raft port (:mod:`raftlog.native.transport`, which takes the two
:class:`ssl.SSLContext` built here through :class:`raftlog.NativeConfig` and keeps its
cluster-password handshake on top).

- :func:`check` reads every file given and loads the key against the certificate, so a
  node with an unreadable file or a key that does not match refuses to start with a
  :class:`raftlog.ConfigError` naming the flag (``metaledger serve`` exits USAGE).
- :func:`server_context` / :func:`client_context`: the asyncio side (remoting, metrics,
  Raft peers). Under ``client_cert_auth`` a client must present a certificate signed by
  the trusted CA, or the handshake fails and only that connection is closed.
- :func:`grpc_server_credentials` / :func:`node_channel`: the gRPC side; a node dialling
  another node's client port (heartbeat forwarding, replica-group and member calls)
  presents its own certificate and trusts the same CA.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raftlog import ConfigError

if TYPE_CHECKING:  # imported where used: the config imports this module before gRPC's env is set
    import grpc

__all__ = [
    "TlsFiles",
    "check",
    "client_context",
    "grpc_server_credentials",
    "node_channel",
    "server_context",
    "tls_arguments",
]


def _no_password() -> bytes:
    """An encrypted key is refused (as etcd does), never asked for at a terminal."""
    return b""


#: A TLS handshake must complete this long after accept (asyncio's default is 60 s).
HANDSHAKE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TlsFiles:
    """One port set's files; ``prefix`` is "" (client ports) or "peer-" (the Raft port),
    for the flag names in errors."""

    cert_file: str = ""
    key_file: str = ""
    trusted_ca_file: str = ""
    client_cert_auth: bool = False
    prefix: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)

    def flag(self, name: str) -> str:
        return f"--{self.prefix}{name}"

    def field(self, name: str) -> str:
        return self.prefix.replace("-", "_") + name.replace("-", "_")


def _read(files: TlsFiles, name: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError(
            files.field(name), f"{files.flag(name)} {path}: cannot read: {exc.strerror}"
        ) from None
    if b"-----BEGIN " not in data:
        raise ConfigError(files.field(name), f"{files.flag(name)} {path}: not a PEM file")
    return data


def check(files: TlsFiles) -> None:
    """Refuse (ConfigError naming the flag) a half-given pair, an unreadable file, a file
    that is not PEM, a key that does not match the certificate, or client-cert-auth
    without a CA to check client certificates against."""
    if bool(files.cert_file) != bool(files.key_file):
        missing = "key-file" if files.cert_file else "cert-file"
        given = "cert-file" if files.cert_file else "key-file"
        raise ConfigError(
            files.field(missing), f"{files.flag(given)} needs {files.flag(missing)} too"
        )
    if not files.enabled:
        if files.trusted_ca_file or files.client_cert_auth:
            what = "trusted-ca-file" if files.trusted_ca_file else "client-cert-auth"
            raise ConfigError(
                files.field(what),
                f"{files.flag(what)} needs {files.flag('cert-file')} and "
                f"{files.flag('key-file')} (TLS on that port)",
            )
        return
    if files.client_cert_auth and not files.trusted_ca_file:
        raise ConfigError(
            files.field("client-cert-auth"),
            f"{files.flag('client-cert-auth')} needs {files.flag('trusted-ca-file')} "
            "(the CA that signs client certificates)",
        )
    _read(files, "cert-file", files.cert_file)
    _read(files, "key-file", files.key_file)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(files.cert_file, files.key_file, password=_no_password)
    except ssl.SSLError as exc:
        why = (
            "the key does not match the certificate"
            if "KEY_VALUES_MISMATCH" in str(exc)
            else "not a usable certificate and unencrypted key (an encrypted key is not "
            f"supported) ({exc.reason or exc})"
        )
        raise ConfigError(
            files.field("key-file"),
            f"{files.flag('key-file')} {files.key_file} / {files.flag('cert-file')} "
            f"{files.cert_file}: {why}",
        ) from None
    if files.trusted_ca_file:
        _read(files, "trusted-ca-file", files.trusted_ca_file)
        try:
            ctx.load_verify_locations(files.trusted_ca_file)
        except ssl.SSLError as exc:
            raise ConfigError(
                files.field("trusted-ca-file"),
                f"{files.flag('trusted-ca-file')} {files.trusted_ca_file}: not a CA "
                f"certificate ({exc.reason or exc})",
            ) from None


def server_context(files: TlsFiles) -> ssl.SSLContext | None:
    """The listening side's context (None: TLS off on these ports)."""
    if not files.enabled:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(files.cert_file, files.key_file, password=_no_password)
    if files.trusted_ca_file:
        ctx.load_verify_locations(files.trusted_ca_file)
    ctx.verify_mode = ssl.CERT_REQUIRED if files.client_cert_auth else ssl.CERT_NONE
    return ctx


def tls_arguments(ctx: ssl.SSLContext | None) -> dict[str, Any]:
    """``asyncio.start_server``'s TLS arguments for ``ctx`` (none when None: plain TCP).
    A handshake that fails or stalls closes that connection only; asyncio logs it at
    DEBUG (an ``ssl.SSLError`` is an OSError), nothing at ERROR."""
    if ctx is None:
        return {}
    return {"ssl": ctx, "ssl_handshake_timeout": HANDSHAKE_TIMEOUT_S}


def client_context(files: TlsFiles) -> ssl.SSLContext | None:
    """The dialling side's context: trusts the CA (the system's when none is given),
    checks the host name against the certificate, presents this node's certificate."""
    if not files.enabled:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=files.trusted_ca_file or None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(files.cert_file, files.key_file, password=_no_password)
    return ctx


def _read_all(files: TlsFiles) -> tuple[bytes, bytes, bytes | None]:
    with open(files.cert_file, "rb") as c, open(files.key_file, "rb") as k:
        cert, key = c.read(), k.read()
    ca = None
    if files.trusted_ca_file:
        with open(files.trusted_ca_file, "rb") as f:
            ca = f.read()
    return cert, key, ca


def grpc_server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    import grpc

    cert, key, ca = _read_all(files)
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=files.client_cert_auth
    )


def node_channel(address: str, files: TlsFiles) -> grpc.aio.Channel:
    """A channel to another node's client port: TLS with this node's certificate and the
    trusted CA when the client ports use TLS, else plain."""
    import grpc

    if not files.enabled:
        return grpc.aio.insecure_channel(address)
    cert, key, ca = _read_all(files)
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert
    )
    return grpc.aio.secure_channel(address, creds)
