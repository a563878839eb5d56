"""Real ``metaledger broker`` processes beside a real metaledger node.

``metaledger broker`` is found through the ``metaledger.commands`` entry point. An install
made before the broker existed lacks it: then the broker's processes get a throwaway
``*.dist-info`` on their PYTHONPATH that declares exactly that entry point (what
``pip install -e .`` writes), so the tests run the loader the way an installed CLI does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nameserver.client import Client
from tests.conftest import _failed
from tests.harness import REPO_ROOT, Cluster, command_plugin_path, free_port_pairs, free_ports
from tests.ports import PortTaken, port_taken, start_on_fresh_ports

ENTRY_POINT = "broker = broker.cli:register"


def plugin_path(root: Path) -> str | None:
    """A dist-info directory declaring the broker's commands, unless installed already."""
    return command_plugin_path(root, ENTRY_POINT)


def cli_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(REPO_ROOT), plugin_path(root), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def metaledger(
    root: Path, *args: str, timeout: float = 60, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "nameserver.cli", *args],
        env=cli_env(root), input=stdin, capture_output=True, timeout=timeout, check=False,
    )  # fmt: skip


class BrokerProcess:
    """``metaledger broker`` as a subprocess in its own session, stopped by its PID."""

    def __init__(
        self,
        root: Path,
        endpoints: list[str],
        name: str = "broker-a",
        *extra: str,
        replica: str = "",
        start: bool = True,
        grpc: bool = False,
        metrics: bool = False,
    ) -> None:
        """``replica``: this replica's data dir and log name (default: the group name), for
        several replicas of one group. ``grpc``, ``metrics``: listen on a picked port for
        RocketMQ 5's gRPC (``--listen-grpc``, :attr:`grpc_port`) and for metrics
        (``--listen-metrics``, :attr:`metrics_port`); 0 when not asked for."""
        self.root = root
        self.name = name
        self.endpoints = endpoints
        self.extra = extra
        self.want_grpc, self.want_metrics = grpc, metrics
        self.data_dir = root / (replica or name)
        self.log_path = root / f"{replica or name}.log"
        self.port = self.grpc_port = self.metrics_port = 0
        #: more environment for the process (e.g. libfaketime), set before :meth:`start`
        self.extra_env: dict[str, str] = {}
        self._pick_ports()
        self.proc: subprocess.Popen[bytes] | None = None
        self._run_from = 0  # where the current run's lines begin in the log
        if start:
            self.start()

    def _pick_ports(self) -> None:
        self.port = free_port_pairs(1)[0]  # and port + 1 for HA
        self.grpc_port, self.metrics_port = (
            free_ports(1)[0] if want else 0 for want in (self.want_grpc, self.want_metrics)
        )

    @property
    def args(self) -> list[str]:
        picked = [
            *(("--listen-grpc", f"127.0.0.1:{self.grpc_port}") if self.grpc_port else ()),
            *(("--listen-metrics", f"127.0.0.1:{self.metrics_port}") if self.metrics_port else ()),
        ]
        return [
            "broker", "--group", self.name, "--data-dir", str(self.data_dir),
            "--listen", f"127.0.0.1:{self.port}", "--endpoints", ",".join(self.endpoints),
            *picked, *self.extra,
        ]  # fmt: skip

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> None:
        """Start and wait until it serves. Its first start picks fresh ports and starts
        again when a picked one was taken before the broker bound it (tests/ports.py); a
        restart keeps its ports."""
        if self.proc is not None:
            self._start_once(timeout)
            return

        start_on_fresh_ports(lambda: self._start_once(timeout), self._pick_ports)

    def _start_once(self, timeout: float) -> None:
        seen = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._run_from = seen
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nameserver.cli", *self.args],
                env={**cli_env(self.root), **self.extra_env}, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while b"serving on" not in self.log_path.read_bytes()[seen:]:
            if self.proc.poll() is not None:
                if port_taken(self.proc.returncode, self.log_path.read_bytes()[seen:]):
                    raise PortTaken(f"broker exited {self.proc.returncode}:\n{self.log_tail()}")
                raise RuntimeError(f"broker exited {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop(signal.SIGKILL)  # never left running by a failed start
                raise TimeoutError(f"broker not serving after {timeout} s:\n{self.log_tail()}")
            time.sleep(0.05)

    def wait_logged(self, text: bytes, timeout: float = 30) -> None:
        """Wait until the current run (since the last start) logged ``text``: e.g. its role,
        which a replica learns from metaledger after it serves (``broker: master now``)."""
        deadline = time.monotonic() + timeout
        while text not in self.log_path.read_bytes()[self._run_from :]:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"broker exited before {text!r}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {text!r} after {timeout} s:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def log_tail(self, n: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        lines = self.log_path.read_bytes().decode(errors="replace").splitlines()
        return "\n".join(lines[-n:])


@pytest.fixture
def node(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """One real metaledger node, ready."""
    c = Cluster(tmp_path / "node", n=1)
    try:
        c.wait_ready(30)
        yield c
    finally:
        c.close(failed=_failed(request.node))


@pytest.fixture
def client(node: Cluster) -> Iterator[Client]:
    with Client(node.endpoints, timeout_s=10) as c:
        yield c


def wait_for(what: str, check: object, timeout: float = 30, every: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check() if callable(check) else check
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(every)
