"""A real ``redis-server`` for tests: started on a free 127.0.0.1 port, stopped by PID.

    with RedisServer(tmp_path, config={"repl-diskless-sync": "no"}) as server:
        r = server.client()              # redis-py, decode_responses off
        r.set(b"k", b"v")
        server.restart()                 # same dir, same port (``SHUTDOWN SAVE`` first when asked)
        server.kill()                    # SIGKILL

Every option goes on the command line (``--name value``), so the server's ``CONFIG GET`` shows
exactly what a test asked for; ``save ""`` and ``appendonly no`` unless the test says otherwise,
so nothing is written behind its back. Waits poll a condition with a deadline (PING answered).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import redis

from tests.harness import free_ports, wait_until
from tests.ports import PortTaken, port_taken, start_on_fresh_ports

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisServer:
    def __init__(
        self,
        root: str | os.PathLike[str],
        config: dict[str, str] | None = None,
        name: str = "redis",
        port: int | None = None,
        start: bool = True,
        host: str = "127.0.0.1",
    ) -> None:
        """``host``: the address it binds and clients dial (a network namespace's, in
        tests/faults/net/)."""
        self.host = host
        self.dir = Path(root) / name
        self.dir.mkdir(parents=True, exist_ok=True)
        #: a port picked here is picked again if taken before the first start binds it
        self._picked = port is None
        self.port = port or free_ports(1)[0]
        self.config = {"save": "", "appendonly": "no", **(config or {})}
        self.log_path = self.dir / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None
        if start:
            self.start()

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [REDIS_SERVER, "--port", str(self.port), "--bind", self.host]
        cmd += ["--dir", str(self.dir), "--logfile", str(self.log_path), "--daemonize", "no"]
        for key, value in self.config.items():
            cmd += [f"--{key}", value]
        return cmd

    def start(self, timeout: float = 15.0) -> None:
        """Start and wait until it answers PING. A first start on a port picked here starts
        again on a fresh one when that port was taken (tests/ports.py); later ones keep it."""
        if self.proc is not None or not self._picked:
            self._start_once(timeout)
            return

        def repick() -> None:
            self.port = free_ports(1)[0]

        start_on_fresh_ports(lambda: self._start_once(timeout), repick)

    def _start_once(self, timeout: float) -> None:
        seen = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_until(self._answers, timeout, f"redis-server on {self.addr} answers PING")
        except AssertionError:
            out = self.log_path.read_bytes()[seen:] if self.log_path.exists() else b""
            if port_taken(self.proc.poll(), out, codes=(1,)):
                raise PortTaken(f"redis-server: port {self.port} taken") from None
            raise

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(
                f"redis-server exited ({self.proc.returncode}):\n{self.log_tail()}"
            )
        try:
            return bool(self.client(socket_timeout=1).ping())
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            return False

    def client(self, **kwargs: Any) -> redis.Redis:
        kwargs.setdefault("socket_timeout", 10)
        password = self.config.get("requirepass")
        if password and "password" not in kwargs:
            kwargs["password"] = password
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout)

    def stop(self, timeout: float = 15.0) -> int | None:
        return self.kill(signal.SIGTERM, timeout)

    def restart(self, save: bool = False, timeout: float = 15.0) -> None:
        if save and self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(redis.ConnectionError):
                self.client().shutdown(save=True)
            self.proc.wait(timeout)
        else:
            self.stop(timeout)
        self.start(timeout)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def close(self) -> None:
        self.kill()

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_synced(server: RedisServer, timeout: float = 30.0) -> None:
    """Until the server has finished any BGSAVE it was doing (a full sync's fork child)."""

    def idle() -> bool:
        info = server.client().info("persistence")
        return not info.get("rdb_bgsave_in_progress")

    wait_until(idle, timeout, f"{server.addr} has no BGSAVE in progress")
