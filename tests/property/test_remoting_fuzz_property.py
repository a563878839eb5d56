"""Fuzz of the remoting front (issue 14): random and hostile headers and bodies never
raise out of a handler or the connection, and never answer with Python's exception text.

Three layers: the handlers of every nameserver code on an in-memory node (random ext
fields, random JSON and random bytes as bodies, mutations of real bodies); the frame
decoder (random JSON headers, deep nesting, numbers of thousands of digits: a command or
a ProtocolError, nothing else); and a real server on loopback fed random frames, which
keeps serving a well-behaved client throughout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nameserver.remoting.headers import HEADERS
from nameserver.remoting.server import remoting_server
from rmq.codec import (
    BadRequest,
    ProtocolError,
    RemotingCommand,
    decode_frame,
    encode,
)
from rmq.codes import ResponseCode
from tests.unit.nameserver.routing.test_remoting import Front, answer
from tests.unit.rmq.test_server import Client

#: What Python's own exception texts look like; a remark must contain none of them. The
#: fuzzed strings are drawn without spaces and colons, so an echoed value cannot match.
PYTHON_TEXT = (
    "Traceback",
    "Error:",
    "Error(",
    "Exception",
    "object has no attribute",
    "object is not",
    "not subscriptable",
    "unhashable type",
    "invalid literal",
    "codec can't",
    "NoneType",
    "maximum recursion",
    "Exceeds the limit",
    "int_max_str_digits",
    "<class",
    "argument",
)
MAX_REMARK_CHARS = 4096

CODES = sorted(Front().table.handlers)
FIELD_NAMES = sorted(
    {f.metadata["ext"] for header in HEADERS.values() for f in dataclasses.fields(header)}  # type: ignore[arg-type]
)

words = st.text(
    alphabet=st.characters(blacklist_categories=["Zs", "Cc"], blacklist_characters=":"),
    max_size=12,
)
numbers = st.integers(min_value=-(2**70), max_value=2**70) | st.sampled_from(
    [0, 1, -1, 2**31, 2**63, -(2**63) - 1]
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | st.floats(allow_nan=False) | words,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(words, inner, max_size=4),
    max_leaves=12,
)
ext_values = (
    words
    | numbers.map(str)
    | st.sampled_from(["9" * 5000, "1_000", "\ud800", "true", "0", " 7 ", "١٢", "-"])
)
#: A value for each required header field, so most requests get past header decoding and
#: their bodies and the handlers' own checks are fuzzed too.
VALID_FIELDS = {
    "topic": "T1",
    "namespace": "ns",
    "key": "k",
    "value": "v",
    "brokerName": "broker-a",
    "brokerAddr": "127.0.0.1:10911",
    "clusterName": "DefaultCluster",
    "cluster": "DefaultCluster",
    "haServerAddr": "127.0.0.1:10912",
    "brokerId": "0",
}


@st.composite
def ext_fields(draw: st.DrawFn) -> dict[str, str]:
    fields = dict(VALID_FIELDS) if draw(st.booleans()) else {}
    for name in draw(st.lists(st.sampled_from(sorted(VALID_FIELDS)), max_size=2)):
        fields.pop(name, None)
    fields.update(
        draw(st.dictionaries(st.sampled_from(FIELD_NAMES) | words, ext_values, max_size=4))
    )
    return fields


def deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """Random bytes, random JSON, hostile JSON, and real body shapes with random parts."""
    kind = draw(st.integers(min_value=0, max_value=5))
    if kind == 0:
        return draw(st.binary(max_size=64))
    if kind == 1:
        return json.dumps(draw(json_values)).encode()
    if kind == 2:
        return draw(st.sampled_from([deep(50_000), b"1" * 5000, b'{"counter":' + b"9" * 4400]))
    if kind == 3:
        table = draw(st.dictionaries(words, json_values, max_size=3))
        wrapper = {"topicConfigTable": table, "dataVersion": draw(json_values)}
        obj: object = {
            "topicConfigSerializeWrapper": wrapper,
            "filterServerList": draw(json_values),
        }
        return json.dumps(obj).encode()
    if kind == 4:
        return json.dumps({"queueDatas": draw(json_values)}).encode()
    entry = draw(
        st.dictionaries(st.sampled_from(["brokerName", "readQueueNums", "perm"]), json_values)
    )
    return json.dumps({"queueDatas": [entry], "counter": draw(json_values)}).encode()


def assert_clean(remark: str | None) -> None:
    if remark is None:
        return
    assert len(remark) <= MAX_REMARK_CHARS, remark[:200]
    for marker in PYTHON_TEXT:
        assert marker not in remark, remark


@pytest.fixture(scope="module")
def front() -> Front:
    f = Front()
    from tests.remoting_client import register_request

    assert f(register_request("broker-a", "127.0.0.1:10911", ["T1", "T2"])).code == 0
    return f


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    code=st.sampled_from(CODES),
    fields=ext_fields(),
    body=bodies(),
    version=st.sampled_from([0, 401, 479]),
)
def test_handlers_answer_every_input_without_python_text(
    front: Front, code: int, fields: dict[str, str], body: bytes, version: int
) -> None:
    request = RemotingCommand(code=code, version=version, ext_fields=fields, body=body)
    logging.disable(logging.CRITICAL)  # expected failures log; not under test here
    try:
        reply = answer(front, request)
    except BadRequest as exc:  # answered SYSTEM_ERROR with this text by the server
        assert_clean(str(exc))
        return
    finally:
        logging.disable(logging.NOTSET)
    assert reply is not None
    assert reply.code != ResponseCode.SYSTEM_ERROR or reply.remark
    assert_clean(reply.remark)
    assert "internal error" not in (reply.remark or ""), reply.remark


def header_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


hostile_headers = st.sampled_from(
    [
        b'{"code":105,"extFields":{"topic":' + deep(100_000) + b"}}",
        b'{"code":105,"opaque":' + b"9" * 5000 + b"}",
        b'{"code":' + b"1" * 4400 + b"}",
        b'{"code":105,"remark":' + deep(5000) + b"}",
        b'{"code":105,"extFields":{"a":' + b"7" * 4301 + b"}}",
        b'{"code":105,"extFields":[]}',
        b'{"code":"\\ud800"}',
        b'{"code":105,"language":{}}',
        deep(200_000),
    ]
)
random_headers = st.builds(
    lambda obj: json.dumps(obj).encode(),
    st.dictionaries(
        st.sampled_from(["code", "opaque", "flag", "language", "version", "remark", "extFields"]),
        json_values,
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    header=hostile_headers | random_headers | st.binary(max_size=40), body=st.binary(max_size=20)
)
def test_frame_decoding_gives_a_command_or_a_protocol_error(header: bytes, body: bytes) -> None:
    frame = header_frame(header, body)[4:]
    try:
        command = decode_frame(frame)
    except ProtocolError as exc:
        assert len(str(exc)) < 400
        return
    assert isinstance(command, RemotingCommand)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    frames=st.lists(
        st.builds(
            header_frame,
            hostile_headers | random_headers,
            st.binary(max_size=20) | bodies(),
        )
        | st.builds(
            lambda code, fields, body: encode(
                RemotingCommand(code=code, ext_fields=fields, body=body)
            ),
            st.sampled_from(CODES),
            ext_fields().map(
                # a client can only send what it can encode: keys and values as UTF-8
                lambda d: {
                    k.encode("utf-8", "replace").decode(): v.encode("utf-8", "replace").decode()
                    for k, v in d.items()
                }
            ),
            bodies(),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_a_real_server_survives_random_frames(front: Front, frames: list[bytes]) -> None:
    async def main() -> None:
        server = remoting_server(front.table)
        await server.start("127.0.0.1", 0)
        try:
            fuzzed = await Client.connect(server.address)
            fuzzed.writer.write(b"".join(frames))
            # the random frames, then a sentinel: every answer until the sentinel's (or
            # until the server closes the connection for a broken frame) must be clean
            sentinel = RemotingCommand.request(999, opaque=-7)
            await fuzzed.send(sentinel, raw=b"")
            while True:
                try:
                    reply = await fuzzed.receive()
                except ConnectionError:
                    break
                assert_clean(reply.remark)
                if reply.opaque == -7 and reply.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    break
            fuzzed.close()
            good = await Client.connect(server.address)
            await good.send(RemotingCommand.request(206, opaque=1))
            answer = await good.receive()
            assert (answer.code, answer.opaque) == (0, 1)
            good.close()
        finally:
            await server.close()

    logging.disable(logging.CRITICAL)
    try:
        asyncio.run(main())
    finally:
        logging.disable(logging.NOTSET)
