"""nameserver.grpc.front_wire: the Go front's frames, round trips and malformed input."""

from __future__ import annotations

import ast
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nameserver.grpc import front_wire
from nameserver.grpc.front_wire import (
    FrontProtocolError,
    FrontRequest,
    FrontResponse,
    RequestDecoder,
    ResponseDecoder,
    encode_request,
    encode_response,
)

texts = st.text(max_size=40)
trailer = st.one_of(
    st.tuples(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True), texts).filter(
        lambda kv: not kv[0].endswith("-bin")
    ),
    st.tuples(st.from_regex(r"[a-z]{1,8}-bin", fullmatch=True), st.binary(max_size=30)),
)
requests = st.builds(
    FrontRequest,
    call_id=st.integers(0, 2**32 - 1),
    method=st.integers(0, 5),
    timeout_ms=st.integers(0, 2**32 - 1),
    metadata=st.lists(trailer, max_size=4).map(tuple),
    peer=texts,
    payload=st.binary(max_size=300),
)
responses = st.builds(
    FrontResponse,
    call_id=st.integers(0, 2**32 - 1),
    code=st.integers(0, 16),
    details=texts,
    trailers=st.lists(trailer, max_size=4).map(tuple),
    payload=st.binary(max_size=300),
).map(lambda r: r._replace(payload=b"") if r.code else r)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@settings(max_examples=200, deadline=None)
@given(st.lists(requests, max_size=6), st.lists(st.integers(0, 10_000), max_size=8))
def test_requests_round_trip_in_any_chunking(sent: list[FrontRequest], cuts: list[int]) -> None:
    data = b"".join(
        encode_request(r.call_id, r.method, r.payload, r.timeout_ms, r.metadata, r.peer)
        for r in sent
    )
    decoder = RequestDecoder(methods=6)
    got: list[FrontRequest] = []
    for chunk in _chunks(data, cuts):
        decoder.receive_data(chunk)
        got.extend(decoder)
    assert got == sent
    assert decoder.pending == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(responses, max_size=6), st.lists(st.integers(0, 10_000), max_size=8))
def test_responses_round_trip_in_any_chunking(sent: list[FrontResponse], cuts: list[int]) -> None:
    data = b"".join(
        encode_response(r.call_id, r.code, r.details, r.trailers, r.payload) for r in sent
    )
    decoder = ResponseDecoder()
    got: list[FrontResponse] = []
    for chunk in _chunks(data, cuts):
        decoder.receive_data(chunk)
        got.extend(decoder)
    assert got == sent


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_raises_only_the_protocol_error(data: bytes) -> None:
    for decoder in (RequestDecoder(methods=3, max_body_bytes=1000), ResponseDecoder(1000)):
        decoder.receive_data(data)
        try:
            list(decoder)
        except FrontProtocolError:
            pass


def test_the_ok_frame_is_the_contracts_layout() -> None:
    frame = encode_response(7, payload=b"xyz")
    assert frame == struct.pack("<IIBHH", 12, 7, 0, 0, 0) + b"xyz"
    frame = encode_request(
        9, 2, b"P", timeout_ms=1500, metadata=(("token", "t"),), peer="ipv4:1.2.3.4:5"
    )
    body = struct.pack("<IBIH", 9, 2, 1500, 10) + b"\x05\x00token\x01\x00t"
    body += struct.pack("<H", 14)
    body += b"ipv4:1.2.3.4:5P"
    assert frame == struct.pack("<I", len(body)) + body


def test_an_error_response_carries_no_payload() -> None:
    decoder = ResponseDecoder()
    decoder.receive_data(encode_response(1, 5, "not found", payload=b"ignored"))
    assert decoder.next_response() == FrontResponse(1, 5, "not found", (), b"")


def _request(body: bytes) -> bytes:
    return struct.pack("<I", len(body)) + body


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        (_request(b"\x00" * 5), "shorter than its 13 bytes"),
        (struct.pack("<I", 10**9), "over the limit"),
        (_request(struct.pack("<IBIH", 1, 9, 0, 0) + b"\x00\x00"), "method index 9"),
        (_request(struct.pack("<IBIH", 1, 0, 0, 50) + b"\x00\x00"), "metadata of 50 bytes"),
        (_request(struct.pack("<IBIH", 1, 0, 0, 0) + b"\x09\x00"), "peer of 9 bytes"),
        (_request(struct.pack("<IBIH", 1, 0, 0, 1) + b"\xff\x00\x00"), "metadata: a key is cut"),
        (
            _request(struct.pack("<IBIH", 1, 0, 0, 5) + b"\x01\x00\xff\x00\x00\x00\x00"),
            "metadata: a key is not UTF-8",
        ),
    ],
)
def test_malformed_requests_say_what_is_wrong(frame: bytes, says: str) -> None:
    decoder = RequestDecoder(methods=3, max_body_bytes=1 << 20)
    decoder.receive_data(frame)
    with pytest.raises(FrontProtocolError, match=says):
        decoder.next_request()


def test_a_cut_trailer_is_refused() -> None:
    body = struct.pack("<IBH", 1, 0, 0) + struct.pack("<H", 3) + b"\x05\x00a"
    decoder = ResponseDecoder()
    decoder.receive_data(struct.pack("<I", len(body)) + body)
    with pytest.raises(FrontProtocolError, match="trailers: a key is cut"):
        decoder.next_response()


def test_a_partial_frame_waits_for_the_rest() -> None:
    frame = encode_request(3, 1, b"payload")
    decoder = RequestDecoder(methods=2)
    decoder.receive_data(frame[:-1])
    assert decoder.next_request() is None
    decoder.receive_data(frame[-1:] + frame[:2])
    assert decoder.next_request() == FrontRequest(3, 1, 0, (), "", b"payload")
    assert decoder.next_request() is None and decoder.pending == 2


def test_the_codec_does_no_io() -> None:
    tree = ast.parse(Path(front_wire.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert not imported & {"socket", "asyncio", "grpc"}
