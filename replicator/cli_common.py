"""What the ``replicate`` commands share (:mod:`replicator.cli`, :mod:`replicator.rocketmq.cli`):
the :class:`Common` options ``nameserver.cli`` hands their ``register``, ``--listen-metrics``
parsing, and running one worker until a signal.

Where a command connects to metaledger is ``common.connection(args)``: the flags, else
``$METALEDGER_ENDPOINTS`` …, else ``127.0.0.1:9877``, decided in the client library alone
(:class:`nameserver.client.ConnectionOptions`), as for every other command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Protocol

from nameserver.client import ConnectionOptions

__all__ = ["EXIT_OK", "Common", "parse_listen", "run_worker", "setup_logging"]

EXIT_OK = 0


class Common(Protocol):
    """What ``register`` gets from ``nameserver.cli`` (its ``connection.CommonOptions``: this
    package may not import it)."""

    @property
    def parent(self) -> argparse.ArgumentParser:
        """``--endpoints``, ``--output``, ``--timeout``, TLS and auth."""

    def connection(self, args: argparse.Namespace) -> ConnectionOptions:
        """The flags, else the environment, else the defaults; OptionError when unusable."""


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` too) → (host, port); ValueError when malformed."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


class _Worker(Protocol):
    def stop(self) -> None: ...

    async def run(self) -> None: ...


class _Metrics(Protocol):
    def serve(self, host: str, port: int) -> None: ...

    def close(self) -> None: ...


def setup_logging(level: str) -> None:
    import logging

    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s [%(name)s] %(message)s",
        stream=sys.stderr,
    )


def run_worker(
    kind: str,
    make: Callable[[], _Worker],
    metrics: _Metrics,
    listen: tuple[str, int] | None,
    banner: str,
) -> int:
    """Run one replicator worker until SIGINT/SIGTERM: its metrics served on ``listen``, the
    GC tuned, uvloop; exit 0. Exit 2 when the metrics port cannot be bound, or when the
    worker finds a setting that cannot work once it reached the clusters (its ``run()``
    raises a ValueError, as the RocketMQ replicator's ConfigError is): one line, no
    traceback."""
    import asyncio
    import signal

    from replicator import gctune

    if listen is not None:
        try:
            metrics.serve(*listen)
        except OSError as exc:
            print(f"metaledger: replicate {kind}: --listen-metrics: {exc}", file=sys.stderr)
            return 2

    async def main() -> None:
        replicator = make()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, replicator.stop)
        print(banner, file=sys.stderr, flush=True)
        await replicator.run()

    gctune.tune()
    try:
        import uvloop

        uvloop.run(main())
    except KeyboardInterrupt:
        pass
    except ValueError as exc:
        print(f"metaledger: replicate {kind}: {exc}", file=sys.stderr)
        return 2
    finally:
        metrics.close()
    return EXIT_OK
