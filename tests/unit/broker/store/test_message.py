"""The store encoding of one message: round trips and a byte-exact example."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store.errors import DecodeError, MessageTooLargeError
from broker.store.message import (
    MAGIC_V1,
    MAGIC_V2,
    MAX_BODY,
    Host,
    StoredMessage,
    body_crc,
    decode,
    decode_properties,
    dispatch_info,
    encode,
    encode_properties,
)

_prop_text = st.text(
    alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]),
    max_size=20,
)


def _same(a: StoredMessage, b: StoredMessage) -> None:
    assert dataclasses.replace(a, body_crc=b.body_crc) == b


@settings(max_examples=60, deadline=None)
@given(
    body=st.binary(max_size=600),
    topic=st.text(alphabet="abcXYZ_-%|0123456789", min_size=1, max_size=200),
    props=st.dictionaries(_prop_text.filter(bool), _prop_text, max_size=5),
    qid=st.integers(0, 2**31 - 1),
    qoff=st.integers(0, 2**63 - 1),
    ts=st.integers(0, 2**62),
)
def test_round_trip(
    body: bytes, topic: str, props: dict[str, str], qid: int, qoff: int, ts: int
) -> None:
    m = StoredMessage(
        topic=topic,
        body=body,
        queue_id=qid,
        queue_offset=qoff,
        physical_offset=qoff // 3,
        born_timestamp=ts,
        store_timestamp=ts + 1,
        born_host=Host("10.0.0.7", 5555),
        properties=props,
    )
    raw = encode(m)
    assert struct.unpack_from(">i", raw, 4)[0] == (MAGIC_V2 if len(topic) > 127 else MAGIC_V1)
    _same(m, decode(raw))


def test_all_byte_values_empty_and_4mib_bodies() -> None:
    for body in (bytes(range(256)) * 3, b"", bytes(range(256)) * (MAX_BODY // 256)):
        m = StoredMessage(topic="T", body=body, properties={"TAGS": "t", "KEYS": "k1 k2"})
        out = decode(encode(m))
        assert out.body == body
        assert out.body_crc == body_crc(body)


def test_unicode_properties_and_ipv6_hosts() -> None:
    props = {"KEYS": "ключ 鍵 🗝", "UNIQ_KEY": "ABC", "é": ""}
    m = StoredMessage(
        topic="T",
        body=b"x",
        born_host=Host("::1", 1),
        store_host=Host("fe80::2", 2),
        properties=props,
    )
    out = decode(encode(m))
    assert out.properties == props
    assert out.born_host == Host("::1", 1)
    assert out.sysflag == 0x30
    assert decode_properties(encode_properties(props)) == props


def test_byte_exact_layout() -> None:
    """research/broker.md §1: IPv4 V1 record, 91 + body + topic + props bytes, fields at the given offsets."""
    m = StoredMessage(
        topic="TopicA",
        body=b"hello",
        queue_id=3,
        flag=7,
        queue_offset=42,
        physical_offset=4096,
        born_timestamp=1_700_000_000_000,
        born_host=Host("192.168.0.1", 50000),
        store_timestamp=1_700_000_000_005,
        store_host=Host("10.1.2.3", 10911),
        reconsume_times=2,
        properties={"TAGS": "tagA"},
    )
    props = b"TAGS\x01tagA\x02"
    crc = 0x3610A686 & 0x7FFFFFFF  # zlib.crc32(b"hello") = 0x3610A686
    expected = (
        struct.pack(">i", 91 + 5 + 6 + len(props))
        + bytes.fromhex("DAA320A7")
        + struct.pack(">iiiqqiq", crc, 3, 7, 42, 4096, 0, 1_700_000_000_000)
        + bytes([192, 168, 0, 1])
        + struct.pack(">i", 50000)
        + struct.pack(">q", 1_700_000_000_005)
        + bytes([10, 1, 2, 3])
        + struct.pack(">i", 10911)
        + struct.pack(">iq", 2, 0)
        + struct.pack(">i", 5)
        + b"hello"
        + b"\x06TopicA"
        + struct.pack(">h", len(props))
        + props
    )
    raw = encode(m)
    assert raw == expected
    assert len(raw) == 112  # 91 + 5 + 6 + 10
    assert raw[84:88] == struct.pack(">i", 5)  # body length at 84 per the table
    assert raw[56:64] == struct.pack(">q", 1_700_000_000_005)  # STORETIMESTAMP at 56


def test_decode_rejects_bad_input() -> None:
    raw = encode(StoredMessage(topic="T", body=b"abc"))
    with pytest.raises(DecodeError, match="CRC"):
        decode(raw[:88] + b"x" + raw[89:])
    with pytest.raises(DecodeError, match="magic"):
        decode(raw[:4] + b"\0\0\0\0" + raw[8:])
    with pytest.raises(DecodeError):
        decode(raw[:-1])
    with pytest.raises(MessageTooLargeError):
        encode(StoredMessage(topic="T", body=b"\0" * (MAX_BODY + 1)))


@settings(max_examples=80, deadline=None)
@given(
    body=st.binary(max_size=300),
    topic=st.text(alphabet="abcXYZ_-%|0123456789", min_size=1, max_size=200),
    props=st.dictionaries(_prop_text.filter(bool), _prop_text, max_size=5),
    tags=st.one_of(st.none(), _prop_text),
    v6=st.booleans(),
)
def test_dispatch_info_reads_what_decode_reads(
    body: bytes, topic: str, props: dict[str, str], tags: str | None, v6: bool
) -> None:
    """The replication path's light read (no body copy, no CRC) agrees with decode on
    every field a consume-queue unit needs, for V1 and V2 topics, IPv4 and IPv6 hosts."""
    if tags is not None:
        props = {"XTAGS": "not these", **props, "TAGS": tags}
    host = Host("::1", 7) if v6 else Host("10.0.0.7", 7)
    m = StoredMessage(
        topic=topic, body=body, queue_id=3, queue_offset=11, physical_offset=99,
        born_host=host, store_host=host, properties=props,
    )  # fmt: skip
    raw = encode(m)
    info, full = dispatch_info(raw), decode(raw)
    assert (info.topic, info.queue_id, info.queue_offset, info.physical_offset, info.tags) == (
        full.topic,
        full.queue_id,
        full.queue_offset,
        full.physical_offset,
        full.tags,
    )
    assert dispatch_info(memoryview(raw)) == info
    for cut in (len(raw) - 1, 60):
        with pytest.raises(DecodeError):
            dispatch_info(raw[:cut])
