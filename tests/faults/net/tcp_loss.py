"""TCP alone under the nemesis's packet loss: how long a Raft-like stream goes unanswered.

Two member namespaces (:class:`~tests.faults.net.netns.Net`), ``--loss`` of the packets
dropped each way at random (the ``loss`` fault's iptables rule, 20 %). Member 0 writes a
200-byte frame every ``1/--rate`` s on its connection to member 1, which answers each on
its own connection back (as a Raft leader's appends and a follower's acknowledgements
travel); both with the Raft transport's peer socket options
(:func:`raftlog.native.transport.peer_socket_options`: no Nagle, a 4 s TCP_USER_TIMEOUT,
thin-stream linear timeouts, the retransmission timeout kept within 50 ms-1 s) unless
``--plain``. A connection the kernel gives up on is dialled again, as the transport does.
Prints, as JSON: the frames, the answers, the connections lost, and the stretches with no
answer arriving (the longest, and how many over 1, 2, 3 and 5 s), which bound what Raft on
top can do: no commit without an answer.

    python -m tests.faults.net.tcp_loss [--seconds 60] [--rate 100] [--loss 0.2] [--plain]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from raftlog.native.transport import peer_socket_options
from tests.faults.net.netns import Net

PORT_FRAMES, PORT_ANSWERS = 7101, 7102
FRAME, ANSWER = 200, 20
DEAD_MS = 4000
_ROOT = Path(__file__).resolve().parents[3]


def _options(sock: socket.socket, plain: bool) -> socket.socket:
    if plain:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    else:
        peer_socket_options(sock, DEAD_MS)
    return sock


def _dial(addr: tuple[str, int], plain: bool, until: float) -> socket.socket | None:
    while time.monotonic() < until:
        try:
            sock = socket.create_connection(addr, timeout=1.0)
        except OSError:
            time.sleep(0.05)
            continue
        sock.settimeout(None)
        return _options(sock, plain)
    return None


def _accepting(port: int, plain: bool, on_conn: object) -> None:
    """Accept connections on ``port`` for ever, each read by ``on_conn(sock)`` in a thread."""
    srv = socket.create_server(("0.0.0.0", port))
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=on_conn, args=(_options(conn, plain),), daemon=True).start()


def answerer(peer_ip: str, plain: bool, seconds: float) -> None:
    """Member 1: answer every frame, on a connection of its own to member 0 (dialled again
    when the kernel gives up on it)."""
    until = time.monotonic() + seconds
    out: list[socket.socket | None] = [None]
    lock = threading.Lock()

    def answer(seq: int) -> None:
        with lock:
            for _ in range(2):
                if out[0] is None:
                    out[0] = _dial((peer_ip, PORT_ANSWERS), plain, until)
                    if out[0] is None:
                        return
                try:
                    out[0].sendall(struct.pack(">Q", seq) + b"a" * (ANSWER - 8))
                    return
                except OSError:
                    out[0].close()
                    out[0] = None

    def read(conn: socket.socket) -> None:
        buf = b""
        with conn:
            while data := _recv(conn):
                buf += data
                while len(buf) >= FRAME:
                    answer(struct.unpack_from(">Q", buf)[0])
                    buf = buf[FRAME:]

    threading.Thread(target=_accepting, args=(PORT_FRAMES, plain, read), daemon=True).start()
    time.sleep(seconds)


def _recv(conn: socket.socket) -> bytes:
    try:
        return conn.recv(65536)
    except OSError:
        return b""


def sender(peer_ip: str, plain: bool, seconds: float, rate: float) -> dict[str, object]:
    """Member 0: a frame every 1/rate s, each answer's arrival noted."""
    arrivals: list[float] = []
    lock = threading.Lock()

    def read(conn: socket.socket) -> None:
        buf = b""
        with conn:
            while data := _recv(conn):
                buf += data
                while len(buf) >= ANSWER:
                    buf = buf[ANSWER:]
                    with lock:
                        arrivals.append(time.monotonic())

    threading.Thread(target=_accepting, args=(PORT_ANSWERS, plain, read), daemon=True).start()
    start = time.monotonic()
    until = start + seconds
    conn = _dial((peer_ip, PORT_FRAMES), plain, until)
    frames = lost = 0
    while conn is not None and time.monotonic() < until:
        try:
            conn.sendall(struct.pack(">Q", frames) + b"f" * (FRAME - 8))
            frames += 1
        except OSError:  # the kernel gave up on it (TCP_USER_TIMEOUT): dial again
            lost += 1
            conn.close()
            conn = _dial((peer_ip, PORT_FRAMES), plain, until)
            continue
        time.sleep(1.0 / rate)
    end = time.monotonic()
    with lock:
        times = [start, *arrivals, end]
    gaps = sorted(b - a for a, b in itertools.pairwise(times))
    return {
        "frames": frames,
        "answers": len(times) - 2,
        "connections_lost": lost,
        "longest_s": round(gaps[-1], 3) if gaps else None,
        **{f"over_{t}s": sum(g > t for g in gaps) for t in (1, 2, 3, 5)},
        "top_s": [round(g, 2) for g in gaps[-6:]],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests.faults.net.tcp_loss", description=__doc__)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=100.0, help="frames a second")
    p.add_argument("--loss", type=float, default=0.2, help="share of packets dropped each way")
    p.add_argument("--plain", action="store_true", help="the kernel's default TCP options")
    p.add_argument("--side", choices=["sender", "answerer"], help=argparse.SUPPRESS)
    p.add_argument("--peer", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.side == "answerer":
        answerer(args.peer, args.plain, args.seconds + 10)
        return 0
    if args.side == "sender":
        result = sender(args.peer, args.plain, args.seconds, args.rate)
        print(json.dumps(result), flush=True)
        return 0
    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    common = ["--seconds", str(args.seconds), *(["--plain"] if args.plain else [])]
    with Net(2) as net:
        net.cut(0, 1, one_way=True, probability=args.loss)
        net.cut(1, 0, one_way=True, probability=args.loss)
        me = [sys.executable, "-m", "tests.faults.net.tcp_loss"]
        answering = subprocess.Popen(
            [
                *net.exec_prefix(net.members[1]),
                *me,
                "--side",
                "answerer",
                "--peer",
                net.ips[0],
                *common,
            ],
            env=env,
            cwd=_ROOT,
        )
        try:
            out = subprocess.run(
                [
                    *net.exec_prefix(net.members[0]),
                    *(*me, "--side", "sender", "--peer", net.ips[1], *common),
                    *("--rate", str(args.rate)),
                ],
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
    result = {"loss": args.loss, "rate": args.rate, "seconds": args.seconds, "plain": args.plain}
    result.update(json.loads(out.stdout.strip().splitlines()[-1]))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
