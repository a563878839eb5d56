"""One replicator worker (``metaledger replicate …``) as a real process in its own session,
its output in a log file, stopped by its PID: what both replicators' tests run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.broker.conftest import cli_env


class WorkerProcess:
    def __init__(self, root: Path, log_name: str, args: list[str]) -> None:
        self.root = root
        self.log_path = root / log_name
        self.args = [sys.executable, "-m", "nameserver.cli", "replicate", *args]
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                self.args, env=cli_env(self.root), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def send(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Stop it (a paused one is continued first, unless killed) and return its exit
        code; killed after 20 s."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        if sig == signal.SIGTERM:
            # a worker stopped before it installed its signal handlers dies of SIGTERM (-15):
            # its start banner comes right after them
            self.proc.send_signal(signal.SIGCONT)
            deadline = time.monotonic() + 30
            while "replicating " not in self.log() and self.proc.poll() is None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        if sig != signal.SIGKILL:
            self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace")
