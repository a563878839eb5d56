"""The delay fault's pieces without a kernel: the iptables rule and helper command line
(tests/faults/net/netns.py), the netfilter queue messages and the hold schedule
(tests/faults/net/nfq.py), and the nemesis choosing a delay from the seed."""

from __future__ import annotations

import random
import struct

import pytest

from tests.faults.net import nfq
from tests.faults.net.nemesis import FAULTS, delay
from tests.faults.net.netns import delay_helper_args, delay_rule


def test_the_rule_queues_one_source_and_lets_packets_through_without_a_helper() -> None:
    rule = delay_rule("10.77.1.12", queue=3)
    assert rule == (
        "-A", "INPUT", "-s", "10.77.1.12",
        "-j", "NFQUEUE", "--queue-num", "3", "--queue-bypass",
    )  # fmt: skip


def test_the_helper_is_bounded_and_seeded() -> None:
    args = delay_helper_args(100, 25, seed=9, max_s=30.0)
    assert args[:2] == ["-m", "tests.faults.net.nfqdelay"]
    flags = dict(zip(args[2::2], args[3::2], strict=True))
    assert flags == {
        "--queue": "0",
        "--delay-ms": "100",
        "--jitter-ms": "25",
        "--seed": "9",
        "--max-s": "30.0",
    }


def _header(msg: bytes) -> tuple[int, int, int, int]:
    length, kind, flags, seq, _pid = struct.unpack_from("=IHHII", msg)
    return length, kind, flags, seq


def test_bind_messages_bind_the_queue_metadata_only_and_fail_open() -> None:
    cmd, params = nfq.bind_messages(5, maxlen=1000)
    for seq, msg in enumerate((cmd, params), start=1):
        length, kind, flags, got_seq = _header(msg)
        assert length == len(msg) and length % 4 == 0
        assert kind == (nfq.NFNL_SUBSYS_QUEUE << 8) | nfq.NFQNL_MSG_CONFIG
        assert flags == nfq.NLM_F_REQUEST | nfq.NLM_F_ACK and got_seq == seq
        assert msg[16:20] == b"\0\0\0\x05"  # AF_UNSPEC, version 0, queue 5 big-endian
    # NFQA_CFG_CMD: bind
    assert cmd[20:28] == struct.pack("=HH", 8, nfq.NFQA_CFG_CMD) + bytes([1, 0, 0, 0])
    # NFQA_CFG_PARAMS: copy range 0, metadata only (9 bytes, padded to 12)
    assert params[20:32] == struct.pack("=HH", 9, nfq.NFQA_CFG_PARAMS) + b"\0\0\0\0\x01\0\0\0"
    assert struct.pack("=HH", 8, nfq.NFQA_CFG_QUEUE_MAXLEN) + struct.pack(">I", 1000) in params
    flags_attr = struct.pack("=HH", 8, nfq.NFQA_CFG_FLAGS) + struct.pack(">I", 5)
    assert params.endswith(flags_attr)  # fail open and GSO


def test_a_batch_verdict_accepts_up_to_an_id() -> None:
    msg = nfq.accept_up_to(2, 0x01020304)
    length, kind, flags, _ = _header(msg)
    assert length == len(msg) == 32
    assert kind == (nfq.NFNL_SUBSYS_QUEUE << 8) | nfq.NFQNL_MSG_VERDICT_BATCH
    assert flags == nfq.NLM_F_REQUEST
    assert msg[20:] == struct.pack("=HH", 12, nfq.NFQA_VERDICT_HDR) + bytes(
        [0, 0, 0, 1, 1, 2, 3, 4]
    )


def _packet(packet_id: int, extra_first: bool = False) -> bytes:
    hdr = struct.pack(">IHB", packet_id, 0x0800, 1)  # id, hw protocol, hook (7 bytes)
    attrs = b""
    if extra_first:  # NFQA_MARK before the header, with NLA_F_NET_BYTEORDER set
        attrs += struct.pack("=HH", 8, 3 | 0x4000) + b"\0\0\0\0"
    attrs += struct.pack("=HH", 4 + len(hdr), nfq.NFQA_PACKET_HDR) + hdr + b"\0"
    body = b"\x02\0\0\0" + attrs
    kind = (nfq.NFNL_SUBSYS_QUEUE << 8) | nfq.NFQNL_MSG_PACKET
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body


