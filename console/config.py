"""The console's configuration: a frozen dataclass with a ``validate()`` naming the field."""

from __future__ import annotations

from dataclasses import dataclass

from nameserver.client import ConnectionOptions

__all__ = ["DEFAULT_LISTEN", "ClusterSpec", "ConsoleConfig", "parse_cluster", "parse_listen"]

#: DESIGN.md §6
DEFAULT_LISTEN = "127.0.0.1:9870"
#: etcd's and metaledger's default backend quota (``serve --quota-backend-bytes 0``)
DEFAULT_QUOTA_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class ClusterSpec:
    """One cluster the console shows: its name and how to connect."""

    name: str
    connection: ConnectionOptions


@dataclass(frozen=True)
class ConsoleConfig:
    host: str = "127.0.0.1"
    port: int = 9870
    clusters: tuple[ClusterSpec, ...] = ()
    allow_writes: bool = False
    #: the quota the database size is shown against (the server does not publish its own)
    quota_bytes: int = DEFAULT_QUOTA_BYTES
    #: how often the sampler asks each cluster for its status
    sample_every_s: float = 1.0
    #: samples kept per cluster (memory stays bounded: a fixed-size ring)
    samples_kept: int = 3600
    #: each request to the cluster gives up after this long (a dead member must not stall
    #: the page)
    timeout_s: float = 2.0

    def validate(self) -> ConsoleConfig:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port: {self.port} is not a TCP port")
        if not self.clusters:
            raise ValueError("clusters: at least one cluster is needed")
        names = [c.name for c in self.clusters]
        if len(set(names)) != len(names):
            raise ValueError(f"clusters: a name is given twice: {names}")
        if self.quota_bytes <= 0:
            raise ValueError(f"quota_bytes: {self.quota_bytes} must be > 0")
        if self.sample_every_s <= 0:
            raise ValueError(f"sample_every_s: {self.sample_every_s:g} must be > 0")
        if self.samples_kept < 2:
            raise ValueError(f"samples_kept: {self.samples_kept} must be >= 2")
        return self


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as ``(host, port)``."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {value!r} is not HOST:PORT (e.g. {DEFAULT_LISTEN})")
    return host.strip("[]"), int(port)


def parse_cluster(value: str) -> tuple[str, str]:
    """``NAME=HOST:PORT,...`` as ``(name, endpoints)``."""
    name, sep, endpoints = value.partition("=")
    name = name.strip()
    if not sep or not name or not endpoints.strip():
        raise ValueError(f"--cluster {value!r} is not NAME=HOST:PORT,... (e.g. prod=10.0.0.1:9877)")
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ValueError(f"--cluster {value!r}: the name may hold letters, digits, '-', '_', '.'")
    return name, endpoints.strip()
