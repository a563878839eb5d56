"""TCP alone under the nemesis's packet loss: how long a Raft-like stream goes unanswered.

Two member namespaces (:class:`~tests.faults.net.netns.Net`), ``--loss`` of the packets
dropped each way at random (the ``loss`` fault's iptables rule, 20 %). Member 0 writes a
200-byte frame every ``1/--rate`` s on its connection to member 1, which answers each on
its own connection back (as a Raft leader's appends and a follower's acknowledgements
travel); both with the Raft transport's peer socket options
(:func:`raftlog.native.transport.peer_socket_options`: no Nagle, a 4 s TCP_USER_TIMEOUT,
thin-stream linear timeouts, the retransmission timeout kept within 50 ms-1 s) unless
``--plain``. Writes never block (asyncio); a connection the kernel gives up on is dialled
again, and the sender then writes again every frame not answered yet, as a Raft leader
resends what a follower has not acknowledged. Prints, as JSON: the frames, the answers, the
connections lost, and the stretches with no answer arriving (the longest, and how many over
1, 2, 3 and 5 s), which bound what Raft on top can do: no commit without an answer.

``--paths 2`` measures what a second path would buy: two connections each way, writes on
one until the kernel says it is stuck (``TCP_INFO``: data unacknowledged and no
acknowledgement for ``--stuck-ms``), then on the other, where the sender also writes again
every frame not answered yet.

    python -m tests.faults.net.tcp_loss [--seconds 60] [--rate 100] [--loss 0.2] [--plain]
        [--paths 2 --stuck-ms 300]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from raftlog.native.peer_socket import peer_socket_options
from raftlog.native.stall import tcp_state
from tests.faults.net.netns import Net

PORT_FRAMES, PORT_ANSWERS = 7101, 7102
FRAME, ANSWER = 200, 20
DEAD_MS = 4000
#: how often the sender looks for a stuck path even when it has nothing new to write
CHECK_S = 0.1
_ROOT = Path(__file__).resolve().parents[3]


class Paths:
    """``n`` connections to one address, each kept dialled; writes go to the current one,
    and move to the next that is up once the kernel says the current one is stuck."""

    def __init__(self, host: str, port: int, n: int, plain: bool, stuck_ms: int) -> None:
        self.host, self.port, self.plain, self.stuck_ms = host, port, plain, stuck_ms
        self.writers: list[asyncio.StreamWriter | None] = [None] * n
        self.current = 0
        self.lost = 0  # connections the kernel gave up on (or that failed)
        self.switches = 0
        self._last: asyncio.StreamWriter | None = None  # the connection written to last
        self._tasks = [asyncio.ensure_future(self._keep(i)) for i in range(n)]

    async def _keep(self, i: int) -> None:
        while True:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port), 1.0
                )
            except (OSError, TimeoutError):
                await asyncio.sleep(0.05)
                continue
            _options(writer, self.plain)
            self.writers[i] = writer
            try:
                await reader.read(1)  # the other side never writes: EOF or an error
            except OSError:
                pass
            self.writers[i] = None
            self.lost += 1
            writer.close()

    def _usable(self, i: int) -> bool:
        writer = self.writers[i]
        if writer is None:
            return False
        state = tcp_state(writer.get_extra_info("socket"))
        stuck = state is not None and state.unacked > 0 and state.last_ack_recv_ms >= self.stuck_ms
        return not (stuck and len(self.writers) > 1)

    def pick(self) -> None:
        """Make the current path a usable one if there is one."""
        if self._usable(self.current):
            return
        n = len(self.writers)
        for k in range(1, n):
            i = (self.current + k) % n
            if self._usable(i):
                self.current = i
                self.switches += 1
                return

    def refresh(self) -> bool:
        """:meth:`pick`; True if writes now go to another connection than the last one
        written to (a new path, or the same one dialled again): write again what was not
        answered."""
        self.pick()
        writer = self.writers[self.current]
        if writer is None or writer is self._last:
            return False
        fresh, self._last = self._last is not None, writer
        return fresh

    def write(self, data: bytes) -> bool:
        """Write ``data`` on the current path (dropped while none is up); True as
        :meth:`refresh` says."""
        changed = self.refresh()
        writer = self.writers[self.current]
        if writer is not None:
            writer.write(data)
        return changed

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for writer in self.writers:
            if writer is not None:
                writer.transport.abort()


def _options(writer: asyncio.StreamWriter, plain: bool) -> None:
    sock = writer.get_extra_info("socket")
    if plain:
        import socket

        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    else:
        peer_socket_options(sock, DEAD_MS)


async def _serve(port: int, plain: bool, size: int, on_record: Callable[[bytes], None]) -> None:
    """Accept on ``port``; every ``size``-byte record read from any connection goes to
    ``on_record``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _options(writer, plain)
        try:
            while True:
                on_record(await reader.readexactly(size))
        except (OSError, asyncio.IncompleteReadError):
            writer.close()

    await asyncio.start_server(handle, "0.0.0.0", port)