def test_packet_ids_are_read_from_one_or_several_messages() -> None:
    assert nfq.packet_ids(_packet(7)) == [7]
    assert nfq.packet_ids(_packet(7) + _packet(8, extra_first=True) + _packet(2**32 - 1)) == [
        7,
        8,
        2**32 - 1,
    ]
    ack = struct.pack("=IHHII", 36, nfq.NLMSG_ERROR, 0, 1, 0) + bytes(20)
    assert nfq.packet_ids(ack + _packet(9)) == [9]


def test_a_truncated_message_is_refused() -> None:
    with pytest.raises(ValueError, match="claims"):
        nfq.packet_ids(_packet(7)[:-4])


def test_acks_and_refusals() -> None:
    ok = struct.pack("=IHHII", 36, nfq.NLMSG_ERROR, 0, 2, 0) + struct.pack("=i", 0) + bytes(16)
    assert nfq.acks(ok) == [2]
    refused = struct.pack("=IHHII", 36, nfq.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", -1)
    with pytest.raises(nfq.NetlinkError) as err:
        nfq.acks(refused + bytes(16))
    assert err.value.errno == 1 and err.value.seq == 1


def test_hold_delays_each_packet_and_never_reorders() -> None:
    hold = nfq.Hold(0.1, 0.05, random.Random(1))
    arrivals = [(i, i * 0.01) for i in range(50)]
    for pid, at in arrivals:
        hold.arrive(pid, at)
    assert hold.most_held == 50 and hold.held == 50
    released: dict[int, float] = {}
    t, last_seen = 0.0, -1
    while (nxt := hold.next_at()) is not None:
        t = nxt
        last = hold.due(t)
        assert last is not None and last > last_seen
        for pid in range(last_seen + 1, last + 1):
            released[pid] = t
        last_seen = last
    assert sorted(released) == list(range(50))
    for pid, at in arrivals:
        assert 0.05 - 1e-9 <= released[pid] - at  # at least the delay less the jitter
    times = [released[pid] for pid in range(50)]
    assert times == sorted(times)
    assert max(r - at for (pid, at), r in zip(arrivals, times, strict=True)) <= 0.15 + 1e-9


def test_hold_without_jitter_releases_exactly_after_the_delay() -> None:
    hold = nfq.Hold(0.2, 0.0, random.Random(0))
    hold.arrive(1, 10.0)
    hold.arrive(2, 10.05)
    assert hold.due(10.19) is None
    assert hold.due(10.2) == 1
    assert hold.next_at() == pytest.approx(10.25)
    assert hold.release_all() == 2 and hold.next_at() is None and hold.release_all() is None


def test_hold_refuses_jitter_beyond_the_delay() -> None:
    with pytest.raises(ValueError):
        nfq.Hold(0.05, 0.1, random.Random(0))


class _RecordingNet:
    members = ["a", "b", "c"]

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int, int, int]] = []

    def delay(self, a: int, b: int, delay_ms: int, jitter_ms: int = 0, *, seed: int = 0) -> None:
        self.calls.append((a, b, delay_ms, jitter_ms, seed))


def test_the_nemesis_delays_every_pair_alike_from_the_seed() -> None:
    assert FAULTS["delay"] is delay
    net = _RecordingNet()
    text = delay(net, 0, random.Random(3))  # type: ignore[arg-type]
    pairs = [(a, b) for a, b, *_ in net.calls]
    assert pairs == [(0, 1), (0, 2), (1, 2)]
    assert len({c[2:] for c in net.calls}) == 1
    delay_ms, jitter_ms, _ = net.calls[0][2:]
    assert 50 <= delay_ms <= 150 and jitter_ms == delay_ms // 4
    assert f"delay {delay_ms} ms" in text
    again = _RecordingNet()
    delay(again, 0, random.Random(3))  # type: ignore[arg-type]
    assert again.calls == net.calls
