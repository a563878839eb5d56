"""rmq.message, rmq.batch, rmq.msgid: the stored record (round trips, a byte-exact example,
records back to back as a pull answer carries them, compressed bodies, IPv6 hosts, V2
topics), properties, batch bodies, message ids; garbage raises only rmq's own errors."""

from __future__ import annotations

import copy
import pickle
import struct
import subprocess
import sys
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq import batch, msgid
from rmq.batch import BatchItem, decode_batch, encode_batch
from rmq.codec import RemotingError
from rmq.message import (
    MAGIC_V1,
    MAGIC_V2,
    MAX_BODY,
    BadProperty,
    Host,
    MalformedMessage,
    MessageError,
    MessageTooLarge,
    StoredMessage,
    UnsupportedCompression,
    at_physical_offset,
    body_crc,
    checked_properties_text,
    decode,
    decode_properties,
    decode_records,
    dispatch_info,
    encode,
    encode_properties,
    parse_properties,
    peek_total,
    properties_text,
    property_value,
)
from rmq.properties import KeptProperties, keep
from tests.unit.rmq.records import ALL_BYTES, stored

_prop_text = st.text(
    alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]),
    max_size=20,
)


def _same(a: StoredMessage, b: StoredMessage) -> None:
    assert a._replace(body_crc=b.body_crc) == b


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
    with pytest.raises(MalformedMessage, match="CRC"):
        decode(raw[:88] + b"x" + raw[89:])
    with pytest.raises(MalformedMessage, match="magic"):
        decode(raw[:4] + b"\0\0\0\0" + raw[8:])
    with pytest.raises(MalformedMessage):
        decode(raw[:-1])
    with pytest.raises(MessageTooLarge):
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
        with pytest.raises(MalformedMessage):
            dispatch_info(raw[:cut])


# --- records back to back, as a pull answer carries them (moved from the replicator) ---------


def test_decodes_the_record_field_for_field() -> None:
    m = stored()
    [got] = decode_records(encode(m), inflate=True)
    assert (got.topic, got.queue_id, got.queue_offset, got.physical_offset) == ("T", 3, 41, 123456)
    assert got.body == ALL_BYTES
    assert (got.flag, got.sysflag, got.reconsume_times) == (7, 0, 2)
    assert (got.born_timestamp, got.store_timestamp) == (1_700_000_000_000, 1_700_000_000_123)
    assert got.properties == m.properties
    assert (got.tags, got.keys, got.msg_id) == ("tagA", "k1 k2", "AB12")


def test_many_records_back_to_back_in_order_with_every_body_shape() -> None:
    bodies = [ALL_BYTES, b"", bytes(reversed(ALL_BYTES)) * 40, b"\x00", b"\x01\x02" * 3]
    props = {"note": "δ ünïcode ✓ 日本", "中文键": "值", "empty": ""}
    msgs = [stored(b, queue_offset=i, properties=props) for i, b in enumerate(bodies)]
    got = decode_records(b"".join(encode(m) for m in msgs), inflate=True)
    assert [g.body for g in got] == bodies
    assert [g.queue_offset for g in got] == list(range(len(bodies)))
    assert all(g.properties == props for g in got)
    assert all(g.tags == "" and g.keys == "" for g in got)


def test_offset_message_id_without_uniq_key() -> None:
    [got] = decode_records(encode(stored(properties={})))
    # IPv4 10.1.2.3, port 10911 = 0x2A9F, commit-log offset 123456 = 0x1E240
    assert got.msg_id == "0A01020300002A9F000000000001E240"


def test_ipv6_hosts_and_v2_topic() -> None:
    topic = "t" * 200  # over 127 bytes: V2 magic, 2-byte topic length
    m = stored(topic=topic, born_host=Host("::1", 5), store_host=Host("fe80::2", 10911))
    [got] = decode_records(encode(m) + encode(stored()))[:1]
    assert got.topic == topic and got.body == ALL_BYTES
    assert got.sysflag & 0x30 == 0x30
    assert got.msg_id == "AB12"
    [bare] = decode_records(encode(stored(store_host=Host("fe80::2", 1), properties={})))
    assert bare.msg_id == ("FE80" + "0" * 27 + "2" + "00000001" + f"{123456:016X}")


