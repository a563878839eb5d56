"""Out of descriptors on accept (issue 14): with the standard asyncio loop, a listener that
meets EMFILE logs one line now and then (no traceback per attempt) and accepts again once
descriptors come back. A real listener in a child process with RLIMIT_NOFILE at 48."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import REPO_ROOT, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.faults]

CHILD = """
import asyncio, logging, resource, sys
from nameserver import accept_errors
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
accept_errors.install()
resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

async def handle(reader, writer):
    data = await reader.read(4)
    if data == b"ping":
        writer.write(b"pong")
        await writer.drain()
    else:
        await reader.read()  # hold the descriptor until the client goes away
    writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


def ping(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"ping")
        return s.recv(4) == b"pong"


def test_a_listener_out_of_descriptors_logs_little_and_recovers(tmp_path: Path) -> None:
    log_path = tmp_path / "child.log"
    with open(log_path, "w") as log_file:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
        )
    clients: list[socket.socket] = []
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        for _ in range(120):  # far past the child's 48 descriptors
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            clients[-1].sendall(b"hold")
        wait_until(
            lambda: "out of system resource" in log_path.read_text(), 15, "the child hit EMFILE"
        )
        # asyncio pauses the listener 1 s per failed round: let it fail a few more rounds
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            time.sleep(0.1)
        for s in clients:
            s.close()
        clients.clear()
        wait_until(lambda: ping(port), 15, "the listener accepts again")
    finally:
        for s in clients:
            s.close()
        child.kill()
        child.communicate(timeout=10)
    err = log_path.read_text()
    accept_lines = [line for line in err.splitlines() if "out of system resource" in line]
    tracebacks = err.count("Traceback")  # (a count: a diff of a flood would take minutes)
    assert tracebacks == 0 and 1 <= len(accept_lines) <= 2, err[:3000]
