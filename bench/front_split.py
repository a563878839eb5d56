"""What a local channel between a gRPC front process and the Raft core process would cost.

    python -m bench.front_split [--requests 200000] [--in-flight 64] [--size 300]

A design with gRPC fronts in several processes (``SO_REUSEPORT`` on the client port) feeding
one Raft core needs a hop per request between them. This measures the cheapest such hop in
Python: a Unix socket, length-prefixed frames, every frame read in one ``data_received`` call
answered in one write, requests written once per event-loop turn, both sides on uvloop. The
"front" here (this process) keeps ``--in-flight`` requests of ``--size`` bytes outstanding,
as 64 gRPC calls waiting for their commit would; the "core" (a child process) answers each
with an 8-byte revision. Prints the CPU per request of each side (``/proc``: user + system),
the cost the design adds on top of the fronts' own gRPC work; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

_HEADER = struct.Struct(">II")  # frame length (after the header), request id
_ANSWER = struct.Struct(">IIQ")  # length 12, request id, revision


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Core(asyncio.Protocol):
    """Answers every complete frame of a read in one write."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.revision = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        out = []
        pos, end = 0, len(buf)
        while end - pos >= 8:
            length, rid = _HEADER.unpack_from(buf, pos)
            if end - pos - 8 < length:
                break
            pos += 8 + length
            self.revision += 1
            out.append(_ANSWER.pack(12, rid, self.revision))
        del buf[:pos]
        if out:
            self.transport.write(b"".join(out))


async def _serve_core(path: str) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_unix_server(_Core, path)
    print("ready", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)  # until the front says stop
    server.close()


class _Front(asyncio.Protocol):
    """Requests written once per loop turn; answers resolve their waiters."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.waiters: dict[int, asyncio.Future[int]] = {}
        self.pending: list[bytes] = []
        self.next_id = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def request(self, body: bytes) -> asyncio.Future[int]:
        self.next_id += 1
        fut = asyncio.get_running_loop().create_future()
        self.waiters[self.next_id] = fut
        if not self.pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self.pending.append(_HEADER.pack(len(body), self.next_id) + body)
        return fut

    def _flush(self) -> None:
        self.transport.write(b"".join(self.pending))
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        pos, end = 0, len(buf)
        while end - pos >= 16:
            _, rid, revision = _ANSWER.unpack_from(buf, pos)
            pos += 16
            self.waiters.pop(rid).set_result(revision)
        del buf[:pos]


async def _run_front(path: str, requests: int, in_flight: int, size: int) -> tuple[float, int]:
    loop = asyncio.get_running_loop()
    _, front = await loop.create_unix_connection(_Front, path)
    body = b"x" * size
    left = requests

    async def one_client() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await front.request(body)

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(in_flight)))
    return time.perf_counter() - started, requests


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.front_split", description=__doc__)
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--in-flight", type=int, default=64)
    p.add_argument("--size", type=int, default=300, help="request bytes (a put's key+value)")
    p.add_argument("--core", metavar="PATH", help=argparse.SUPPRESS)  # the child's role
    args = p.parse_args(argv)
    import uvloop

    if args.core:
        uvloop.run(_serve_core(args.core))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "core.sock")
        core = subprocess.Popen(
            [sys.executable, "-m", "bench.front_split", "--core", path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert core.stdout is not None and core.stdin is not None
            if core.stdout.readline().strip() != "ready":
                raise SystemExit("the core process did not start")
            me = os.getpid()
            front0, core0 = _cpu_s(me), _cpu_s(core.pid)
            elapsed, n = uvloop.run(_run_front(path, args.requests, args.in_flight, args.size))
            front_us = (_cpu_s(me) - front0) / n * 1e6
            core_us = (_cpu_s(core.pid) - core0) / n * 1e6
            core.stdin.write("stop\n")
            core.stdin.flush()
            core.wait(timeout=10)
        finally:
            if core.poll() is None:
                core.kill()
                core.wait()
    print(
        f"{n} requests of {args.size} B, {args.in_flight} in flight: {n / elapsed:,.0f}/s; "
        f"CPU per request: front {front_us:.1f} us, core {core_us:.1f} us, "
        f"both {front_us + core_us:.1f} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
