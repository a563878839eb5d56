"""CPU and TCP counters from Linux ``/proc``, read by the load generator around its window.

Each reader returns None (or None per process) off Linux or when the file is gone, so a load
still runs and reports its own numbers without them.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Sequence

__all__ = [
    "connection_segments",
    "machine_busy_jiffies",
    "parse_snmp_tcp",
    "process_cpu_s",
    "tcp_info_segments",
    "tcp_segments",
]


def machine_busy_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies since boot from /proc/stat, or None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already inside user/nice
    return total - idle, total


def parse_snmp_tcp(text: str) -> dict[str, int]:
    """The ``Tcp:`` counters of a ``/proc/net/snmp`` text (a header line, then a value line)."""
    lines = [ln.split() for ln in text.splitlines() if ln.startswith("Tcp:")]
    if len(lines) < 2:
        return {}
    names, values = lines[0][1:], lines[1][1:]
    return {n: int(v) for n, v in zip(names, values, strict=True)}


def tcp_segments() -> tuple[int, int] | None:
    """(InSegs, OutSegs) of the machine's network namespace, or None off Linux."""
    try:
        with open("/proc/net/snmp") as f:
            tcp = parse_snmp_tcp(f.read())
        return tcp["InSegs"], tcp["OutSegs"]
    except (OSError, ValueError, KeyError):
        return None


#: ``struct tcp_info`` (linux/tcp.h): tcpi_segs_out and tcpi_segs_in follow 136 bytes of older
#: fields; kernels before 4.2 return a shorter struct.
_TCP_INFO_SEGS = struct.Struct("=II")
_TCP_INFO_SEGS_OFFSET = 136


def tcp_info_segments(info: bytes) -> tuple[int, int] | None:
    """(segments sent, segments received) from a ``TCP_INFO`` socket option value."""
    if len(info) < _TCP_INFO_SEGS_OFFSET + _TCP_INFO_SEGS.size:
        return None
    out, in_ = _TCP_INFO_SEGS.unpack_from(info, _TCP_INFO_SEGS_OFFSET)
    return out, in_


def connection_segments(ports: set[int]) -> tuple[int, int] | None:
    """(sent, received) segments summed over this process's TCP connections to ``ports``.

    gRPC owns the sockets; a dup of each descriptor reads the same kernel socket's counters.
    """
    if not hasattr(socket, "TCP_INFO"):
        return None
    sent = received = found = 0
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in fds:
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
        except (OSError, ValueError):
            continue
        try:
            if sock.type != socket.SOCK_STREAM or sock.getpeername()[1] not in ports:
                continue
            segs = tcp_info_segments(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256))
        except (OSError, IndexError, TypeError):
            continue
        finally:
            sock.close()
        if segs is not None:
            sent, received, found = sent + segs[0], received + segs[1], found + 1
    return (sent, received) if found else None


def process_cpu_s(pids: Sequence[int]) -> list[float | None]:
    """utime + stime of each process from /proc/<pid>/stat (None if it is gone or not Linux)."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out: list[float | None] = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out.append((int(fields[11]) + int(fields[12])) / ticks)
        except (OSError, ValueError, IndexError):
            out.append(None)
    return out
