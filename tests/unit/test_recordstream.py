"""The record-stream format: header, frames, and how a reader tells torn tails from damage."""

from __future__ import annotations

import io
import struct

import crc32c
import pytest

from snapshots import (
    FRAME_OVERHEAD_BYTES,
    HEADER_BYTES,
    MAGIC,
    MAX_BODY_BYTES,
    BadHeaderError,
    CorruptRecordError,
    Record,
    RecordReader,
    RecordStreamError,
    StreamHeader,
    StreamKind,
    TornTailError,
    decode_header,
    encode_header,
    encode_record,
)

RECORDS = [(1, 0, b"alpha"), (1, 1, b""), (2, 0, b"x" * 300), (7, 3, bytes(range(256)))]


def stream(records: list[tuple[int, int, bytes]] = RECORDS, base: int = 1) -> bytes:
    return encode_header(StreamKind.CHANGE_LOG_SEGMENT, base) + b"".join(
        encode_record(*r) for r in records
    )


def frame_positions(records: list[tuple[int, int, bytes]] = RECORDS) -> list[int]:
    positions, pos = [], HEADER_BYTES
    for _, _, payload in records:
        positions.append(pos)
        pos += FRAME_OVERHEAD_BYTES + len(payload)
    return positions


def read_all(data: bytes, path: str | None = None) -> list[Record]:
    reader = RecordReader(data, path=path)
    reader.read_header()
    return list(reader)


# ---------------------------------------------------------------- header


def test_header_round_trip_and_layout() -> None:
    raw = encode_header(StreamKind.SNAPSHOT, 2**64 - 1)
    assert len(raw) == HEADER_BYTES == 36
    assert raw[:4] == MAGIC
    assert struct.unpack_from("<HHQ", raw, 4) == (1, 2, 2**64 - 1)
    assert raw[16:32] == bytes(16)
    assert struct.unpack_from("<I", raw, 32)[0] == crc32c.crc32c(raw[:32])
    assert decode_header(raw) == StreamHeader(1, StreamKind.SNAPSHOT, 2**64 - 1)
    assert decode_header(raw + b"trailing").base_offset == 2**64 - 1


def test_encode_header_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        encode_header(3, 0)
    with pytest.raises(ValueError):
        encode_header(StreamKind.SNAPSHOT, -1)


def _with_fields(version: int, kind: int) -> bytes:
    fixed = struct.pack("<4sHHQ16s", MAGIC, version, kind, 5, bytes(16))
    return fixed + struct.pack("<I", crc32c.crc32c(fixed))


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"XXXX" + encode_header(1, 5)[4:], "magic"),
        (encode_header(1, 5)[:8] + b"\x06" + encode_header(1, 5)[9:], "CRC"),
        (_with_fields(2, 1), "version 2"),
        (_with_fields(1, 9), "kind 9"),
    ],
)
def test_bad_header(raw: bytes, reason: str) -> None:
    with pytest.raises(BadHeaderError, match=reason) as info:
        decode_header(raw, "/data/x.seg")
    assert info.value.position == 0
    assert "/data/x.seg" in str(info.value)
    assert not info.value.repairable


def test_short_header_is_a_torn_tail() -> None:
    for cut in range(HEADER_BYTES):
        with pytest.raises(TornTailError) as info:
            decode_header(encode_header(1, 5)[:cut])
        assert info.value.position == 0
        with pytest.raises(TornTailError):
            RecordReader(encode_header(1, 5)[:cut]).read_header()


# ---------------------------------------------------------------- frames


def test_record_frame_layout() -> None:
    frame = encode_record(9, 2, b"payload")
    length, crc = struct.unpack_from("<II", frame)
    body = frame[8:]
    assert length == len(body) == 12 + 7
    assert crc == crc32c.crc32c(body)
    assert struct.unpack_from("<QI", body) == (9, 2)
    assert body[12:] == b"payload"


@pytest.mark.parametrize(("offset", "sub"), [(-1, 0), (2**64, 0), (0, -1), (0, 2**32)])
def test_encode_record_rejects_out_of_range(offset: int, sub: int) -> None:
    with pytest.raises(ValueError):
        encode_record(offset, sub, b"")


