"""HA frames (research/broker.md §6.3): layouts, incremental decoding, typed errors on bad bytes."""

from __future__ import annotations

import ast
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import broker.ha.protocol as protocol
from broker.ha.epochs import EpochEntry
from broker.ha.errors import HAProtocolError, OffsetMismatch
from broker.ha.protocol import (
    NEED_DATA,
    DataFrame,
    MasterHandshake,
    MasterStreamDecoder,
    SlaveAck,
    SlaveHandshake,
    SlaveStreamDecoder,
    encode_ack,
    encode_data,
    encode_master_handshake,
    encode_slave_handshake,
)

EPOCHS = (EpochEntry(1, 0), EpochEntry(3, 5000))


def _events(dec: SlaveStreamDecoder | MasterStreamDecoder, data: bytes, step: int) -> list[object]:
    out: list[object] = []
    for i in range(0, len(data), step):
        dec.receive_data(data[i : i + step])
        while (ev := dec.next_event()) is not NEED_DATA:
            out.append(ev)
    return out


def test_byte_layouts() -> None:
    assert encode_slave_handshake(SlaveHandshake(7, True, False)) == struct.pack(
        ">ihhq", 1, 1, 0, 7
    )
    assert len(encode_slave_handshake(SlaveHandshake(7))) == 16
    assert encode_ack(12345) == struct.pack(">iq", 2, 12345)
    hs = encode_master_handshake(9000, EPOCHS)
    assert hs == struct.pack(">iiqi", 1, 24, 9000, 3) + struct.pack(">iqiq", 1, 0, 3, 5000)
    frame = encode_data(DataFrame(5000, 3, 5000, 4000, b"abc"))
    assert frame == struct.pack(">iiqiqq", 2, 3, 5000, 3, 5000, 4000) + b"abc"
    assert len(encode_data(DataFrame(1, 1, 0, 0))) == 36


@pytest.mark.parametrize("step", [1, 5, 1000])
def test_slave_stream_whole_and_byte_by_byte(step: int) -> None:
    data = encode_slave_handshake(SlaveHandshake(2, False, True)) + encode_ack(0) + encode_ack(77)
    evs = _events(SlaveStreamDecoder(), data, step)
    assert evs == [SlaveHandshake(2, False, True), SlaveAck(0), SlaveAck(77)]


@pytest.mark.parametrize("step", [1, 7, 10_000])
def test_master_stream_tracks_the_offset(step: int) -> None:
    dec = MasterStreamDecoder()
    data = encode_master_handshake(9000, EPOCHS)
    dec.receive_data(data)
    assert dec.next_event() == MasterHandshake(9000, 3, EPOCHS)
    dec.start(100)
    stream = b"".join(
        [
            encode_data(DataFrame(100, 1, 0, 0, b"x" * 50)),
            encode_data(DataFrame(150, 1, 0, 0)),  # heartbeat: offset not checked
            encode_data(DataFrame(150, 1, 0, 120, b"y" * 9)),
        ]
    )
    evs = _events(dec, stream, step)
    assert [e.offset for e in evs if isinstance(e, DataFrame)] == [100, 150, 150]
    assert [e.is_heartbeat for e in evs if isinstance(e, DataFrame)] == [False, True, False]
    assert dec.offset == 159


def test_data_not_at_the_slave_end_is_an_offset_mismatch() -> None:
    dec = MasterStreamDecoder()
    dec.receive_data(encode_master_handshake(0, ()))
    assert dec.next_event() == MasterHandshake(0, 0, ())
    dec.start(10)
    dec.receive_data(encode_data(DataFrame(11, 1, 0, 0, b"z")))
    with pytest.raises(OffsetMismatch):
        dec.next_event()


@pytest.mark.parametrize(
    ("side", "data", "match"),
    [
        ("master", struct.pack(">ihhq", 2, 0, 0, 1), "state field 2"),
        ("master", struct.pack(">ihhq", 1, 2, 0, 1), "flags"),
        ("master", encode_slave_handshake(SlaveHandshake(1)) + struct.pack(">iq", 1, 5), "ack"),
        (
            "master",
            encode_slave_handshake(SlaveHandshake(1)) + struct.pack(">iq", 2, -5),
            "negative",
        ),
        ("slave", struct.pack(">iiqi", 1, 13, 0, 0), "body of 13"),
        ("slave", struct.pack(">iiqi", 2, 0, 0, 0), "state field 2"),
        ("slave", encode_master_handshake(10, EPOCHS), "past the master's end"),
        ("slave", encode_master_handshake(9000, EPOCHS[::-1]), "out of order"),
        (
            "slave",
            encode_master_handshake(0, ()) + struct.pack(">iiqiqq", 2, 1 << 30, 0, 1, 0, 0),
            "size",
        ),
    ],
)
def test_bad_frames_raise_the_typed_error(side: str, data: bytes, match: str) -> None:
    dec = SlaveStreamDecoder() if side == "master" else MasterStreamDecoder()
    dec.receive_data(data)
    with pytest.raises(HAProtocolError, match=match):
        for _ in range(3):
            dec.next_event()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 40), st.booleans())
def test_random_bytes_raise_only_the_protocol_error(data: bytes, step: int, master: bool) -> None:
    dec = SlaveStreamDecoder() if master else MasterStreamDecoder()
    if isinstance(dec, MasterStreamDecoder):
        dec.start(0)
    try:
        _events(dec, data, step)
    except HAProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 200), st.integers(1, 30))
def test_truncated_valid_streams_need_data_or_raise_the_typed_error(cut: int, step: int) -> None:
    good = encode_master_handshake(9000, EPOCHS) + encode_data(DataFrame(0, 1, 0, 0, b"q" * 40))
    dec = MasterStreamDecoder()
    dec.start(0)
    evs = _events(dec, good[:cut], step)
    assert len(evs) <= 2
    if cut < len(good):
        assert dec.next_event() is NEED_DATA


def test_the_parser_module_touches_no_sockets() -> None:
    tree = ast.parse(Path(protocol.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not names & {"socket", "asyncio", "selectors"}
