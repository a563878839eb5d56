"""The record-stream format: header, frames, what a reader reports at a bad frame, and the
verdict on it for a stream appended in place (torn tail or corruption, issue 14)."""

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
    find_valid_frame,
    tail_verdict,
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


def test_complete_last_frame_with_bad_crc_is_reported_as_such() -> None:
    """The reader reports what it sees; the verdict (torn tail: nothing follows) is
    tail_verdict's, below."""
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


# ---------------------------------------------------------------- torn tail or corruption


def verdict(data: bytes, follows: tuple[int, int] | None = None) -> RecordStreamError:
    """tail_verdict on the first error a reader reports in `data`, as a segment scan does."""
    reader = RecordReader(data, path="seg")
    try:
        reader.read_header()
        list(reader)
    except RecordStreamError as e:
        return tail_verdict(data, e, follows=follows)
    raise AssertionError("no bad frame")


def test_every_cut_inside_the_last_frame_is_a_torn_tail_verdict() -> None:
    data = stream()
    last = frame_positions()[-1]
    for cut in range(last + 1, len(data)):
        result = verdict(data[:cut])
        assert isinstance(result, TornTailError) and result.repairable
        assert (result.position, result.path) == (last, "seg")


@pytest.mark.parametrize("which", [0, 1, 2])
@pytest.mark.parametrize(("byte", "bit"), [(3, 7), (2, 0), (1, 4), (0, 0), (5, 2), (19, 1)])
def test_a_bad_frame_before_a_valid_one_is_corruption(which: int, byte: int, bit: int) -> None:
    """A flipped length (past the end, past MAX_BODY_BYTES, or within the data), CRC or
    body in any frame but the last: the next frame is valid, so this is not a torn tail."""
    positions = frame_positions()
    data = bytearray(stream())
    data[positions[which] + byte] ^= 1 << bit
    result = verdict(bytes(data))
    assert isinstance(result, CorruptRecordError) and not result.repairable
    assert result.position == positions[which]
    assert result.reason.endswith(f"a valid frame follows at byte {positions[which + 1]}")
    assert str(result).startswith(f"seg: corrupt record at byte {positions[which]}: ")


def test_a_length_past_the_end_is_named_in_the_corruption() -> None:
    positions = frame_positions()
    data = bytearray(stream())
    data[positions[1] + 3] ^= 0x01  # + 16 MiB
    result = verdict(bytes(data))
    assert result.reason == (
        f"length {2**24 + 12} runs past the end of the data, "
        f"and a valid frame follows at byte {positions[2]}"
    )


@pytest.mark.parametrize(("byte", "bit"), [(3, 7), (2, 0), (0, 0), (4, 1), (9, 3), (30, 5)])
def test_any_bad_last_frame_is_a_torn_tail(byte: int, bit: int) -> None:
    data = bytearray(stream())
    last = frame_positions()[-1]
    data[last + byte] ^= 1 << bit
    result = verdict(bytes(data))
    assert isinstance(result, TornTailError) and result.position == last
    assert result.reason.endswith("; no valid frame follows")


def test_zeros_to_the_end_are_a_torn_tail_and_zeros_before_a_frame_are_not() -> None:
    positions = frame_positions()
    data = stream()
    assert isinstance(verdict(data + bytes(100_000)), TornTailError)
    holed = data[: positions[1]] + bytes(positions[3] - positions[1]) + data[positions[3] :]
    result = verdict(holed)
    assert isinstance(result, CorruptRecordError)
    assert (result.position, result.reason) == (
        positions[1],
        f"body of 0 bytes is too short, and a valid frame follows at byte {positions[3]}",
    )


def test_a_valid_frame_must_follow_the_last_good_key() -> None:
    data = stream()
    old = encode_record(1, 0, b"alpha")  # a copy of the first record
    torn = data + struct.pack("<II", 99, 0) + b"\x05" * 7 + old
    assert isinstance(verdict(torn), CorruptRecordError)  # no key given: any frame counts
    assert isinstance(verdict(torn, follows=(7, 3)), TornTailError)
    newer = torn + encode_record(7, 4, b"later")
    assert isinstance(verdict(newer, follows=(7, 3)), CorruptRecordError)


def test_header_verdicts() -> None:
    data = stream()
    zeroed = bytes(HEADER_BYTES) + data[HEADER_BYTES:]
    result = verdict(zeroed)
    assert isinstance(result, BadHeaderError) and result.position == 0
    assert result.reason.endswith(f"a valid frame follows at byte {HEADER_BYTES}")
    assert isinstance(verdict(bytes(HEADER_BYTES + 500)), TornTailError)
    assert isinstance(verdict(data[:20]), TornTailError)  # a header cut short
    garbage = b"\x01" + bytes(HEADER_BYTES + 500)  # not zeros: not a torn header
    result = verdict(garbage)
    assert isinstance(result, BadHeaderError) and "magic" in result.reason


def test_find_valid_frame_on_bytes_and_files_and_within_end() -> None:
    positions = frame_positions()
    data = stream()
    for source in (data, io.BytesIO(data)):
        assert find_valid_frame(source, positions[0]) == positions[1]
        assert find_valid_frame(source, positions[1] - 1) == positions[1]
        assert find_valid_frame(source, positions[-1]) is None
        assert find_valid_frame(source, positions[1], end=positions[3]) == positions[2]
        assert find_valid_frame(source, positions[1], end=positions[3] - 1) is None
        assert find_valid_frame(source, 0, follows=(2, 0)) == positions[3]


def test_find_valid_frame_in_a_long_tail() -> None:
    """Past 16 MiB a length's high byte may be non-zero: those positions are looked at
    too; zero runs are skipped whole."""
    frame = encode_record(9, 0, b"found")
    tail = bytes(16 << 20) + b"\x01\x02\x03\x04" * (1 << 16) + bytes(1 << 20)
    data = b"\xff" + tail + frame
    assert find_valid_frame(data, 0) == 1 + len(tail)
    assert find_valid_frame(data + bytes(5), 0, follows=(9, 0)) is None
    big = encode_record(10, 0, bytes(17 << 20))  # a valid length with a high byte of 1
    assert find_valid_frame(b"\xff" * 7 + big, 0) == 7