async def answerer(peer_ip: str, args: argparse.Namespace) -> None:
    """Member 1: answer every frame, on connections of its own to member 0."""
    out = Paths(peer_ip, PORT_ANSWERS, args.paths, args.plain, args.stuck_ms)
    await _serve(
        PORT_FRAMES, args.plain, FRAME, lambda frame: out.write(frame[:8] + b"a" * (ANSWER - 8))
    )
    await asyncio.sleep(args.seconds)


async def sender(peer_ip: str, args: argparse.Namespace) -> dict[str, object]:
    """Member 0: a frame every 1/rate s; an answer's arrival is noted once per frame."""
    arrivals: list[float] = []
    unanswered: dict[int, bytes] = {}

    def answered(answer: bytes) -> None:
        if unanswered.pop(struct.unpack_from(">Q", answer)[0], None) is not None:
            arrivals.append(time.monotonic())

    await _serve(PORT_ANSWERS, args.plain, ANSWER, answered)
    out = Paths(peer_ip, PORT_FRAMES, args.paths, args.plain, args.stuck_ms)
    start = time.monotonic()
    resent = frames = 0
    next_frame = next_check = start
    while (now := time.monotonic()) < start + args.seconds:
        if now >= next_frame:
            frame = struct.pack(">Q", frames) + b"f" * (FRAME - 8)
            unanswered[frames] = frame
            frames += 1
            next_frame += 1.0 / args.rate
            switched = out.write(frame)
        else:
            switched = now >= next_check and out.refresh()
        if now >= next_check:
            next_check = now + CHECK_S
        if switched:  # a fresh path: what was not answered goes again
            resent += len(unanswered)
            out.write(b"".join(unanswered.values()))
        await asyncio.sleep(max(0.0, min(next_frame, next_check) - time.monotonic()))
    end = time.monotonic()
    out.close()
    times = [start, *arrivals, end]
    gaps = sorted(b - a for a, b in itertools.pairwise(times))
    return {
        "frames": frames,
        "answered": len(arrivals),
        "connections_lost": out.lost,
        "switches": out.switches,
        "resent": resent,
        "longest_s": round(gaps[-1], 3),
        **{f"over_{t}s": sum(g > t for g in gaps) for t in (1, 2, 3, 5)},
        "top_s": [round(g, 2) for g in gaps[-6:]],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests.faults.net.tcp_loss", description=__doc__)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=100.0, help="frames a second")
    p.add_argument("--loss", type=float, default=0.2, help="share of packets dropped each way")
    p.add_argument("--plain", action="store_true", help="the kernel's default TCP options")
    p.add_argument("--paths", type=int, default=1, help="connections each way")
    p.add_argument("--stuck-ms", type=int, default=300, help="a path is stuck after this")
    p.add_argument("--side", choices=["sender", "answerer"], help=argparse.SUPPRESS)
    p.add_argument("--peer", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.side == "answerer":
        args.seconds += 10
        asyncio.run(answerer(args.peer, args))
        return 0
    if args.side == "sender":
        print(json.dumps(asyncio.run(sender(args.peer, args))), flush=True)
        return 0
    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    common = [
        *("--seconds", str(args.seconds), "--rate", str(args.rate), "--paths", str(args.paths)),
        *("--stuck-ms", str(args.stuck_ms), *(["--plain"] if args.plain else [])),
    ]
    me = [sys.executable, "-m", "tests.faults.net.tcp_loss", *common]
    with Net(2) as net:
        net.cut(0, 1, one_way=True, probability=args.loss)
        net.cut(1, 0, one_way=True, probability=args.loss)
        answering = subprocess.Popen(
            [*net.exec_prefix(net.members[1]), *me, "--side", "answerer", "--peer", net.ips[0]],
            env=env,
            cwd=_ROOT,
        )
        try:
            out = subprocess.run(
                [*net.exec_prefix(net.members[0]), *me, "--side", "sender", "--peer", net.ips[1]],
                env=env,
                cwd=_ROOT,
                capture_output=True,
                text=True,
                timeout=args.seconds + 60,
                check=True,
            )
        finally:
            answering.kill()
            answering.wait()
    result = {
        **{"loss": args.loss, "rate": args.rate, "seconds": args.seconds, "plain": args.plain},
        **{"paths": args.paths, "stuck_ms": args.stuck_ms if args.paths > 1 else None},
    }
    result.update(json.loads(out.stdout.strip().splitlines()[-1]))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
