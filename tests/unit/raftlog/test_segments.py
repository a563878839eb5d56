"""Change-log segments: append, roll, read through the index, repair torn tails, refuse damage."""

from __future__ import annotations

import logging
import os
import struct
import time
from dataclasses import replace
from pathlib import Path

import pytest

from raftlog import SegmentConfig, SegmentCorruptionError, SegmentLog
from raftlog.errors import ConfigError, RaftLogError
from snapshots import FRAME_OVERHEAD_BYTES, HEADER_BYTES, RecordReader

SMALL = SegmentConfig(segment_max_bytes=1024, index_every_bytes=128, fsync_policy="never")

Rec = tuple[int, int, bytes]


def make_records(n: int, subs: int = 2, size: int = 40) -> list[Rec]:
    return [
        (offset, sub, f"{offset}/{sub}:".encode().ljust(size, b"."))
        for offset in range(1, n + 1)
        for sub in range(subs)
    ]


def append_all(log: SegmentLog, records: list[Rec]) -> None:
    for record in records:
        log.append(*record)


def read(log: SegmentLog, offset: int = 0) -> list[Rec]:
    return [(r.offset, r.sub, r.payload) for r in log.read_from(offset)]


def written(directory: Path, records: list[Rec], config: SegmentConfig = SMALL) -> SegmentLog:
    log = SegmentLog.open(directory, config)
    append_all(log, records)
    log.close()
    return log


def frame_position(path: Path, offset: int, sub: int) -> int:
    reader = RecordReader(path.read_bytes(), path=str(path))
    reader.read_header()
    return next(r.position for r in reader if (r.offset, r.sub) == (offset, sub))


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x04
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("segment_max_bytes", HEADER_BYTES),
        ("segment_max_bytes", "big"),
        ("index_every_bytes", 0),
        ("fsync_policy", "sometimes"),
        ("fsync_interval_ms", -1),
        ("fsync_interval_ms", True),
    ],
)
def test_config_validate_names_the_field(field: str, value: object) -> None:
    config = replace(SegmentConfig(), **{field: value})
    with pytest.raises(ConfigError) as info:
        config.validate()
    assert info.value.field == field
    assert str(info.value).startswith(field)
    assert isinstance(info.value, ValueError)


def test_open_validates_the_config(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="index_every_bytes"):
        SegmentLog.open(tmp_path, SegmentConfig(index_every_bytes=-5))


def test_defaults() -> None:
    config = SegmentConfig()
    config.validate()
    assert config == SegmentConfig(64 * 1024 * 1024, 4096, "batch", 5)


# ---------------------------------------------------------------- append and read


def test_empty_log(tmp_path: Path) -> None:
    with SegmentLog.open(tmp_path / "log", SMALL) as log:
        assert (log.first_offset, log.last_offset, log.last_offset_sub) == (0, 0, None)
        assert log.flushed_offset == 0
        assert read(log) == []
        assert log.segments() == []
    assert os.listdir(tmp_path / "log") == []


def test_round_trip_and_reopen(tmp_path: Path) -> None:
    records = make_records(5)
    with SegmentLog.open(tmp_path, SMALL) as log:
        append_all(log, records)
        assert read(log) == records  # read_from flushes what is buffered
        assert (log.first_offset, log.last_offset, log.last_offset_sub) == (1, 5, (5, 1))
    with SegmentLog.open(tmp_path, SMALL) as log:
        assert read(log) == records
        assert (log.first_offset, log.last_offset, log.flushed_offset) == (1, 5, 5)


def test_file_names_and_header(tmp_path: Path) -> None:
    written(tmp_path, [(42, 0, b"x")])
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000042.idx", "00000000000000000042.seg"]
    reader = RecordReader((tmp_path / "00000000000000000042.seg").read_bytes())
    assert reader.read_header().base_offset == 42


