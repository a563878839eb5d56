"""Property tests of the remoting codec (STYLE.md 13): any chunking of a valid frame
stream decodes the same; garbage raises only ProtocolError; fastjson bodies round-trip."""

from __future__ import annotations

import itertools
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.codec import (
    FrameDecoder,
    MalformedFrame,
    ProtocolError,
    RemotingCommand,
    dumps_fastjson,
    encode,
    loads_lenient,
)

int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
text = st.text(max_size=30)

commands = st.builds(
    RemotingCommand,
    code=st.integers(min_value=0, max_value=2**31 - 1),
    language=st.sampled_from(["JAVA", "CPP", "PYTHON", "NODE_JS", "OTHER"]),
    version=st.integers(min_value=0, max_value=1000),
    opaque=int32,
    flag=st.integers(min_value=0, max_value=3),
    remark=st.none() | text,
    ext_fields=st.dictionaries(text, text, max_size=6),
    body=st.binary(max_size=300),
)


@st.composite
def split_points(draw: st.DrawFn, length: int) -> list[int]:
    cuts = draw(st.lists(st.integers(min_value=0, max_value=length), max_size=12))
    return sorted(set(cuts))


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=150, deadline=None)
@given(st.lists(commands, max_size=6), st.data())
def test_any_chunking_decodes_the_same(cmds: list[RemotingCommand], data: st.DataObject) -> None:
    stream = b"".join(encode(c) for c in cmds)
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    for piece in chunks(stream, data.draw(split_points(len(stream)))):
        out.extend(decoder.feed(piece))
    assert out == cmds
    assert decoder.buffered_bytes == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.data())
def test_garbage_raises_only_protocol_errors(garbage: bytes, data: st.DataObject) -> None:
    """Random bytes either wait for more data, decode to commands, or raise a
    ProtocolError: never another exception (which would take the server down)."""
    decoder = FrameDecoder(max_frame_bytes=1024)
    try:
        for piece in chunks(garbage, data.draw(split_points(len(garbage)))):
            for command in decoder.feed(piece):
                assert isinstance(command, RemotingCommand)
                assert all(isinstance(v, str) for v in command.ext_fields.values())
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([0, 1]))
def test_garbage_headers_in_a_valid_frame_raise_malformed_frame(
    header: bytes, serialize_type: int
) -> None:
    frame = struct.pack(">ii", 4 + len(header), serialize_type << 24 | len(header)) + header
    try:
        (command,) = FrameDecoder().feed(frame)
    except MalformedFrame:
        return
    assert isinstance(command, RemotingCommand)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1024 - 3, max_value=2**31 - 1), st.binary(max_size=64))
def test_oversized_frames_raise_before_buffering(length: int, tail: bytes) -> None:
    decoder = FrameDecoder(max_frame_bytes=1024)
    try:
        decoder.feed(struct.pack(">i", length) + tail)
    except ProtocolError as exc:
        assert exc.closes_connection
    else:
        raise AssertionError(f"a frame length of {length} was accepted")


json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=12)
fastjson_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(-1000, 1000), inner, max_size=4)
    ),
    max_leaves=20,
)


def stringify_keys(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): stringify_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [stringify_keys(v) for v in value]
    return value


@settings(max_examples=200, deadline=None)
@given(fastjson_values, st.booleans())
def test_fastjson_dialect_round_trips(value: object, standard: bool) -> None:
    # A dict may hold both 1 and "1": JSON keeps the last, and so does stringify_keys.
    expected = stringify_keys(value)
    assert loads_lenient(dumps_fastjson(value, standard=standard)) == expected
