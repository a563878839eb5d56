"""A TCP ping-pong between two member namespaces, to measure what a delay adds to a round
trip: ``serve`` echoes every byte back (until stopped, or ``--max-s``); ``ping`` connects
(retrying until ``--connect-s``), sends one byte at a time and prints each round trip's
milliseconds as one JSON list.

    ip netns exec NS1 python -m tests.faults.net.pingpong serve --listen IP:PORT
    ip netns exec NS0 python -m tests.faults.net.pingpong ping --to IP:PORT --count 10
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time


def _addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def serve(listen: str, max_s: float) -> None:
    with socket.create_server(_addr(listen)) as srv:
        srv.settimeout(max_s)
        deadline = time.monotonic() + max_s
        while time.monotonic() < deadline:
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(max(0.1, deadline - time.monotonic()))
                while data := conn.recv(64):
                    conn.sendall(data)


def ping(to: str, count: int, connect_s: float) -> list[float]:
    deadline = time.monotonic() + connect_s
    while True:
        try:
            conn = socket.create_connection(_addr(to), timeout=5.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # the server starting: retried until the deadline
    rtts = []
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            start = time.monotonic()
            conn.sendall(b"x")
            if conn.recv(1) != b"x":
                raise ConnectionError("the echo server closed the connection")
            rtts.append(round((time.monotonic() - start) * 1000, 2))
    return rtts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests.faults.net.pingpong", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--listen", required=True)
    s.add_argument("--max-s", type=float, default=60.0)
    g = sub.add_parser("ping")
    g.add_argument("--to", required=True)
    g.add_argument("--count", type=int, default=10)
    g.add_argument("--connect-s", type=float, default=10.0)
    args = p.parse_args(argv)
    if args.cmd == "serve":
        serve(args.listen, args.max_s)
    else:
        print(json.dumps(ping(args.to, args.count, args.connect_s)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