def test_order_is_enforced(tmp_path: Path) -> None:
    with SegmentLog.open(tmp_path, SMALL) as log:
        log.append(5, 1, b"a")
        log.append(5, 2, b"b")  # same offset, next sub
        log.append(5, 7, b"c")  # subs may skip
        for offset, sub in [(5, 7), (5, 0), (4, 9)]:
            with pytest.raises(ValueError, match="does not follow"):
                log.append(offset, sub, b"x")
        log.append(6, 0, b"d")
        with pytest.raises(ValueError):
            log.append(-1, 0, b"")
    with SegmentLog.open(tmp_path, SMALL) as log:  # order survives a restart
        with pytest.raises(ValueError, match="does not follow"):
            log.append(6, 0, b"again")
        log.append(6, 1, b"e")
        assert [(r.offset, r.sub) for r in log.read_from(0)] == [
            (5, 1),
            (5, 2),
            (5, 7),
            (6, 0),
            (6, 1),
        ]


def test_reopen_continues_appending(tmp_path: Path) -> None:
    records = make_records(30)
    written(tmp_path, records[:25])
    with SegmentLog.open(tmp_path, SMALL) as log:
        append_all(log, records[25:])
    with SegmentLog.open(tmp_path, SMALL) as log:
        assert read(log) == records
        assert log.last_offset_sub == records[-1][:2]


def test_closed_log_refuses_work(tmp_path: Path) -> None:
    log = SegmentLog.open(tmp_path, SMALL)
    log.append(1, 0, b"x")
    log.close()
    log.close()  # idempotent
    for call in (lambda: log.append(2, 0, b""), log.flush, log.sync, lambda: log.read_from(0)):
        with pytest.raises(ValueError, match="closed"):
            call()


# ---------------------------------------------------------------- rolling and the index


def test_rolling_and_read_from_across_segments(tmp_path: Path) -> None:
    records = make_records(60)
    with SegmentLog.open(tmp_path, SMALL) as log:
        append_all(log, records)
        infos = log.segments()
        assert len(infos) > 5
        assert [i.first_offset for i in infos] == sorted({i.first_offset for i in infos})
        assert all(i.size <= SMALL.segment_max_bytes for i in infos)
        assert [i.path.name for i in infos] == [f"{i.first_offset:020d}.seg" for i in infos]
        for offset in range(0, 63):
            assert read(log, offset) == [r for r in records if r[0] >= offset], offset
    assert [i.size for i in infos] == [i.path.stat().st_size for i in infos]


def test_same_offset_records_stay_in_the_segment_named_after_it(tmp_path: Path) -> None:
    records = [(7, sub, b"e" * 100) for sub in range(30)] + [(8, 0, b"f")]
    with SegmentLog.open(tmp_path, SMALL) as log:
        append_all(log, records)
        assert [i.first_offset for i in log.segments()] == [7, 8]
        assert read(log, 7) == records
        assert read(log, 8) == records[-1:]


def test_oversized_record_gets_its_own_segment(tmp_path: Path) -> None:
    records = [(1, 0, b"a"), (2, 0, b"b" * 5000), (3, 0, b"c")]
    with SegmentLog.open(tmp_path, SMALL) as log:
        append_all(log, records)
        assert [i.first_offset for i in log.segments()] == [1, 2, 3]
        assert read(log, 2) == records[1:]


def index_entries(path: Path) -> list[tuple[int, int]]:
    data = path.with_suffix(".idx").read_bytes()
    return [
        (int.from_bytes(data[i : i + 8], "little"), int.from_bytes(data[i + 8 : i + 16], "little"))
        for i in range(0, len(data), 16)
    ]


