"""gRPC core's environment for server processes: :func:`apply_server_defaults`.

gRPC reads these variables once, the Python part when ``grpc`` is first imported and the core
when it starts, so a server's entry point calls :func:`apply_server_defaults` before anything
imports ``grpc``: the ``metaledger`` command line (``nameserver.cli``: ``serve``, and ``cluster
up``'s children through it), :mod:`nameserver.server` (for programs that run a node
themselves) and ``bench/noop_kv.py``. Each is a default: a variable the environment already
sets wins. The client library (:mod:`nameserver.client`) sets nothing: a program that imports
it keeps its own gRPC settings.

- ``GRPC_ENABLE_FORK_SUPPORT=0``: a node forks a child to write each snapshot
  (:mod:`nameserver.state.forked`). gRPC core's own fork handlers, on by default in the wheels,
  would then either stop and restart gRPC's threads around every fork or log that they skip
  it; the child never touches gRPC, so they are off.
- ``GRPC_EXPERIMENTS=pollset_alternative``: gRPC core's alternative completion-queue pollset,
  5-8% less server CPU per call here (bench/results/, docs/performance.md: the noop server and a 3-node
  cluster at 64 clients, interleaved).
"""

from __future__ import annotations

import os

__all__ = ["SERVER_GRPC_ENV", "apply_server_defaults"]

SERVER_GRPC_ENV: dict[str, str] = {
    "GRPC_ENABLE_FORK_SUPPORT": "0",
    "GRPC_EXPERIMENTS": "pollset_alternative",
}


def apply_server_defaults() -> None:
    """Set each of :data:`SERVER_GRPC_ENV` the environment does not set already."""
    for name, value in SERVER_GRPC_ENV.items():
        os.environ.setdefault(name, value)
