"""``cluster up --tls``'s certificate files: where they live, when they are made, and how a
client reaches the cluster with them. The generator is :mod:`nameserver.cli.ca` (imported
only when certificates are made: ``cryptography`` is not cheap to import for every command).

In ``DIR/tls``: ``ca.pem``; ``nX.pem`` + ``nX-key.pem`` per node (used on every port of
the node and when it dials another node); ``client.pem`` + ``client-key.pem`` for the
command line, etcdctl and the client library.
"""

from __future__ import annotations

import os

__all__ = ["CLIENT", "TLS_DIR", "client_files", "ensure_ca", "how_to_reach", "node_files"]

TLS_DIR = "tls"
CLIENT = "client"


def node_files(name: str) -> tuple[str, str, str]:
    """(certificate, key, CA) file names of ``name`` inside the TLS directory."""
    return f"{name}.pem", f"{name}-key.pem", "ca.pem"


def client_files(directory: str) -> dict[str, str]:
    """The client library's ``cacert``/``cert``/``key`` arguments for this directory."""
    cert, key, ca = (os.path.join(directory, f) for f in node_files(CLIENT))
    return {"cacert": ca, "cert": cert, "key": key}


def ensure_ca(directory: str, nodes: list[str]) -> dict[str, str]:
    """Make the CA and every certificate unless all of them exist (a later start of the
    same cluster reuses them); returns :func:`client_files`."""
    names = [*nodes, CLIENT]
    wanted = {f for n in names for f in node_files(n)}
    if not all(os.path.exists(os.path.join(directory, f)) for f in wanted):
        from nameserver.cli.ca import make_ca

        make_ca(directory, names)
    return client_files(directory)


def how_to_reach(endpoints: str, files: dict[str, str]) -> str:
    """Lines telling how to reach a TLS cluster with metaledger and etcdctl."""
    flags = f"--cacert {files['cacert']} --cert {files['cert']} --key {files['key']}"
    urls = ",".join("https://" + e for e in endpoints.split(","))
    return (
        f"TLS on every port, client certificates required (CA and certificates in "
        f"{os.path.dirname(files['cacert'])}):\n"
        f"  metaledger --endpoints {endpoints} {flags} status\n"
        f"  etcdctl --endpoints {urls} {flags} endpoint status"
    )