def test_index_entries_point_at_frames(tmp_path: Path) -> None:
    config = replace(SMALL, segment_max_bytes=1 << 20)
    records = make_records(40)
    written(tmp_path, records, config)
    [segment] = sorted(tmp_path.glob("*.seg"))
    entries = index_entries(segment)
    frame = FRAME_OVERHEAD_BYTES + 40
    # one entry per >= 128 bytes: every 3rd frame of 60 bytes, the first frame never
    frames = [HEADER_BYTES + frame * 3 * k for k in range(1, (len(records) - 1) // 3 + 1)]
    assert [p for _, p in entries] == frames
    assert [o for o, _ in entries] == [records[(p - HEADER_BYTES) // frame][0] for p in frames]


def test_read_from_seeks_through_the_index(tmp_path: Path) -> None:
    """Damage behind the index entry used for a seek is never read; reading from 0 finds it."""
    config = replace(SMALL, segment_max_bytes=1 << 20)
    records = make_records(40)
    with SegmentLog.open(tmp_path, config) as log:
        append_all(log, records)
        log.flush()
        [info] = log.segments()
        damaged = frame_position(info.path, 2, 0)
        flip(info.path, damaged + 10)  # after open's verification
        assert read(log, 30) == [r for r in records if r[0] >= 30]
        with pytest.raises(SegmentCorruptionError) as err:
            read(log, 0)
        assert err.value.position == damaged
        assert str(info.path) in str(err.value)


@pytest.mark.parametrize("damage", ["missing", "garbage", "stale"])
def test_index_is_rebuilt_on_open(tmp_path: Path, damage: str) -> None:
    records = make_records(40)
    written(tmp_path, records)
    idx = sorted(tmp_path.glob("*.idx"))[1]
    good = idx.read_bytes()
    assert good
    if damage == "missing":
        idx.unlink()
    elif damage == "garbage":
        idx.write_bytes(b"\xff" * 21)
    else:
        idx.write_bytes(good[:16])
    with SegmentLog.open(tmp_path, SMALL) as log:
        assert idx.read_bytes() == good
        for offset in range(0, 42, 3):
            assert read(log, offset) == [r for r in records if r[0] >= offset]


def test_orphan_index_is_removed(tmp_path: Path) -> None:
    written(tmp_path, [(1, 0, b"x")])
    (tmp_path / "00000000000000000099.idx").write_bytes(b"junk")
    SegmentLog.open(tmp_path, SMALL).close()
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000001.idx", "00000000000000000001.seg"]


# ---------------------------------------------------------------- repair on open


def test_torn_tail_is_truncated_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = make_records(40)
    written(tmp_path, records)
    last = sorted(tmp_path.glob("*.seg"))[-1]
    position = frame_position(last, *records[-1][:2])
    with open(last, "r+b") as f:
        f.truncate(position + 5)
    with caplog.at_level(logging.WARNING, logger="raftlog.segments"):
        log = SegmentLog.open(tmp_path, SMALL)
    assert "torn tail" in caplog.text and str(last) in caplog.text
    assert last.stat().st_size == position
    assert read(log) == records[:-1]
    assert log.last_offset_sub == records[-2][:2]
    log.append(*records[-1])  # the lost record is re-derived and appended again
    log.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING), SegmentLog.open(tmp_path, SMALL) as log:
        assert read(log) == records
    assert caplog.text == ""


def test_last_segment_without_a_whole_record_is_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = make_records(40)
    written(tmp_path, records)
    segments = sorted(tmp_path.glob("*.seg"))
    for cut in (HEADER_BYTES + 3, HEADER_BYTES, 10):
        with open(segments[-1], "r+b") as f:
            f.truncate(cut)
        with caplog.at_level(logging.WARNING), SegmentLog.open(tmp_path, SMALL) as log:
            assert not segments[-1].exists()
            assert not segments[-1].with_suffix(".idx").exists()
            dropped = segments[-1].name.split(".")[0]
            assert read(log) == [r for r in records if r[0] < int(dropped)]
            assert "removing the last segment" in caplog.text
            append_all(log, [r for r in records if r[0] >= int(dropped)])
        caplog.clear()


def test_flipped_bit_in_the_middle_names_file_and_position(tmp_path: Path) -> None:
    records = make_records(40)
    written(tmp_path, records)
    last = sorted(tmp_path.glob("*.seg"))[-1]
    reader = RecordReader(last.read_bytes())
    reader.read_header()
    middle, after = (r.position for r in list(reader)[1:3])
    flip(last, middle + 14)
    with pytest.raises(SegmentCorruptionError) as info:
        SegmentLog.open(tmp_path, SMALL)
    err = info.value
    assert (err.path, err.position) == (str(last), middle)
    assert str(err) == (
        f"{last}: corrupt change-log segment at byte {middle}: CRC mismatch, and a valid "
        f"frame follows at byte {after}; this member cannot start from its change log: stop "
        "it, wipe its data directory and let it rejoin from the other members "
        '(README, "Recovering a member")'
    )
    assert isinstance(err, RaftLogError)


def test_damage_in_an_older_segment_is_an_error(tmp_path: Path) -> None:
    written(tmp_path, make_records(40))
    first = sorted(tmp_path.glob("*.seg"))[0]
    flip(first, first.stat().st_size - 1)  # its last frame: whole, so not a torn tail
    with pytest.raises(SegmentCorruptionError, match=f"{first}.*byte"):
        SegmentLog.open(tmp_path, SMALL)


def test_torn_older_segment_is_an_error(tmp_path: Path) -> None:
    written(tmp_path, make_records(40))
    first = sorted(tmp_path.glob("*.seg"))[0]
    size = first.stat().st_size
    with open(first, "r+b") as f:
        f.truncate(size - 3)
    with pytest.raises(SegmentCorruptionError, match="not the last segment") as info:
        SegmentLog.open(tmp_path, SMALL)
    assert info.value.position == size - FRAME_OVERHEAD_BYTES - 40


def test_complete_last_frame_with_bad_crc_is_a_torn_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A power cut that wrote the last frame's header but not its data page (issue 14):
    nothing valid follows, so it was never synced; refusing to start would be wrong."""
    records = make_records(40)
    written(tmp_path, records)
    last = sorted(tmp_path.glob("*.seg"))[-1]
    position = frame_position_unchecked(last, -1)
    flip(last, last.stat().st_size - 1)
    with caplog.at_level(logging.WARNING), SegmentLog.open(tmp_path, SMALL) as log:
        assert read(log) == records[:-1]
    assert f"torn tail at byte {position} (CRC mismatch; no valid frame follows)" in caplog.text
    assert last.stat().st_size == position


def frame_position_unchecked(path: Path, index: int) -> int:
    """Frame positions found by walking the length fields alone (no CRC check)."""
    data = path.read_bytes()
    positions, pos = [], HEADER_BYTES
    while pos < len(data):
        positions.append(pos)
        pos += 8 + int.from_bytes(data[pos : pos + 4], "little")
    return positions[index]


def test_bad_header_is_an_error(tmp_path: Path) -> None:
    written(tmp_path, make_records(40))
    first = sorted(tmp_path.glob("*.seg"))[0]
    flip(first, 1)
    with pytest.raises(SegmentCorruptionError, match="magic") as info:
        SegmentLog.open(tmp_path, SMALL)
    assert info.value.position == 0


def test_header_must_match_the_file_name(tmp_path: Path) -> None:
    written(tmp_path, [(1, 0, b"x")])
    (tmp_path / "00000000000000000001.seg").rename(tmp_path / "00000000000000000002.seg")
    with pytest.raises(SegmentCorruptionError, match="file name"):
        SegmentLog.open(tmp_path, SMALL)


def test_records_out_of_order_across_segments_is_an_error(tmp_path: Path) -> None:
    written(tmp_path / "a", [(1, 0, b"x"), (5, 0, b"y")])
    written(tmp_path / "b", [(3, 0, b"z")])
    (tmp_path / "b" / "00000000000000000003.seg").rename(
        tmp_path / "a" / "00000000000000000003.seg"
    )
    with pytest.raises(SegmentCorruptionError, match=r"\(3, 0\) does not follow \(5, 0\)"):
        SegmentLog.open(tmp_path / "a", SMALL)


# ---------------------------------------------------------------- torn tail or corruption
# Issue 14: a bad frame of the last segment is a torn tail only when no valid frame
# starts after it (snapshots._tail); otherwise opening stops, naming file and byte.

ONE_SEGMENT = replace(SMALL, segment_max_bytes=1 << 20)


def five_records(tmp_path: Path) -> tuple[Path, list[Rec], list[int]]:
    """Five synced records in one segment: (path, records, frame positions)."""
    records = [(offset, 0, b"payload-%d" % offset * 4) for offset in range(1, 6)]
    written(tmp_path, records, replace(ONE_SEGMENT, fsync_policy="always"))
    [path] = sorted(tmp_path.glob("*.seg"))
    positions = [frame_position(path, offset, 0) for offset in range(1, 6)]
    return path, records, positions


@pytest.mark.parametrize(
    ("byte", "bit"),
    [(2, 4), (3, 7), (1, 0), (0, 0), (0, 5)],  # lengths 48: +1 MiB, past MAX, +256, +1, -32
)
def test_flipped_length_in_a_middle_frame_of_the_last_segment_is_corruption(
    tmp_path: Path, byte: int, bit: int
) -> None:
    """The reported case: a length that runs past the end of the file (or a shorter one)
    in frame 2 of 5 used to be cut as a torn tail, silently dropping records 2 to 5."""
    path, _, positions = five_records(tmp_path)
    before = path.read_bytes()
    data = bytearray(before)
    data[positions[1] + byte] ^= 1 << bit
    path.write_bytes(bytes(data))
    with pytest.raises(SegmentCorruptionError) as info:
        SegmentLog.open(tmp_path, ONE_SEGMENT)
    err = info.value
    assert (err.path, err.position) == (str(path), positions[1])
    assert f"a valid frame follows at byte {positions[2]}" in err.reason
    assert '"Recovering a member"' in str(err)
    assert path.read_bytes() == bytes(data)  # nothing was cut


def test_length_past_the_end_in_the_last_frame_is_a_torn_tail(tmp_path: Path) -> None:
    """Indistinguishable from a write cut short, and nothing valid follows: cut off."""
    path, records, positions = five_records(tmp_path)
    data = bytearray(path.read_bytes())
    data[positions[-1] + 2] ^= 0x10
    path.write_bytes(bytes(data))
    with SegmentLog.open(tmp_path, ONE_SEGMENT) as log:
        assert read(log) == records[:-1]
    assert path.stat().st_size == positions[-1]


def test_zeroed_page_with_a_valid_frame_after_it_is_corruption(tmp_path: Path) -> None:
    path, _, positions = five_records(tmp_path)
    data = bytearray(path.read_bytes())
    data[positions[1] : positions[2] + 10] = bytes(positions[2] + 10 - positions[1])
    path.write_bytes(bytes(data))
    with pytest.raises(SegmentCorruptionError) as info:
        SegmentLog.open(tmp_path, ONE_SEGMENT)
    assert info.value.position == positions[1]
    assert f"a valid frame follows at byte {positions[3]}" in info.value.reason


@pytest.mark.parametrize(
    "tail",
    [
        b"\x00" * 5000,  # space the file system extended but never filled
        struct.pack("<II", 60, 12345) + b"\x07" * 30,  # a frame cut short
        struct.pack("<II", 20, 12345) + bytes(20) + bytes(3000),  # its data page never written
        struct.pack("<II", 0xFFFF, 0) + os.urandom(700),  # a length past the end, then junk
    ],
    # ids that name the case, not its (random) bytes: every pytest-xdist worker collects the same
    ids=["zeros", "frame-cut-short", "data-page-unwritten", "length-past-the-end"],
)
def test_a_bad_frame_with_nothing_valid_after_it_is_a_torn_tail(
    tmp_path: Path, tail: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path, records, _ = five_records(tmp_path)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(tail)
    with caplog.at_level(logging.WARNING), SegmentLog.open(tmp_path, ONE_SEGMENT) as log:
        assert read(log) == records
        log.append(6, 0, b"re-derived")
    assert f"torn tail at byte {size}" in caplog.text
    with SegmentLog.open(tmp_path, ONE_SEGMENT) as log:
        assert read(log) == [*records, (6, 0, b"re-derived")]


def test_an_old_frame_after_a_torn_write_is_not_a_valid_frame(tmp_path: Path) -> None:
    """A whole frame after the bad one counts only if its key follows the last good key
    (records only go up): a copy of an older frame is junk of the torn write."""
    path, records, positions = five_records(tmp_path)
    data = path.read_bytes()
    old = data[positions[0] : positions[1]]
    with open(path, "ab") as f:
        f.write(struct.pack("<II", 500, 1) + b"\x01" * 8 + old)
    with SegmentLog.open(tmp_path, ONE_SEGMENT) as log:
        assert read(log) == records


def test_zeroed_header_of_the_last_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """All zeros (the first write of a new segment never reached the disk) is a torn tail
    unless frames follow; a header with other damage is always corruption."""
    records = make_records(40)
    written(tmp_path, records)
    segments = sorted(tmp_path.glob("*.seg"))
    last = segments[-1]
    data = last.read_bytes()
    last.write_bytes(bytes(HEADER_BYTES) + data[HEADER_BYTES:])
    with pytest.raises(SegmentCorruptionError, match="a valid frame follows") as info:
        SegmentLog.open(tmp_path, SMALL)
    assert (info.value.path, info.value.position) == (str(last), 0)
    last.write_bytes(b"\x01" + bytes(HEADER_BYTES + 100))  # not zeros: not a torn header
    with pytest.raises(SegmentCorruptionError, match="magic"):
        SegmentLog.open(tmp_path, SMALL)
    last.write_bytes(bytes(4096))
    with caplog.at_level(logging.WARNING), SegmentLog.open(tmp_path, SMALL) as log:
        assert not last.exists()
        assert read(log) == [r for r in records if r[0] < int(last.stem)]
    assert "removing the last segment" in caplog.text


def test_bad_frames_of_an_older_segment_are_corruption_whatever_follows(
    tmp_path: Path,
) -> None:
    written(tmp_path, make_records(40))
    first = sorted(tmp_path.glob("*.seg"))[0]
    data = first.read_bytes()
    last_frame = frame_position_unchecked(first, -1)
    first.write_bytes(data[:last_frame] + bytes(len(data) - last_frame))
    with pytest.raises(SegmentCorruptionError) as info:
        SegmentLog.open(tmp_path, SMALL)
    assert (info.value.path, info.value.position) == (str(first), last_frame)


def test_a_clean_open_never_searches_for_valid_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search costs a pass over the tail; it runs only after a bad frame."""
    import raftlog.segment_files

    def searched(*args: object, **kwargs: object) -> None:
        raise AssertionError("tail_verdict called on a clean scan")

    records = make_records(40)
    written(tmp_path, records)
    monkeypatch.setattr(raftlog.segment_files, "tail_verdict", searched)
    with SegmentLog.open(tmp_path, SMALL) as log:
        assert read(log) == records


# ---------------------------------------------------------------- truncate, delete


def test_truncate_after(tmp_path: Path) -> None:
    records = make_records(40)
    with SegmentLog.open(tmp_path, SMALL) as log:
        append_all(log, records)
        log.truncate_after(50)  # nothing past the end: no-op
        assert read(log) == records
        log.truncate_after(23)
        assert read(log) == [r for r in records if r[0] <= 23]
        assert log.last_offset_sub == (23, 1)
        assert log.flushed_offset == 23
        log.append(24, 0, b"new")
        assert read(log, 23) == [r for r in records if r[0] == 23] + [(24, 0, b"new")]
    with SegmentLog.open(tmp_path, SMALL) as log:
        assert read(log)[-1] == (24, 0, b"new")
        for seg in log.segments():
            assert index_entries(seg.path) == [
                e for e in index_entries(seg.path) if e[1] < seg.size
            ]


def test_truncate_after_every_offset(tmp_path: Path) -> None:
    records = make_records(12)
    for cut in range(0, 13):
        directory = tmp_path / str(cut)
        with SegmentLog.open(directory, SMALL) as log:
            append_all(log, records)
            log.truncate_after(cut)
            kept = [r for r in records if r[0] <= cut]
            assert read(log) == kept
            assert log.last_offset == cut
            append_all(log, [r for r in records if r[0] > cut])
        with SegmentLog.open(directory, SMALL) as log:
            assert read(log) == records


def test_delete_before(tmp_path: Path) -> None:
    records = make_records(40, subs=1)
    with SegmentLog.open(tmp_path, SMALL) as log:
        append_all(log, records)
        infos = log.segments()
        assert log.delete_before(infos[2].first_offset - 1) == 1
        assert log.delete_before(infos[2].first_offset) == 1
        assert log.first_offset == infos[2].first_offset
        assert not infos[0].path.exists() and not infos[0].path.with_suffix(".idx").exists()
        assert log.delete_before(10**6) == len(infos) - 3  # the active segment stays
        assert log.segments() == infos[-1:]
        assert read(log) == [r for r in records if r[0] >= infos[-1].first_offset]
        log.append(41, 0, b"more")
    with SegmentLog.open(tmp_path, SMALL) as log:
        assert log.first_offset == infos[-1].first_offset
        assert read(log)[-1] == (41, 0, b"more")


def test_delete_before_keeps_a_segment_sharing_an_offset_with_the_next(tmp_path: Path) -> None:
    records = (
        [(1, 0, b"a" * 600)] + [(2, sub, b"b" * 100) for sub in range(6)] + [(3, 0, b"c" * 1000)]
    )
    with SegmentLog.open(tmp_path, SMALL) as log:
        append_all(log, records)
        assert [i.first_offset for i in log.segments()] == [1, 2, 3]
        assert log.delete_before(2) == 0  # segment 1 also holds records of offset 2
        assert log.delete_before(3) == 2
        assert read(log) == records[-1:]


# ---------------------------------------------------------------- durability


def test_fsync_always(tmp_path: Path) -> None:
    with SegmentLog.open(tmp_path, replace(SMALL, fsync_policy="always")) as log:
        for offset, sub, payload in make_records(10):
            log.append(offset, sub, payload)
            assert log.flushed_offset == offset
            assert log.wait_flushed(offset, timeout_s=0)


def test_fsync_batch_group_commit(tmp_path: Path) -> None:
    records = make_records(30)
    log = SegmentLog.open(tmp_path, replace(SMALL, fsync_policy="batch", fsync_interval_ms=1))
    for record in records:
        log.append(*record)
    assert log.wait_flushed(30, timeout_s=10)
    assert log.flushed_offset == 30
    log.append(31, 0, b"x")
    assert log.wait_flushed(31, timeout_s=10)
    log.close()
    assert not log.wait_flushed(32, timeout_s=10)  # closed: returns at once
    with SegmentLog.open(tmp_path, SMALL) as reopened:
        assert reopened.last_offset == 31


def test_fsync_batch_wakes_an_idle_flusher(tmp_path: Path) -> None:
    """Once nothing is dirty the flusher waits for data, and an append wakes it (under load
    it finds new data when its interval ends, and appends wake no thread)."""
    log = SegmentLog.open(tmp_path, replace(SMALL, fsync_policy="batch", fsync_interval_ms=20))
    for offset in (1, 2, 3):
        deadline = time.monotonic() + 10
        while not log._flusher_idle:  # idle again after the last sync and its interval
            assert time.monotonic() < deadline, "the flusher did not go idle"
            time.sleep(0.001)
        log.append(offset, 0, b"x")
        assert log.wait_flushed(offset, timeout_s=10)
    log.close()


def test_fsync_never(tmp_path: Path) -> None:
    log = SegmentLog.open(tmp_path, replace(SMALL, segment_max_bytes=1 << 20))
    append_all(log, make_records(10))
    assert log.flushed_offset == 0
    assert not log.wait_flushed(10, timeout_s=0)
    log.flush()
    assert log.flushed_offset == 0
    log.sync()
    assert log.flushed_offset == 10
    log.append(11, 0, b"x")
    log.close()
    assert log.flushed_offset == 11


def test_roll_syncs_the_finished_segment(tmp_path: Path) -> None:
    with SegmentLog.open(tmp_path, SMALL) as log:
        append_all(log, make_records(40))
        second = log.segments()[1].first_offset
        assert log.flushed_offset >= second  # synced when the segment after it started


def test_failed_fdatasync_rolls_back_and_the_log_stays_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 14: a failed fdatasync under "always" is transient: the call leaves nothing
    behind, and the same record appends once the disk works again."""
    import raftlog.segments

    real = raftlog.segments.fdatasync

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    log = SegmentLog.open(tmp_path, replace(SMALL, fsync_policy="always"))
    log.append(1, 0, b"w")
    monkeypatch.setattr(raftlog.segments, "fdatasync", broken)
    with pytest.raises(OSError, match="Input/output"):
        log.append(2, 0, b"x")
    assert log.last_offset == 1
    monkeypatch.setattr(raftlog.segments, "fdatasync", real)
    log.append(2, 0, b"x")
    log.close()
    reopened = SegmentLog.open(tmp_path, SMALL)
    assert [(r.offset, r.payload) for r in reopened.read_from(0)] == [(1, b"w"), (2, b"x")]
    reopened.close()


def test_zero_filled_tail_after_power_loss_is_repaired_not_corruption(tmp_path: Path) -> None:
    """After a power loss the file's tail can read back as zeros: an unfinished write."""
    log = SegmentLog.open(tmp_path, SegmentConfig(fsync_policy="always"))
    for offset in range(1, 6):
        log.append(offset, 0, b"payload-%d" % offset)
    log.close()
    (seg,) = sorted(tmp_path.glob("*.seg"))
    with open(seg, "ab") as f:
        f.write(b"\x00" * 4096)
    reopened = SegmentLog.open(tmp_path, SegmentConfig(fsync_policy="never"))
    try:
        assert [r.offset for r in reopened.read_from(0)] == [1, 2, 3, 4, 5]
        reopened.append(6, 0, b"after")
        assert reopened.last_offset == 6
    finally:
        reopened.close()


def test_delete_before_keeps_young_segments_and_can_archive(tmp_path: Path) -> None:
    log = SegmentLog.open(
        tmp_path / "log", SegmentConfig(segment_max_bytes=200, fsync_policy="never")
    )
    try:
        for offset in range(1, 40):
            log.append(offset, 0, b"x" * 50)
        before = [info.path.name for info in log.segments()]
        assert len(before) > 3
        assert log.delete_before(30, min_age_s=3600) == 0  # every segment is too young
        archived = log.delete_before(30, archive_dir=tmp_path / "archive")
        assert archived > 0
        assert sorted(p.name for p in (tmp_path / "archive").iterdir()) == before[:archived]
        assert next(r.offset for r in log.read_from(0)) > 1
    finally:
        log.close()
