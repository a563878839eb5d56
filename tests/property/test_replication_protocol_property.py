"""Property tests of the RESP parser and the replica protocol (STYLE.md 13, issue 18): any
chunking of a byte stream gives the same events and offsets; garbage raises only the
protocol's own errors."""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.redis.errors import HandshakeError, ProtocolError
from replicator.redis.protocol import (
    Event,
    Phase,
    RdbChunk,
    ReplicaConfig,
    ReplicaProtocol,
)
from replicator.redis.resp import RespParser, RespValue, encode_command

DATA = Path(__file__).parents[1] / "unit" / "replicator" / "redis" / "data"
REPLID = b"0123456789abcdef0123456789abcdef01234567"
MARK = b"d23d682377be291cf9a7a03712dd2b713c23927b"
RDB = b"REDIS0010\xfa\x09redis-ver\x067.0.15\xff" + bytes(8) + MARK[:39] + b"\n\r\n"


def _synthetic(diskless: bool) -> bytes:
    """A session with every kind of thing the master sends: keepalive newlines before the
    reply and before the payload, a payload holding a near-mark, GETACK, PING, MULTI."""
    header = b"$EOF:" + MARK + b"\r\n" if diskless else b"$%d\r\n" % len(RDB)
    tail = MARK if diskless else b""
    stream = b"".join(
        encode_command(argv)
        for argv in (
            [b"SELECT", b"3"],
            [b"MULTI"],
            [b"SET", b"k\r\n", b"\x00" * 70],
            [b"EXEC"],
            [b"ping"],
            [b"REPLCONF", b"GETACK", b"*"],
            [b"RPUSH", b"l", *(b"%d" % i for i in range(40))],
        )
    )
    return (
        b"+PONG\r\n+OK\r\n\n\n+FULLRESYNC " + REPLID + b" 77\r\n\n" + header + RDB + tail + stream
    )


STREAMS = [
    (ReplicaConfig(), _synthetic(diskless=True)),
    (ReplicaConfig(), _synthetic(diskless=False)),
    (ReplicaConfig(listening_port=7777), (DATA / "diskless-7.0.15.bin").read_bytes()),
    (ReplicaConfig(listening_port=7777), (DATA / "disk-7.0.15.bin").read_bytes()),
]


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(set(cuts)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def run(config: ReplicaConfig, pieces: list[bytes]) -> tuple[list[Event], int]:
    p = ReplicaProtocol(config)
    events: list[Event] = []
    for piece in pieces:
        events += p.events(piece)
    out: list[Event] = []
    for e in events:  # chunk boundaries of the RDB may differ; its bytes may not
        if isinstance(e, RdbChunk) and out and isinstance(out[-1], RdbChunk):
            out[-1] = RdbChunk(out[-1].data + e.data)
        else:
            out.append(e)
    return out, p.offset


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(STREAMS))), st.data())
def test_any_chunking_gives_the_same_events_and_offsets(which: int, data: st.DataObject) -> None:
    config, wire = STREAMS[which]
    expected = run(config, [wire])
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(wire)), max_size=40))
    assert run(config, chunks(wire, cuts)) == expected


def test_byte_by_byte_is_the_same_too() -> None:
    for config, wire in STREAMS:
        assert run(config, [wire[i : i + 1] for i in range(len(wire))]) == run(config, [wire])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(list(Phase)), st.data())
def test_garbage_raises_only_protocol_errors(
    garbage: bytes, phase: Phase, data: st.DataObject
) -> None:
    config = STREAMS[0][0]
    p = ReplicaProtocol(config)
    prefix = {
        Phase.HANDSHAKE: b"",
        Phase.AWAIT_PSYNC_REPLY: b"+PONG\r\n+OK\r\n",
        Phase.RDB_PAYLOAD: b"+PONG\r\n+OK\r\n+FULLRESYNC " + REPLID + b" 0\r\n",
        Phase.COMMAND_STREAM: b"+PONG\r\n+OK\r\n+FULLRESYNC " + REPLID + b" 0\r\n$0\r\n",
    }[phase]
    p.events(prefix)
    assert p.phase is phase
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(garbage)), max_size=5))
    try:
        for piece in chunks(garbage, cuts):
            p.events(piece)
    except ProtocolError:
        pass
    except HandshakeError:
        # an error line is a refusal, legitimately, before the stream; never inside it
        assert phase is not Phase.COMMAND_STREAM


resp_values = st.recursive(
    st.none() | st.integers(-(2**63), 2**63 - 1) | st.binary(max_size=20) | st.booleans(),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=20,
)


def _encode(value: RespValue) -> bytes:
    if value is None:
        return b"_\r\n"
    if isinstance(value, bool):
        return b"#t\r\n" if value else b"#f\r\n"
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, bytes):
        return b"$%d\r\n%s\r\n" % (len(value), value)
    assert isinstance(value, list)
    return b"*%d\r\n" % len(value) + b"".join(_encode(v) for v in value)


@settings(max_examples=200, deadline=None)
@given(st.lists(resp_values, max_size=5), st.data())
def test_resp_any_chunking_parses_the_same(values: list[RespValue], data: st.DataObject) -> None:
    wire = b"".join(_encode(v) for v in values)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(wire)), max_size=20))
    p = RespParser()
    out: list[RespValue] = []
    for piece in chunks(wire, cuts):
        out += p.items(piece)
    assert out == values and p.consumed == len(wire)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_resp_garbage_raises_only_protocol_error(garbage: bytes) -> None:
    try:
        RespParser(max_depth=8, max_bulk_bytes=1000).items(garbage)
    except ProtocolError:
        pass
