"""The replica processes of the failover test and their commit logs, read from the files.

:class:`Replica` runs one ``metaledger broker`` replica (SYNC_MASTER, a short replica
heartbeat timeout) in its own session and stops it by its PID, the pattern of
``tests/integration/broker/conftest.py``'s ``BrokerProcess`` (whose ``cli_env`` it uses), with
its own data dir per replica of one group. :func:`commit_log_bytes` reads a stopped
replica's ``<data-dir>/store/commitlog`` segments up to the first byte that is not a whole,
good record (research/broker.md §1: TOTALSIZE, MAGICCODE, CRC).
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

from broker.store import decode
from broker.store.errors import DecodeError
from broker.store.message import MAGIC_V1, MAGIC_V2
from broker.store.segments import list_segments
from tests.harness import free_port_pairs
from tests.integration.broker.conftest import cli_env

HEARTBEAT_TIMEOUT_MS = 2000


class Replica:
    """One ``metaledger broker`` replica process (its own session), stopped by its PID."""

    def __init__(self, root: Path, endpoints: list[str], group: str, index: int) -> None:
        self.root = root
        self.index = index
        self.port = free_port_pairs(1)[0]  # and port + 1 for HA
        self.data_dir = root / f"{group}-r{index}"
        self.log_path = root / f"{group}-r{index}.log"
        self.args = [
            "broker", "--group", group, "--cluster", "fo-cluster",
            "--data-dir", str(self.data_dir), "--listen", f"127.0.0.1:{self.port}",
            "--endpoints", ",".join(endpoints), "--broker-role", "SYNC_MASTER",
            "--replica-heartbeat-timeout-ms", str(HEARTBEAT_TIMEOUT_MS),
            "--slave-timeout-ms", "2000", "--flush", "ASYNC_FLUSH",
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

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
                raise RuntimeError(f"replica exited {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop(signal.SIGKILL)
                raise TimeoutError(f"replica not serving after {timeout} s:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(10)

    def log_tail(self, n: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        lines = self.log_path.read_bytes().decode(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def commit_log(self) -> bytes:
        return commit_log_bytes(self.data_dir)


def commit_log_bytes(data_dir: Path) -> bytes:
    """The commit log's valid records, read from the files (the replica stopped): from the
    first segment's start up to the first byte that is not a whole, good record."""
    segments = list_segments(str(data_dir / "store" / "commitlog"))
    out = bytearray()
    for start, path in segments:
        if start != len(out):
            break
        with open(path, "rb") as f:
            while True:
                head = f.read(8)
                if len(head) < 8:
                    break
                total, magic = struct.unpack(">ii", head)
                if magic not in (MAGIC_V1, MAGIC_V2) or total <= 8:
                    break
                record = head + f.read(total - 8)
                try:
                    decode(record)
                except (DecodeError, struct.error, ValueError):
                    break
                out += record
        if len(segments) == 1:
            break
    return bytes(out)
