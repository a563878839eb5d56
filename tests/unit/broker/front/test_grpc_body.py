"""GZIP-encoded bodies of 5.x producers (broker/grpc/body.py): a zlib stream (the Java client's
Deflater) is stored as it came with the COMPRESSED sysflag, gzip members (C#, Go) inflated;
what does not inflate, or inflates past the limit, is refused naming the field, nothing sent."""

from __future__ import annotations

import gzip
import zlib

import pytest

from broker.grpc.body import BadBody, stored_body
from broker.grpc.service import MessagingService
from protos.apache.rocketmq.v2 import definition_pb2 as v2
from rmq.message import SYSFLAG_COMPRESSED, inflate
from tests.unit.broker.front.test_grpc_service import FakeBackend, message, send

BODY = bytes(range(256)) * 3


def gz(body: bytes) -> bytes:
    return gzip.compress(body, mtime=0)  # no time in the header: the same bytes in every process


def test_identity_is_stored_as_it_came() -> None:
    assert stored_body(b"abc", v2.IDENTITY, "messages[0]", 10) == (b"abc", 0)
    assert stored_body(b"abc", v2.ENCODING_UNSPECIFIED, "messages[0]", 10) == (b"abc", 0)


def test_a_zlib_stream_is_stored_compressed_and_inflates_to_the_original() -> None:
    packed = zlib.compress(BODY, 5)
    body, flag = stored_body(packed, v2.GZIP, "messages[0]", 1024)
    assert (body, flag) == (packed, SYSFLAG_COMPRESSED)
    assert inflate(body, flag) == BODY  # what a 4.x consumer and the gRPC front do


def test_gzip_members_are_stored_inflated() -> None:
    assert stored_body(gz(BODY), v2.GZIP, "messages[0]", 1024) == (BODY, 0)
    two = gz(BODY[:100]) + gz(BODY[100:])  # as gzip.decompress, several members
    assert stored_body(two, v2.GZIP, "messages[0]", 1024) == (BODY, 0)


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        (b"not compressed at all", v2.MESSAGE_CORRUPTED, "not a zlib stream"),
        (gz(BODY)[:-9], v2.MESSAGE_CORRUPTED, "truncated"),
        (zlib.compress(BODY)[:-3], v2.MESSAGE_CORRUPTED, "truncated"),
        (zlib.compress(BODY) + b"tail", v2.MESSAGE_CORRUPTED, "after the end"),
        (gz(BODY) + b"tail", v2.MESSAGE_CORRUPTED, "after the end"),
        (b"\x1f\x8b" + b"\x00" * 20, v2.MESSAGE_CORRUPTED, "not a gzip stream"),
        (zlib.compress(b"\x00" * 1025), v2.MESSAGE_BODY_TOO_LARGE, "limit of 1024"),
        (gz(b"\x00" * 600) + gz(b"\x00" * 600), v2.MESSAGE_BODY_TOO_LARGE, "limit of 1024"),
        (gz(b""), v2.MESSAGE_BODY_EMPTY, "empty"),
    ],
)
def test_bad_compressed_bodies_are_refused_naming_the_field(
    body: bytes, code: int, words: str
) -> None:
    with pytest.raises(BadBody) as e:
        stored_body(body, v2.GZIP, "messages[2]", 1024)
    assert e.value.code == code
    assert "messages[2].body (body_encoding GZIP)" in str(e.value) and words in str(e.value)


def test_a_zlib_bomb_stops_at_the_limit() -> None:
    bomb = zlib.compress(b"\x00" * (64 << 20), 9)  # 64 MiB in about 64 KiB
    with pytest.raises(BadBody) as e:
        stored_body(bomb, v2.GZIP, "messages[0]", 4 << 20)
    assert e.value.code == v2.MESSAGE_BODY_TOO_LARGE


def test_an_unknown_encoding_is_unsupported() -> None:
    with pytest.raises(BadBody) as e:
        stored_body(b"x", 3, "messages[0]", 10)  # not in the v2 Encoding enum
    assert e.value.code == v2.UNSUPPORTED
    assert "messages[0].system_properties.body_encoding: 3" in str(e.value)


def test_the_service_sends_the_stored_body_and_its_sysflag() -> None:
    backend = FakeBackend()
    service = MessagingService(backend)
    zipped, gzipped = message(body=zlib.compress(BODY)), message(body=gz(BODY))
    zipped.system_properties.body_encoding = v2.GZIP
    gzipped.system_properties.body_encoding = v2.GZIP
    out = send(service, zipped, gzipped, message(body=b"plain"))
    assert [e.status.code for e in out.entries] == [v2.OK] * 3
    assert [s[1] for s in backend.sent] == [zlib.compress(BODY), BODY, b"plain"]
    assert backend.sys_flags == [SYSFLAG_COMPRESSED, 0, 0]


def test_the_service_refuses_a_corrupt_body_and_sends_nothing() -> None:
    backend = FakeBackend()
    bad = message(body=b"garbage")
    bad.system_properties.body_encoding = v2.GZIP
    out = send(MessagingService(backend), bad)
    assert out.status.code == v2.MESSAGE_CORRUPTED and "messages[0].body" in out.status.message
    assert backend.sent == []