@pytest.mark.parametrize("sys_flag", [0x1, 0x1 | (3 << 8), 0x1 | 0x2])
def test_compressed_bodies_are_inflated_when_asked(sys_flag: int) -> None:
    body = ALL_BYTES * 100
    raw = encode(stored(zlib.compress(body), sysflag=sys_flag))
    [got] = decode_records(raw, inflate=True)
    assert got.body == body
    assert got.sysflag == sys_flag  # as stored: the caller sees it was compressed
    assert got.body_crc == body_crc(zlib.compress(body))
    # the broker's reading: the stored bytes as they are
    assert decode(raw).body == decode_records(raw)[0].body == zlib.compress(body)
    assert decode(raw, inflate=True) == got


def test_lz4_zstd_and_broken_compression_are_refused() -> None:
    for kind in (1, 2):
        with pytest.raises(UnsupportedCompression, match="compression type"):
            decode_records(encode(stored(b"x", sysflag=0x1 | kind << 8)), inflate=True)
        assert decode(encode(stored(b"x", sysflag=0x1 | kind << 8))).body == b"x"
    with pytest.raises(MalformedMessage, match="inflate"):
        decode_records(encode(stored(b"not zlib", sysflag=0x1)), inflate=True)
    bomb = zlib.compress(bytes(65 * 1024 * 1024))
    with pytest.raises(MalformedMessage, match="inflates past"):
        decode(encode(stored(bomb, sysflag=0x1)), inflate=True)


def test_corrupt_records_are_malformed() -> None:
    raw = encode(stored())
    bad_crc = bytearray(raw)
    bad_crc[100] ^= 0xFF  # inside the body
    with pytest.raises(MalformedMessage, match="CRC"):
        decode_records(bytes(bad_crc))
    assert decode_records(bytes(bad_crc), check_crc=False)[0].body != ALL_BYTES
    with pytest.raises(MalformedMessage, match="magic"):
        decode_records(raw[:4] + b"\x00\x00\x00\x00" + raw[8:])
    for cut in (1, 47, 48, len(raw) - 1):
        with pytest.raises(MalformedMessage):
            decode_records(raw[:cut])
    with pytest.raises(MalformedMessage):
        decode_records(raw + raw[:60])
    too_long = (len(raw) + 5).to_bytes(4, "big") + raw[4:] + b"\x00" * 5
    with pytest.raises(MalformedMessage, match="TOTALSIZE"):
        decode_records(too_long)
    first = encode(stored(b"abc"))
    with pytest.raises(MalformedMessage, match=f"record at byte {len(first)}: bad magic"):
        decode_records(first + raw[:4] + b"\x00\x00\x00\x00" + raw[8:])
    assert decode_records(b"") == []


# --- every message, every property set, compressed or not -----------------------------------

_host = st.sampled_from([Host("10.0.0.7", 5555), Host("::1", 1), Host("fe80::2", 10911)])
_props = st.dictionaries(
    st.text(
        alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]),
        min_size=1,
        max_size=12,
    ),
    st.text(
        alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]),
        max_size=30,
    ),
    max_size=8,
)


@st.composite
def messages(draw: st.DrawFn) -> tuple[StoredMessage, bytes]:
    """(a message as stored, the body its producer sent)."""
    sent = draw(st.binary(max_size=2000))
    compressed = draw(st.booleans())
    sysflag = draw(st.sampled_from([0, 0x2, 0x4, 0x8, 0xC]))
    if compressed:
        sysflag |= 0x1 | draw(st.sampled_from([0, 3 << 8]))
    m = StoredMessage(
        topic=draw(st.text(alphabet="abcXYZ_-%|0123456789", min_size=1, max_size=300)),
        body=zlib.compress(sent) if compressed else sent,
        queue_id=draw(st.integers(-(2**31), 2**31 - 1)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        queue_offset=draw(st.integers(0, 2**63 - 1)),
        physical_offset=draw(st.integers(0, 2**63 - 1)),
        sysflag=sysflag,
        born_timestamp=draw(st.integers(0, 2**62)),
        born_host=draw(_host),
        store_timestamp=draw(st.integers(0, 2**62)),
        store_host=draw(_host),
        reconsume_times=draw(st.integers(0, 2**31 - 1)),
        prepared_tx_offset=draw(st.integers(-(2**63), 2**63 - 1)),
        properties=draw(_props),
    )
    return m, sent


def _v6_bits(m: StoredMessage) -> int:
    return (0x10 if m.born_host.v6 else 0) | (0x20 if m.store_host.v6 else 0)


@settings(max_examples=150, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=4))
def test_any_message_round_trips(pairs: list[tuple[StoredMessage, bytes]]) -> None:
    raws = [encode(m) for m, _ in pairs]
    for (m, sent), raw in zip(pairs, raws, strict=True):
        want = m._replace(sysflag=m.sysflag | _v6_bits(m), body_crc=body_crc(m.body))
        assert decode(raw) == want
        assert encode(decode(raw)) == raw  # and back to the same bytes
        assert decode(raw, inflate=True) == want._replace(body=sent)
        assert peek_total(raw) == (len(raw), MAGIC_V2 if len(m.topic) > 127 else MAGIC_V1)
        info = dispatch_info(raw)
        assert (info.topic, info.queue_offset, info.tags) == (m.topic, m.queue_offset, m.tags)
    together = b"".join(raws)
    assert decode_records(together) == [decode(raw) for raw in raws]
    assert [g.body for g in decode_records(together, inflate=True)] == [s for _, s in pairs]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 200), st.booleans())
