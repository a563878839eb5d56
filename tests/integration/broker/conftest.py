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
from tests.harness import REPO_ROOT, Cluster, command_plugin_path, free_port_pairs

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
    ) -> None:
        """``replica``: this replica's data dir and log name (default: the group name), for
        several replicas of one group."""
        self.root = root
        self.name = name
        self.port = free_port_pairs(1)[0]  # and port + 1 for HA
        self.data_dir = root / (replica or name)
        self.log_path = root / f"{replica or name}.log"
        self.args = [
            "broker", "--group", name, "--data-dir", str(self.data_dir),
            "--listen", f"127.0.0.1:{self.port}", "--endpoints", ",".join(endpoints), *extra,
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        if start:
            self.start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> None:
        seen = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nameserver.cli", *self.args],
                env=cli_env(self.root), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while b"serving on" not in self.log_path.read_bytes()[seen:]:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop(signal.SIGKILL)  # never left running by a failed start
                raise TimeoutError(f"broker not serving after {timeout} s:\n{self.log_tail()}")
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
