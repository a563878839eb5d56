"""What tests of ``metaledger serve --grpc-front go`` share: the front binary (built once
when it is missing; a build that fails fails the test with the script's output) and the
PIDs of the fronts a node started (from its log)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.harness import REPO_ROOT, Cluster

BINARY = REPO_ROOT / "front" / "bin" / "metaledger-front"
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build_front.sh"
GO_FRONT = ("--grpc-front", "go")

_STARTED = re.compile(rb"gRPC front pid (\d+) listening on ")


@pytest.fixture(scope="session")
def front_binary() -> Path:
    """The front binary, built by scripts/build_front.sh if it is not there."""
    if not os.access(BINARY, os.X_OK):
        built = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=600, check=False
        )
        if built.returncode != 0 or not os.access(BINARY, os.X_OK):
            pytest.fail(
                f"{BUILD_SCRIPT} exited {built.returncode}:\n{built.stdout}\n{built.stderr}"
            )
    return BINARY


def front_pids(cluster: Cluster, i: int) -> list[int]:
    """The fronts node ``i`` started since its last start, oldest first."""
    return [int(pid) for pid in _STARTED.findall(cluster.output_since_start(i))]


def is_front(pid: int) -> bool:
    """``pid`` is a live metaledger-front (not a zombie, not a reused PID)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rpartition(")")[2].split()[0]
    return b"metaledger-front" in cmdline and state != "Z"
