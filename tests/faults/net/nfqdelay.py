"""The delay helper: binds a netfilter queue inside a member's namespace and lets each
packet queued to it go ``--delay-ms`` (give or take ``--jitter-ms``) after it came
(tests/faults/net/nfq.py: the messages and the schedule). This kernel has no ``netem``; the
iptables rule ``-j NFQUEUE --queue-num Q --queue-bypass`` (tests/faults/net/netns.py) sends
the packets here.

It never keeps a packet for good: on SIGTERM or SIGINT, and after ``--max-s`` at the
latest, it accepts everything it holds and exits; the rule's ``--queue-bypass`` lets
packets through while no program is bound (before it is ready, after it is gone), and the
queue fails open when full. It prints ``ready`` once bound, and on exit one line with how
many packets it held.

    ip netns exec NS python -m tests.faults.net.nfqdelay --queue 0 --delay-ms 100
"""

from __future__ import annotations

import argparse
import errno
import random
import select
import signal
import socket
import sys
import time
from types import FrameType

from tests.faults.net import nfq


class _Stop(Exception):
    pass


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def bind(sock: socket.socket, queue: int, maxlen: int) -> None:
    """Bind ``queue`` to ``sock``, waiting for the kernel's acknowledgement of each step."""
    for msg in nfq.bind_messages(queue, maxlen):
        sock.send(msg)
        if not nfq.acks(sock.recv(65536)):
            raise RuntimeError("no acknowledgement of a queue config message")


def serve(args: argparse.Namespace) -> int:
    hold = nfq.Hold(args.delay_ms / 1000, args.jitter_ms / 1000, random.Random(args.seed))
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, nfq.NETLINK_NETFILTER)
    # room for what arrives while we are busy (root may pass rmem_max); the queue fails
    # open when this overflows
    sock.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
    sock.bind((0, 0))
    bind(sock, args.queue, args.maxlen)
    sock.setblocking(False)
    deadline = time.monotonic() + args.max_s
    print("ready", flush=True)
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            last = hold.due(now)
            if last is not None:
                sock.send(nfq.accept_up_to(args.queue, last))
            nxt = hold.next_at()
            wait = deadline - now if nxt is None else min(deadline, nxt) - now
            readable, _, _ = select.select([sock], [], [], max(0.0, wait))
            while readable:
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    break
                except OSError as e:  # ENOBUFS: the socket overflowed (those went through)
                    if e.errno != errno.ENOBUFS:
                        raise
                    continue
                now = time.monotonic()
                for packet_id in nfq.packet_ids(data):
                    hold.arrive(packet_id, now)
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        last = hold.release_all()
        if last is not None:
            sock.setblocking(True)
            sock.send(nfq.accept_up_to(args.queue, last))
        sock.close()
    print(f"held {hold.held} packets, at most {hold.most_held} at once", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests.faults.net.nfqdelay", description=__doc__)
    p.add_argument("--queue", type=int, default=0)
    p.add_argument("--delay-ms", type=float, required=True)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--maxlen", type=int, default=8192, help="packets the kernel may hold")
    p.add_argument("--max-s", type=float, default=120.0, help="exit after this at the latest")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