def test_garbage_raises_only_message_errors(garbage: bytes, at: int, inflate: bool) -> None:
    raw = encode(stored(b"abc"))
    compressed = encode(stored(zlib.compress(b"abc"), sysflag=0x1))
    for data in (garbage, raw[:at] + garbage, raw + garbage, compressed[:at] + garbage):
        for read in (
            lambda d: decode_records(d, inflate=inflate),
            lambda d: decode(d, inflate=inflate),
            dispatch_info,
            decode_batch,
        ):
            try:
                read(data)
            except MessageError as exc:
                assert isinstance(exc, RemotingError) and not exc.closes_connection


def test_at_physical_offset_moves_only_that_field() -> None:
    raw = encode(stored())
    moved = at_physical_offset(raw, 99)
    assert decode(moved) == decode(raw)._replace(physical_offset=99)


# --- properties ------------------------------------------------------------------------------


@given(_props)
def test_properties_round_trip_in_every_form(props: dict[str, str]) -> None:
    text = properties_text(props)
    assert text.encode() == encode_properties(props)
    assert parse_properties(text) == decode_properties(text.encode()) == props
    assert checked_properties_text(props) == text
    for name, value in props.items():
        assert property_value(encode_properties(props), f"{name}\x01".encode()) == value


def test_properties_reading_skips_what_java_skips() -> None:
    assert parse_properties("a\x01b\x02\x02noval\x02\x01v\x02c\x01\x02d\x01e") == {
        "a": "b",
        "c": "",
        "d": "e",
    }
    assert property_value(b"XTAGS\x01no\x02TAGS\x01yes\x02", b"TAGS\x01") == "yes"
    assert property_value(b"KEYS\x01TAGS\x01\x02", b"TAGS\x01") == ""
    assert property_value(b"", b"TAGS\x01") == ""


def test_checked_properties_refuse_separators_and_empty_names() -> None:
    with pytest.raises(BadProperty, match="empty"):
        checked_properties_text({"": "x"})
    for bad in ({"a\x01": "x"}, {"a": "x\x02"}, {"a": "b", "c": "\x01"}):
        with pytest.raises(BadProperty, match="separator"):
            checked_properties_text(bad)


# --- batch bodies ----------------------------------------------------------------------------


@given(
    st.lists(
        st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=200), _props),
        min_size=1,
        max_size=5,
    )
)
def test_batch_round_trip(items: list[tuple[int, bytes, dict[str, str]]]) -> None:
    batch_items = [BatchItem(*it) for it in items]
    body = encode_batch(batch_items)
    assert decode_batch(body) == batch_items
    raw = [(it.flag, it.body, encode_properties(it.properties)) for it in batch_items]
    assert batch.encode_batch_raw(raw) == body
    assert len(body) == sum(batch.ITEM_OVERHEAD + len(b) + len(p) for _, b, p in raw)


def test_batch_byte_exact_and_refusals() -> None:
    body = encode_batch([BatchItem(5, b"hi", {"UNIQ_KEY": "U1"})])
    props = b"UNIQ_KEY\x01U1\x02"
    assert (
        body
        == struct.pack(">iiiii", 22 + 2 + len(props), 0, 0, 5, 2)
        + b"hi"
        + struct.pack(">h", len(props))
        + props
    )
    with pytest.raises(MalformedMessage, match="no message"):
        decode_batch(b"")
    with pytest.raises(MalformedMessage, match="cut inside its header"):
        decode_batch(body + b"\x00")
    with pytest.raises(MalformedMessage, match="inconsistent lengths"):
        decode_batch(body[:-1])
    with pytest.raises(MalformedMessage, match="not UTF-8"):
        decode_batch(body[:-3] + b"\xff\xfe\x02")
    assert batch.fits_batch(bytes(32767)) and not batch.fits_batch(bytes(32768))