def test_encode_record_size_limit() -> None:
    payload = bytes(MAX_BODY_BYTES - 12)
    assert len(encode_record(0, 0, payload)) == 8 + MAX_BODY_BYTES
    with pytest.raises(ValueError, match="exceeds"):
        encode_record(0, 0, payload + b"!")


def test_round_trip_from_bytes_and_file_object() -> None:
    data = stream()
    expected = [
        Record(o, s, p, pos) for (o, s, p), pos in zip(RECORDS, frame_positions(), strict=True)
    ]
    assert read_all(data) == expected
    reader = RecordReader(io.BytesIO(data))
    assert reader.read_header() == StreamHeader(1, StreamKind.CHANGE_LOG_SEGMENT, 1)
    assert list(reader) == expected
    assert reader.position == len(data)
    assert reader.next_record() is None  # clean end, again
    assert [r.frame_bytes for r in expected] == [8 + 12 + len(p) for _, _, p in RECORDS]


def test_empty_stream_and_end_bound() -> None:
    assert read_all(stream([])) == []
    data = stream()
    positions = frame_positions()
    reader = RecordReader(data, end=positions[2])
    assert [r.offset for r in reader] == [1, 1]
    reader = RecordReader(data, start=positions[1])
    assert [(r.offset, r.sub) for r in reader] == [(1, 1), (2, 0), (7, 3)]
    reader = RecordReader(data)
    reader.seek(positions[3])
    assert [r.offset for r in reader] == [7]


def test_every_cut_inside_the_last_frame_is_a_torn_tail() -> None:
    data = stream()
    last = frame_positions()[-1]
    for cut in range(last + 1, len(data)):
        reader = RecordReader(data[:cut], path="seg")
        reader.read_header()
        got = []
        with pytest.raises(TornTailError) as info:
            for record in reader:
                got.append(record.offset)
        assert got == [1, 1, 2]
        assert info.value.position == last == reader.position
        assert info.value.repairable
        assert isinstance(info.value, RecordStreamError)


def test_garbage_length_past_the_end_is_a_torn_tail() -> None:
    data = stream() + struct.pack("<II", 0xFFFFFFFF, 0) + b"junk"
    with pytest.raises(TornTailError) as info:
        read_all(data)
    assert info.value.position == len(stream())


def test_oversized_length_inside_the_data_is_corruption() -> None:
    big = MAX_BODY_BYTES + 1
    data = stream() + struct.pack("<II", big, 0) + bytes(big)
    with pytest.raises(CorruptRecordError, match="exceeds") as info:
        read_all(data, "big.seg")
    assert info.value.position == len(stream())
    assert not info.value.repairable


@pytest.mark.parametrize(
    ("which", "byte"),
    [(0, 4), (0, 11), (0, 20), (1, 17), (2, 300), (3, 7)],  # crc, offset, payload, sub, ...
)
def test_flipped_bit_is_corruption_naming_file_and_position(which: int, byte: int) -> None:
    position = frame_positions()[which]
    data = bytearray(stream())
    data[position + byte] ^= 0x01
    with pytest.raises(CorruptRecordError) as info:
        read_all(bytes(data), "/data/log/00000000000000000001.seg")
    err = info.value
    assert err.position == position
    assert err.path == "/data/log/00000000000000000001.seg"
    assert str(err) == (
        f"/data/log/00000000000000000001.seg: corrupt record at byte {position}: CRC mismatch"
    )


def test_complete_last_frame_with_bad_crc_is_corruption_not_torn() -> None:
    data = bytearray(stream())
    data[-1] ^= 0x80
    with pytest.raises(CorruptRecordError) as info:
        read_all(bytes(data))
    assert info.value.position == frame_positions()[-1]


def test_body_too_short_for_offset_and_sub_is_corruption() -> None:
    body = b"\x01\x02\x03"
    data = stream() + struct.pack("<II", len(body), crc32c.crc32c(body)) + body
    with pytest.raises(CorruptRecordError, match="too short"):
        read_all(data)


def test_file_shorter_than_the_declared_end_is_a_torn_tail() -> None:
    data = stream()
    reader = RecordReader(io.BytesIO(data[:-3]), end=len(data))
    reader.read_header()
    with pytest.raises(TornTailError):
        list(reader)
