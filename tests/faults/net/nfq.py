"""The netfilter queue (NFQUEUE) messages the delay helper needs, and the schedule it holds
packets by: bytes in, packet ids out, no sockets (tests/faults/net/nfqdelay.py drives it).

An iptables rule ``-j NFQUEUE --queue-num Q`` hands each matching packet to the program
bound to queue Q over netlink (``NETLINK_NETFILTER``, subsystem ``NFNL_SUBSYS_QUEUE``); the
kernel holds the packet until that program sends a verdict for its id. The messages
(linux/netfilter/nfnetlink_queue.h): a config message binds the queue and sets its copy
mode (metadata only: the helper never reads a payload), length and flags (fail open: a
full queue or socket lets packets through instead of dropping them); a packet message
carries the packet's id in ``NFQA_PACKET_HDR``; a batch verdict accepts every packet of
the queue up to an id.

Netlink headers and attribute headers are in host byte order; what is inside the
netfilter structs (queue number, packet id, verdict) is big-endian.
"""

from __future__ import annotations

import random
import struct
from collections import deque
from collections.abc import Iterator

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 1, 2, 3
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_GSO = 0x1, 0x4
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NF_ACCEPT = 1
_NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_NLATTR = struct.Struct("=HH")  # len, type


def _attr(kind: int, payload: bytes) -> bytes:
    data = _NLATTR.pack(_NLATTR.size + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def _message(msg_type: int, queue: int, attrs: bytes, seq: int, flags: int) -> bytes:
    # nfgenmsg: family (AF_UNSPEC), version (NFNETLINK_V0), res_id (the queue, big-endian)
    body = struct.pack("=BB", 0, 0) + struct.pack(">H", queue) + attrs
    kind = (NFNL_SUBSYS_QUEUE << 8) | msg_type
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), kind, flags, seq, 0) + body


def bind_messages(queue: int, maxlen: int) -> list[bytes]:
    """The config messages (each asking for an acknowledgement, sequence 1, 2, ...) that
    bind ``queue`` to the sender, metadata only, ``maxlen`` packets, failing open."""
    flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO
    attrs = [
        _attr(NFQA_CFG_CMD, struct.pack(">BBH", NFQNL_CFG_CMD_BIND, 0, 0)),
        _attr(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META))
        + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", maxlen))
        + _attr(NFQA_CFG_MASK, struct.pack(">I", flags))
        + _attr(NFQA_CFG_FLAGS, struct.pack(">I", flags)),
    ]
    return [
        _message(NFQNL_MSG_CONFIG, queue, a, seq, NLM_F_REQUEST | NLM_F_ACK)
        for seq, a in enumerate(attrs, start=1)
    ]


def accept_up_to(queue: int, packet_id: int) -> bytes:
    """The batch verdict accepting every packet of ``queue`` whose id is ``packet_id`` or
    earlier."""
    attrs = _attr(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, packet_id))
    return _message(NFQNL_MSG_VERDICT_BATCH, queue, attrs, 0, NLM_F_REQUEST)


class NetlinkError(Exception):
    """The kernel refused a request: ``errno`` (positive) and the request's sequence."""

    def __init__(self, errno: int, seq: int) -> None:
        super().__init__(f"netlink request {seq} failed with errno {errno}")
        self.errno, self.seq = errno, seq


def _messages(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(type, seq, payload) of each netlink message in ``data``."""
    off = 0
    while off + _NLMSGHDR.size <= len(data):
        length, kind, _flags, seq, _pid = _NLMSGHDR.unpack_from(data, off)
        if length < _NLMSGHDR.size or off + length > len(data):
            raise ValueError(f"netlink message at {off} claims {length} bytes of {len(data)}")
        yield kind, seq, data[off + _NLMSGHDR.size : off + length]
        off += (length + 3) & ~3


def acks(data: bytes) -> list[int]:
    """The sequence numbers acknowledged in ``data``; raises :class:`NetlinkError` for a
    refusal."""
    out = []
    for kind, seq, payload in _messages(data):
        if kind == NLMSG_ERROR:
            (err,) = struct.unpack_from("=i", payload)
            if err:
                raise NetlinkError(-err, seq)
            out.append(seq)
    return out


def packet_ids(data: bytes) -> list[int]:
    """The ids of the packets queued to us in ``data`` (other messages are skipped)."""
    out = []
    for kind, _seq, payload in _messages(data):
        if kind != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            continue
        off = 4  # nfgenmsg
        while off + _NLATTR.size <= len(payload):
            alen, atype = _NLATTR.unpack_from(payload, off)
            if alen < _NLATTR.size:
                break
            if atype & _NLA_TYPE_MASK == NFQA_PACKET_HDR:
                out.append(struct.unpack_from(">I", payload, off + _NLATTR.size)[0])
                break
            off += (alen + 3) & ~3
    return out


class Hold:
    """When each queued packet goes: ``delay_s`` after it arrived, give or take up to
    ``jitter_s`` (uniform), but never before a packet that arrived earlier, so a flow is
    delayed, never reordered, and what is due is always a prefix (one batch verdict)."""

    def __init__(self, delay_s: float, jitter_s: float, rng: random.Random) -> None:
        if delay_s < 0 or not 0 <= jitter_s <= delay_s:
            raise ValueError(f"need 0 <= jitter_s <= delay_s, got {jitter_s}, {delay_s}")
        self.delay_s, self.jitter_s, self.rng = delay_s, jitter_s, rng
        self._queue: deque[tuple[float, int]] = deque()  # (release at, packet id)
        self._last_release = float("-inf")
        self.held = 0  # packets seen
        self.most_held = 0

    def arrive(self, packet_id: int, now: float) -> None:
        jitter = self.rng.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0
        self._last_release = max(self._last_release, now + self.delay_s + jitter)
        self._queue.append((self._last_release, packet_id))
        self.held += 1
        self.most_held = max(self.most_held, len(self._queue))

    def due(self, now: float) -> int | None:
        """The id of the last packet due by ``now`` (all before it are due too), taking
        them off; None when none is."""
        last = None
        while self._queue and self._queue[0][0] <= now:
            last = self._queue.popleft()[1]
        return last

    def next_at(self) -> float | None:
        """When the next packet is due (None: nothing is held)."""
        return self._queue[0][0] if self._queue else None

    def release_all(self) -> int | None:
        """The id of the last packet held (taking every one off), None when none is."""
        last = self._queue[-1][1] if self._queue else None
        self._queue.clear()
        return last
