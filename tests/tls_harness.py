"""TLS for the test clusters: a throwaway CA per test, the serve and etcd flags that use it,
and :class:`TlsCluster` (a :class:`tests.harness.Cluster` whose own gRPC channels use TLS).

The certificates come from :mod:`nameserver.cli.ca` (what ``cluster up --tls`` uses): every
leaf names 127.0.0.1 and localhost and may serve and authenticate as a client.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

from nameserver.cli.ca import make_ca
from tests.harness import CHANNEL_OPTIONS, Cluster


@dataclass(frozen=True)
class Pki:
    """A CA in ``root`` with pairs ``server`` and ``client`` (and ``other``: a CA of its own,
    which the first one does not trust)."""

    root: Path

    @classmethod
    def make(cls, root: Path, nodes: int = 3) -> Pki:
        make_ca(str(root / "ca"), ["server", "client", *(f"n{i}" for i in range(nodes))])
        make_ca(str(root / "other"), ["server", "client", "intruder"])
        return cls(root)

    def ca(self, which: str = "ca") -> str:
        return str(self.root / which / "ca.pem")

    def cert(self, name: str, which: str = "ca") -> str:
        return str(self.root / which / f"{name}.pem")

    def key(self, name: str, which: str = "ca") -> str:
        return str(self.root / which / f"{name}-key.pem")

    def serve_flags(
        self, name: str = "server", which: str = "ca", peer: bool = False, auth: bool = True
    ) -> list[str]:
        """``metaledger serve``'s flags for the client ports (and the peer port)."""
        out: list[str] = []
        for prefix in ("", "peer-") if peer else ("",):
            out += [f"--{prefix}cert-file", self.cert(name, which)]
            out += [f"--{prefix}key-file", self.key(name, which)]
            out += [f"--{prefix}trusted-ca-file", self.ca(which)]
            out += [f"--{prefix}client-cert-auth"] if auth else []
        return out

    def etcd_flags(self) -> list[str]:
        """etcd's flags for the same client TLS settings."""
        return [
            f"--cert-file={self.cert('server')}",
            f"--key-file={self.key('server')}",
            f"--trusted-ca-file={self.ca()}",
            "--client-cert-auth",
        ]

    def etcdctl_flags(self, name: str = "client", which: str = "ca") -> list[str]:
        return [
            f"--cacert={self.ca()}",
            f"--cert={self.cert(name, which)}",
            f"--key={self.key(name, which)}",
        ]

    def client_files(self, name: str = "client", which: str = "ca") -> dict[str, str]:
        """The client library's (and the CLI's) TLS arguments."""
        return {"cacert": self.ca(), "cert": self.cert(name, which), "key": self.key(name, which)}

    def ssl_context(self, name: str | None = "client", which: str = "ca") -> ssl.SSLContext:
        """A client context trusting the CA, presenting ``name``'s pair (None: no cert)."""
        ctx = ssl.create_default_context(cafile=self.ca())
        if name is not None:
            ctx.load_cert_chain(self.cert(name, which), self.key(name, which))
        return ctx

    def channel_credentials(self, name: str = "client") -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            Path(self.ca()).read_bytes(),
            Path(self.key(name)).read_bytes(),
            Path(self.cert(name)).read_bytes(),
        )


class TlsCluster(Cluster):
    """A cluster whose nodes serve TLS (``extra_args`` carry the flags); the harness's own
    gRPC channels (status, wait_ready, stubs) present ``pki``'s client certificate."""

    def __init__(self, root: Path, n: int, pki: Pki, extra_args: list[str], start: bool = True):
        self.pki = pki
        super().__init__(root, n, start=start, extra_args=extra_args)

    def channel(self, i: int) -> grpc.Channel:
        ch = self._channels.get(i)
        if ch is None:
            ch = self._channels[i] = grpc.secure_channel(
                self.nodes[i].client_addr, self.pki.channel_credentials(), options=CHANNEL_OPTIONS
            )
        return ch
