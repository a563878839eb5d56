"""Property tests of the remoting codec (STYLE.md 13): any chunking of a valid frame
stream (JSON and binary headers mixed) decodes the same; garbage raises only ProtocolError;
fastjson bodies round-trip; typed headers read back what they wrote."""

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
from rmq.headers import PullMessageHeader, SendMessageHeader

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


# --- the binary ("ROCKETMQ") header, mixed with JSON frames in one stream -------------------

LANGUAGES = ["JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP"]
binary_commands = st.builds(
    RemotingCommand,
    code=st.integers(min_value=-(2**15), max_value=2**15 - 1),
    language=st.sampled_from(LANGUAGES),
    version=st.integers(min_value=-(2**15), max_value=2**15 - 1),
    opaque=int32,
    flag=st.integers(min_value=0, max_value=3),
    remark=st.none() | st.text(min_size=1, max_size=30),
    ext_fields=st.dictionaries(text, text, max_size=6),
    body=st.binary(max_size=300),
)


def encode_binary(c: RemotingCommand) -> bytes:
    """A frame with RocketMQ's binary header (``RocketMQSerializable.rocketMQProtocolEncode``),
    which C++ clients may send; the codec itself always writes JSON."""
    remark = (c.remark or "").encode()
    ext = b"".join(
        struct.pack(">h", len(k.encode()))
        + k.encode()
        + struct.pack(">i", len(v.encode()))
        + v.encode()
        for k, v in c.ext_fields.items()
    )
    header = (
        struct.pack(">hbhii", c.code, LANGUAGES.index(c.language), c.version, c.opaque, c.flag)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(ext))
        + ext
    )
    return (
        struct.pack(">ii", 4 + len(header) + len(c.body), 1 << 24 | len(header)) + header + c.body
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), commands, binary_commands), max_size=6), st.data())
def test_any_chunking_of_mixed_header_types_decodes_the_same(
    picks: list[tuple[bool, RemotingCommand, RemotingCommand]], data: st.DataObject
) -> None:
    cmds = [b if binary else j for binary, j, b in picks]
    stream = b"".join(
        encode_binary(c) if binary else encode(c)
        for (binary, _, _), c in zip(picks, cmds, strict=True)
    )
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    for piece in chunks(stream, data.draw(split_points(len(stream)))):
        decoder.receive_data(piece)  # the h11 pair of calls, as feed() makes them
        while isinstance(event := decoder.next_event(), RemotingCommand):
            out.append(event)
    assert out == cmds
    assert decoder.buffered_bytes == 0


# --- typed headers through the wire ----------------------------------------------------------

java_int = int32
java_long = st.integers(min_value=-(2**63), max_value=2**63 - 1)
utf8_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=150, deadline=None)
@given(
    st.builds(
        SendMessageHeader,
        producer_group=utf8_text,
        topic=utf8_text,
        queue_id=java_int,
        sys_flag=java_int,
        born_timestamp=java_long,
        flag=java_int,
        properties=utf8_text,
        reconsume_times=java_int,
        max_reconsume_times=st.none() | java_int,
        batch=st.booleans(),
    ),
    st.booleans(),
)
def test_send_headers_read_back_what_they_wrote_in_either_form(
    header: SendMessageHeader, v2: bool
) -> None:
    request = header.request_v2() if v2 else header.request()
    (decoded,) = FrameDecoder().feed(encode(request))
    assert SendMessageHeader.from_command(decoded) == header


@settings(max_examples=150, deadline=None)
@given(
    st.builds(
        PullMessageHeader,
        consumer_group=utf8_text,
        topic=utf8_text,
        queue_id=java_int,
        queue_offset=java_long,
        max_msg_nums=java_int,
        sys_flag=java_int,
        commit_offset=java_long,
        suspend_timeout_ms=java_long,
        sub_version=java_long,
        subscription=st.none() | utf8_text,
        expression_type=utf8_text,
    )
)
def test_pull_headers_read_back_what_they_wrote(header: PullMessageHeader) -> None:
    (decoded,) = FrameDecoder().feed(encode(header.request()))
    assert PullMessageHeader.from_command(decoded) == header