def test_a_batch_items_properties_are_stored_as_they_came() -> None:
    """Each item's properties are kept: the record holds their bytes, in whatever form the
    producer wrote them (RocketMQ's broker copies them too), and reading the record gives the
    mapping the broker decided with. A mapping built any other way is encoded."""
    odd = b"A\x011\x02junk\x02A\x012\x02TAGS\x01t\x02KEYS\x01k1 k2"  # repeated, no separator
    body = batch.encode_batch_raw([(0, b"one", odd), (0, b"two", b"")])
    first, second = decode_batch(body)
    assert type(first.properties) is KeptProperties
    assert first.properties == {"A": "2", "TAGS": "t", "KEYS": "k1 k2"}
    assert first.properties.encoded == odd and second.properties.encoded == b""
    m = StoredMessage("T", first.body, properties=first.properties)
    record = encode(m)
    assert record.endswith(struct.pack(">h", len(odd)) + odd)
    back = decode(record)
    assert back.properties == first.properties and back.tags == "t" and back.keys == "k1 k2"
    plain = encode(m._replace(properties=dict(first.properties)))
    assert plain.endswith(encode_properties({"A": "2", "TAGS": "t", "KEYS": "k1 k2"}))
    assert decode(plain).properties == back.properties


def test_kept_properties_are_read_only_and_copy_whole() -> None:
    kept = keep({"A": "1"}, b"A\x011\x02")
    for change in (
        lambda p: p.__setitem__("A", "2"),
        lambda p: p.__delitem__("A"),
        lambda p: p.update(B="2"),
        lambda p: p.setdefault("B", "2"),
        lambda p: p.pop("A"),
        lambda p: p.popitem(),
        lambda p: p.clear(),
        lambda p: p.__ior__({"B": "2"}),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change(kept)
    assert kept == {"A": "1"} and kept.encoded == b"A\x011\x02"
    for twin in (copy.copy(kept), copy.deepcopy(kept), pickle.loads(pickle.dumps(kept))):
        assert type(twin) is KeptProperties and twin == kept and twin.encoded == kept.encoded
    changed = dict(kept)
    changed["A"] = "2"  # a change is a copy's, encoded anew
    assert encode_properties(changed) == b"A\x012\x02"


# --- message ids -----------------------------------------------------------------------------


def test_offset_message_id_from_text_or_packed_address() -> None:
    want = "0A01020300002A9F000000000001E240"
    assert msgid.offset_msg_id("10.1.2.3", 10911, 123456) == want
    assert msgid.offset_msg_id(bytes([10, 1, 2, 3]), 10911, 123456) == want
    assert msgid.offset_msg_id("::1", 1, 2) == "0" * 31 + "1" + "00000001" + "0" * 15 + "2"


def test_uniq_keys_are_32_hex_digits_and_new_each_time() -> None:
    keys = {msgid.uniq_key() for _ in range(1000)}
    assert len(keys) == 1000
    assert all(len(k) == 32 and k == k.upper() and int(k, 16) >= 0 for k in keys)


# --- sans I/O --------------------------------------------------------------------------------


def test_message_modules_are_sans_io_and_import_no_project_package() -> None:
    """STYLE.md 1, DESIGN.md §2: what rmq.message, rmq.batch and rmq.msgid import, all the
    way down, holds no socket, no asyncio and no other project package."""
    code = (
        "import sys, rmq.message, rmq.batch, rmq.msgid, rmq.properties; "
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        ).stdout.split()
    )
    assert "rmq" in loaded
    assert not loaded & {"socket", "asyncio", "selectors", "ssl", "protos", "grpc"}
    assert not loaded & {"broker", "replicator", "nameserver", "raftlog", "snapshots", "bench"}


def test_verify_record_checks_magic_totalsize_and_body_crc() -> None:
    from rmq.message import StoredMessage, encode, verify_record

    record = encode(StoredMessage(topic="T", body=b"hello body", properties={"TAGS": "a"}))
    verify_record(record)
    verify_record(b"xx" + record, 2, len(record))  # at a position, of a known size
    with pytest.raises(MalformedMessage, match="TOTALSIZE"):
        verify_record(record, 0, len(record) + 1)
    body_at = record.index(b"hello body")
    flipped = bytearray(record)
    flipped[body_at] ^= 1
    with pytest.raises(MalformedMessage, match="body CRC"):
        verify_record(bytes(flipped))
    with pytest.raises(MalformedMessage, match="magic"):
        verify_record(record[:4] + b"\0\0\0\0" + record[8:])
    with pytest.raises(MalformedMessage):
        verify_record(record[:-3])  # cut
