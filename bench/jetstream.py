"""NATS JetStream as the broker benchmark's field peer: a local cluster and its acked publishes.

``NatsCluster`` writes one config file per ``nats-server -js`` process in a temp dir
(``server_name``, ``listen`` and ``http`` on free 127.0.0.1 ports, ``jetstream { store_dir }``
and, for more than one server, a ``cluster`` block whose ``routes`` name every other server),
starts them, waits until each answers ``/healthz`` and a stream can be created, and stops
them by PID (SIGTERM, SIGKILL after a grace period). ``JetStreamTarget`` is the load side for
``bench.broker_send``: publishes through ``nats-py`` on a few connections, each publish awaiting
its PubAck (``js.publish``), and an ordered push consumer for produce-to-consume latency.

JetStream acknowledges a publish once the stream's replicas (a quorum of R3) hold it in their
file store; like RocketMQ's ASYNC_FLUSH it does not fsync each message (nats-server 2.9 syncs
its files in the background), so the comparison is with the broker's async flush.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness import free_ports, wait_until

HOST = "127.0.0.1"
STREAM = "BENCH"
SUBJECT = "bench.send"
STOP_GRACE_S = 10.0


def nats_server_path() -> str | None:
    """The ``nats-server`` binary (Debian installs it in /usr/sbin), or None."""
    return shutil.which("nats-server") or shutil.which("nats-server", path="/usr/sbin:/usr/bin")


@dataclass
class _Server:
    name: str
    client_port: int
    cluster_port: int
    http_port: int
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None


def server_config(
    name: str,
    client_port: int,
    http_port: int,
    store_dir: Path,
    cluster_port: int | None = None,
    routes: list[int] | None = None,
) -> str:
    """One server's config file (nats-server's own format; strings JSON-quoted)."""
    lines = [
        f"server_name: {json.dumps(name)}",
        f"listen: {json.dumps(f'{HOST}:{client_port}')}",
        f"http: {json.dumps(f'{HOST}:{http_port}')}",
        "jetstream {",
        f"  store_dir: {json.dumps(str(store_dir))}",
        "  max_memory_store: 268435456",
        "  max_file_store: 4294967296",
        "}",
    ]
    if cluster_port is not None:
        route_urls = ", ".join(json.dumps(f"nats-route://{HOST}:{p}") for p in routes or [])
        lines += [
            "cluster {",
            '  name: "bench"',
            f"  listen: {json.dumps(f'{HOST}:{cluster_port}')}",
            f"  routes: [{route_urls}]",
            "}",
        ]
    return "\n".join(lines) + "\n"


@dataclass
class NatsCluster:
    """``size`` nats-server processes (1 = standalone, no cluster block)."""

    size: int
    binary: str
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-nats-")))
    servers: list[_Server] = field(default_factory=list)
    _own_root: bool = True

    @property
    def urls(self) -> list[str]:
        return [f"nats://{HOST}:{s.client_port}" for s in self.servers]

    @property
    def pids(self) -> list[int]:
        return [s.proc.pid for s in self.servers if s.proc is not None]

    def start(self, timeout_s: float = 30.0) -> None:
        ports = free_ports(3 * self.size)
        for i in range(self.size):
            name = f"js{i}"
            self.servers.append(
                _Server(
                    name,
                    ports[3 * i],
                    ports[3 * i + 1],
                    ports[3 * i + 2],
                    self.root / f"{name}.conf",
                    self.root / f"{name}.log",
                )
            )
        for s in self.servers:
            routes = [o.cluster_port for o in self.servers if o is not s]
            s.config.write_text(
                server_config(
                    s.name,
                    s.client_port,
                    s.http_port,
                    self.root / s.name,
                    s.cluster_port if self.size > 1 else None,
                    routes,
                )
            )
        try:
            for s in self.servers:
                with open(s.log, "wb") as log:
                    s.proc = subprocess.Popen(
                        [self.binary, "-js", "-c", str(s.config)],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
            for s in self.servers:
                wait_until(
                    functools.partial(self._healthy, s),
                    timeout_s,
                    functools.partial(self._why, s),
                )
        except BaseException:
            self.stop()
            raise

    def _healthy(self, s: _Server) -> bool:
        assert s.proc is not None
        if s.proc.poll() is not None:
            raise AssertionError(f"{s.name} exited with {s.proc.returncode}")
        with urllib.request.urlopen(f"http://{HOST}:{s.http_port}/healthz", timeout=2) as r:
            return bool(r.status == 200)

    def _why(self, s: _Server) -> str:
        tail = s.log.read_text(errors="replace").splitlines()[-10:] if s.log.exists() else []
        return f"nats-server {s.name} not healthy; log tail:\n" + "\n".join(tail)

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM every server by PID, SIGKILL what is left after ``grace_s``; then the
        temp dir goes."""
        for s in self.servers:
            if s.proc is not None and s.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(s.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for s in self.servers:
            if s.proc is None:
                continue
            try:
                s.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(s.proc.pid, signal.SIGKILL)
                s.proc.wait(5)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)


# --------------------------------------------------------------------------- load side


class JetStreamTarget:
    """Acked publishes to one stream of ``replicas`` replicas (file storage) on ``urls``,
    over ``connections`` connections (worker ``w`` publishes on connection ``w % n``)."""

    def __init__(self, urls: list[str], replicas: int, connections: int = 4) -> None:
        self.urls = urls
        self.replicas = replicas
        self.connections = connections
        self._ncs: list[Any] = []
        self._js: list[Any] = []
        self._sub: Any = None

    async def open(self, timeout_s: float = 60.0) -> None:
        import nats
        from nats.js.api import StorageType, StreamConfig

        for i in range(self.connections):
            # each connection starts at another server: the load is spread like clients'
            servers = self.urls[i % len(self.urls) :] + self.urls[: i % len(self.urls)]
            nc = await nats.connect(servers=servers, dont_randomize=True, max_reconnect_attempts=2)
            self._ncs.append(nc)
            self._js.append(nc.jetstream(timeout=30))
        config = StreamConfig(
            name=STREAM,
            subjects=[SUBJECT],
            num_replicas=self.replicas,
            storage=StorageType.FILE,
        )
        # a new cluster elects its meta leader and the stream's group after /healthz: retry,
        # each try on a short API timeout (one 30 s try on a busy machine used the whole
        # deadline: "nats: timeout")
        setup = self._ncs[0].jetstream(timeout=5)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await setup.add_stream(config)
                await setup.publish(SUBJECT, b"warm-up", timeout=5)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def send(self, worker: int, payload: bytes) -> None:
        await self._js[worker % len(self._js)].publish(SUBJECT, payload)

    async def consume(self, on_payload: Callable[[bytes], None]) -> None:
        """Deliver every later message's payload to ``on_payload`` (an ordered push
        consumer: ack none, flow control; returns once subscribed)."""
        from nats.js.api import DeliverPolicy

        async def cb(msg: Any) -> None:
            on_payload(msg.data)

        self._sub = await self._js[-1].subscribe(
            SUBJECT, cb=cb, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW
        )

    async def close(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        for nc in self._ncs:
            with contextlib.suppress(Exception):
                await nc.close()
        self._ncs.clear()
        self._js.clear()
