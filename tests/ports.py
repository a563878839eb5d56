"""Starting a server on ports picked free, and again on fresh ones when one was taken.

:func:`tests.harness.free_ports` checks that a port is free and lets it go; the server binds
it a moment later, and anything on the machine may take it in between (CI saw a broker's
port go so). A server that cannot bind says so and exits 78 (``CANNOT_START``:
``nameserver/cli/exitcodes.py``, ``broker/cli.py``) with ``cannot listen on ADDR …: …
address already in use`` (gRPC's own bind failure adds ``Address already in use`` to its
stderr). :func:`start_on_fresh_ports` is the one place that turns that exit into another
try on fresh ports, up to :data:`ATTEMPTS` times; the harnesses that start servers on
picked ports (:class:`tests.harness.Cluster`, the brokers' ``BrokerProcess``, the etcd and
redis-server harnesses) call it with how to start once and how to pick new ports.

Only a first start picks again: a node or replica restarted later keeps its ports (its
peers and metaledger know it by them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: the exit code of a server that cannot start (``metaledger serve``, ``metaledger broker``)
CANNOT_START = 78
#: starts on fresh ports before the harness gives up
ATTEMPTS = 3


class PortTaken(RuntimeError):
    """A server exited because a port picked free for it was taken before it bound it."""


def port_taken(
    returncode: int | None, output: str | bytes, codes: tuple[int, ...] = (CANNOT_START,)
) -> bool:
    """Whether a server's exit (its code and its output) says an address it was told to
    listen on is in use: "address already in use" and exit 78 (metaledger's), or one of
    ``codes`` for other servers (etcd and redis-server exit 1 and say ``bind: address
    already in use``)."""
    text = output.decode(errors="replace") if isinstance(output, bytes) else output
    return returncode in codes and "address already in use" in text.lower()


def start_on_fresh_ports(
    start: Callable[[], T], repick: Callable[[], None], attempts: int = ATTEMPTS
) -> T:
    """``start()``'s result; when it raises :class:`PortTaken`, ``repick()`` (stop what
    started, pick fresh ports) and start again, ``attempts`` times in all (then the last
    :class:`PortTaken` is raised)."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except PortTaken:
            if attempt == attempts:
                raise
            repick()
    raise AssertionError("unreachable")
