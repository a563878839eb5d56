"""Snapshot files, content hashes, record-level replay and the single-process compaction."""

from __future__ import annotations

import hashlib
import json
import pickle
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from protos.records_pb2 import Effect
from protos.snapshot_pb2 import SnapshotHeader
from snapshots import (
    HASH_ALGORITHM,
    HEADER_BYTES,
    SNAPSHOT_FORMAT_VERSION,
    ChangeLogError,
    ChangeRecord,
    RecordDigest,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotMeta,
    SnapshotMismatchError,
    StreamKind,
    compact_local,
    encode_header,
    encode_record,
    encode_snapshot,
    inspect,
    open_snapshot,
    read_segments,
    read_snapshot,
    record_hash,
    replay,
    verify_snapshot,
    write_snapshot,
)

RECORDS = [
    ("kv", b"a", b"1"),
    ("kv", b"b", b""),
    ("member", b"n1", b"\x00\xff" * 50),
    ("kv", b"", b"empty key"),
]
META = SnapshotMeta(cluster_id="c1", last_offset=42, last_term=3, raft_index=40, created_ms=7)


def spec_hash(type_: str, key: bytes, value: bytes) -> int:
    """The content-hash definition from the module docstring, written out independently."""
    q = struct.Struct("<Q").pack
    t = type_.encode()
    data = q(len(t)) + t + q(len(key)) + key + q(len(value)) + value
    digest = hashlib.blake2b(data, digest_size=16, person=b"metaledger.snap1").digest()
    return int.from_bytes(digest, "little")


def files_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# ------------------------------------------------------------------ content hash


def test_record_hash_follows_the_documented_definition() -> None:
    for record in RECORDS:
        assert record_hash(*record) == spec_hash(*record)


def test_digest_counts_and_hashes_per_type() -> None:
    digest = RecordDigest()
    for record in RECORDS:
        digest.add(*record)
    assert digest.counts == {"kv": 3, "member": 1}
    kv = sum(spec_hash(*r) for r in RECORDS if r[0] == "kv") % 2**128
    assert digest.hashes == {"kv": f"{kv:032x}", "member": f"{spec_hash(*RECORDS[2]):032x}"}
    assert digest.record_count == 4


def test_digest_is_order_independent_mergeable_and_discardable() -> None:
    whole, forward, backward = RecordDigest(), RecordDigest(), RecordDigest()
    for record in RECORDS:
        whole.add(*record)
        forward.add(*record)
    for record in reversed(RECORDS):
        backward.add(*record)
    assert forward == backward == whole
    left, right = RecordDigest(), RecordDigest()
    for record in RECORDS[:2]:
        left.add(*record)
    for record in RECORDS[2:]:
        right.add(*record)
    assert RecordDigest.combine([left, right]) == whole
    left.merge(right)
    assert left == whole
    whole.discard(*RECORDS[2])
    assert whole.counts == {"kv": 3}
    for record in RECORDS:
        if record[0] == "kv":
            whole.discard(*record)
    assert whole.counts == {} and whole.hashes == {} and whole == RecordDigest()


def test_digest_pickles_and_round_trips_through_its_summary() -> None:
    digest = RecordDigest()
    for record in RECORDS:
        digest.add(*record)
    copy = pickle.loads(pickle.dumps(digest))
    assert copy == digest
    copy.add("kv", b"z", b"z")
    assert copy != digest
    assert RecordDigest.from_summary(digest.counts, digest.hashes) == digest
    with pytest.raises(ValueError):
        RecordDigest.from_summary({"kv": 1}, {"kv": "not hex"})
    with pytest.raises(ValueError):
        RecordDigest.from_summary({"kv": 1}, {})


# ------------------------------------------------------------------ write and read


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "s.snap"
    info = write_snapshot(path, META, RECORDS)
    assert info.path == path and info.size_bytes == path.stat().st_size
    assert (info.last_offset, info.last_term, info.raft_index, info.created_ms) == (42, 3, 40, 7)
    assert info.counts == {"kv": 3, "member": 1} and info.record_count == 4
    assert info.format_version == SNAPSHOT_FORMAT_VERSION and info.hash_algorithm == HASH_ALGORITHM
    snapshot = read_snapshot(path)
    assert snapshot.records == RECORDS and snapshot.info == info
    assert snapshot.to_dict()[("kv", b"a")] == b"1"
    assert inspect(path) == info == inspect(path, verify=True) == verify_snapshot(path)
    assert files_in(tmp_path) == ["s.snap"]


def test_the_file_is_a_snapshot_record_stream(tmp_path: Path) -> None:
    from snapshots import RecordReader

    path = tmp_path / "s.snap"
    write_snapshot(path, META, RECORDS)
    reader = RecordReader(path.read_bytes(), start=0)
    header = reader.read_header()
    assert (header.kind, header.base_offset) == (StreamKind.SNAPSHOT, 42)
    frames = list(reader)
    assert [(f.offset, f.sub) for f in frames] == [(42, i) for i in range(len(RECORDS) + 2)]
    decoded = SnapshotHeader.FromString(frames[0].payload)
    assert decoded.cluster_id == "c1" and decoded.record_count == 4
    effects = [Effect.FromString(f.payload) for f in frames[1:-1]]
    assert [(e.type, e.key, e.value, e.delete) for e in effects] == [(*r, False) for r in RECORDS]


def test_inspect_json_has_the_cli_fields(tmp_path: Path) -> None:
    path = tmp_path / "s.snap"
    write_snapshot(path, META, RECORDS)
    doc = json.loads(json.dumps(inspect(path).to_json()))
    assert doc["last_offset"] == 42 and doc["last_term"] == 3
    assert doc["counts"] == {"kv": 3, "member": 1}
    assert set(doc["hashes"]) == {"kv", "member"} and len(doc["hashes"]["kv"]) == 32
    assert doc["path"] == str(path) and doc["size_bytes"] == path.stat().st_size


def test_empty_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "s.snap"
    info = write_snapshot(path, META, [])
    assert info.counts == {} and info.record_count == 0
    assert read_snapshot(path).records == []


def test_streaming_iterator_and_context_manager(tmp_path: Path) -> None:
    path = tmp_path / "s.snap"
    write_snapshot(path, META, RECORDS)
    with open_snapshot(path) as reader:
        assert reader.info.last_offset == 42
        assert list(reader.iter_records()) == RECORDS
        assert list(reader.iter_records()) == RECORDS  # again, from the start


def test_known_digest_is_one_pass_and_checked(tmp_path: Path) -> None:
    digest = RecordDigest()
    for record in RECORDS:
        digest.add(*record)
    path = tmp_path / "s.snap"
    info = write_snapshot(path, META.with_digest(digest), iter(RECORDS))
    assert info.digest == digest
    wrong = META.with_digest(digest)
    with pytest.raises(SnapshotMismatchError) as e:
        write_snapshot(tmp_path / "t.snap", wrong, RECORDS[:-1])
    assert e.value.expected == digest and str(tmp_path / "t.snap") in str(e.value)
    assert files_in(tmp_path) == ["s.snap"]


def test_two_passes_need_a_reiterable_source(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_snapshot(tmp_path / "s.snap", META, iter(RECORDS))
    info = write_snapshot(tmp_path / "s.snap", META, lambda: iter(RECORDS))
    assert info.record_count == 4
    assert files_in(tmp_path) == ["s.snap"]


def test_a_source_that_changes_between_passes_is_refused(tmp_path: Path) -> None:
    calls = iter([RECORDS, RECORDS[:2]])
    with pytest.raises(SnapshotMismatchError):
        write_snapshot(tmp_path / "s.snap", META, lambda: next(calls))
    assert files_in(tmp_path) == []


def test_an_error_from_the_records_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.snap"
    write_snapshot(path, META, RECORDS)
    before = path.read_bytes()

    def failing() -> Iterator[tuple[str, bytes, bytes]]:
        yield RECORDS[0]
        raise RuntimeError("boom")

    digest = RecordDigest()
    digest.add(*RECORDS[0])
    with pytest.raises(RuntimeError):
        write_snapshot(path, META.with_digest(digest), failing())
    assert files_in(tmp_path) == ["s.snap"] and path.read_bytes() == before


def test_progress_counts_up_to_the_total(tmp_path: Path) -> None:
    seen: list[int] = []
    records = [("kv", b"%06d" % i, b"v" * 300) for i in range(10_000)]
    write_snapshot(tmp_path / "s.snap", META, records, progress=seen.append)
    assert seen == sorted(seen) and seen[-1] == 10_000 and len(seen) > 1


def test_bad_meta_and_records(tmp_path: Path) -> None:
    for bad in (
        SnapshotMeta("c", -1, 0),
        SnapshotMeta("c", 1, -1),
        SnapshotMeta("c", 1, 1, counts={"kv": 1}),
        SnapshotMeta("c", 1, 1, counts={"kv": 0}, hashes={"kv": "0" * 32}),
    ):
        with pytest.raises(ValueError):
            write_snapshot(tmp_path / "s.snap", bad, RECORDS)
    with pytest.raises(ValueError):
        write_snapshot(tmp_path / "s.snap", META, [("", b"k", b"v")])
    assert files_in(tmp_path) == []


# ------------------------------------------------------------------ damage


def corrupt_message(path: Path) -> SnapshotCorruptError:
    with pytest.raises(SnapshotCorruptError) as e:
        read_snapshot(path)
    assert isinstance(e.value, SnapshotError)
    assert e.value.path == str(path) and str(path) in str(e.value)
    return e.value


def test_truncation_trailing_data_and_a_flip_are_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "s.snap"
    good = encode_snapshot(META, RECORDS)[0]
    for damaged in (good[:-1], good[: len(good) - 20], good + b"\x00", good[:HEADER_BYTES]):
        path.write_bytes(damaged)
        corrupt_message(path)
    flipped = bytearray(good)
    flipped[HEADER_BYTES + 20] ^= 0x10
    path.write_bytes(bytes(flipped))
    error = corrupt_message(path)
    assert error.position == HEADER_BYTES and f"at byte {HEADER_BYTES}" in str(error)


def test_a_dropped_record_frame_is_corrupt(tmp_path: Path) -> None:
    """Frames re-encoded consistently (valid CRCs) but one record missing."""
    path = tmp_path / "s.snap"
    write_snapshot(path, META, RECORDS)
    from snapshots import RecordReader

    reader = RecordReader(path.read_bytes(), start=0)
    reader.read_header()
    frames = list(reader)
    kept = [frames[0], *frames[2:]]
    path.write_bytes(
        encode_header(StreamKind.SNAPSHOT, 42)
        + b"".join(encode_record(42, i, f.payload) for i, f in enumerate(kept))
    )
    corrupt_message(path)


def test_a_swapped_record_with_valid_framing_fails_the_content_hash(tmp_path: Path) -> None:
    path = tmp_path / "s.snap"
    other = [*RECORDS[:-1], ("kv", b"", b"something else")]
    good = encode_snapshot(META, RECORDS)[0]
    forged = encode_snapshot(META, other)[0]
    # the header and the first records of `good`, the last record and footer of `forged`
    header_end = len(encode_header(StreamKind.SNAPSHOT, 42)) + len(
        encode_record(42, 0, _header_frame_payload(good))
    )
    assert good[:header_end] != forged[:header_end]  # the hashes differ...
    path.write_bytes(good[:header_end] + forged[header_end:])
    error = corrupt_message(path)
    # ... so the footer checksum or the content hash catches it
    assert "checksum" in error.reason or "hashes" in error.reason


def _header_frame_payload(data: bytes) -> bytes:
    from snapshots import RecordReader

    reader = RecordReader(data, start=0)
    reader.read_header()
    first = reader.next_record()
    assert first is not None
    return first.payload


def test_a_change_log_segment_is_not_a_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "s.snap"
    path.write_bytes(encode_header(StreamKind.CHANGE_LOG_SEGMENT, 42))
    assert "SNAPSHOT" in corrupt_message(path).reason


# ------------------------------------------------------------------ replay


def effect(type_: str, key: bytes, value: bytes = b"", delete: bool = False) -> Effect:
    return Effect(type=type_, key=key, value=value, delete=delete)


def test_replay_last_write_wins_in_any_order() -> None:
    records = [
        (1, 0, effect("kv", b"a", b"1")),
        (2, 0, effect("kv", b"a", b"2")),
        (2, 1, effect("member", b"a", b"m")),
        (3, 0, effect("kv", b"b", b"x")),
        (4, 0, effect("kv", b"b", delete=True)),
    ]
    expected = {("kv", b"a"): b"2", ("member", b"a"): b"m"}
    assert replay(records) == expected
    assert replay(reversed(records)) == expected
    assert replay([records[4], records[3]]) == {}  # the older put does not resurrect the key


def test_replay_on_a_base_skips_what_the_base_holds() -> None:
    base = {("kv", b"a"): b"base", ("kv", b"gone"): b"x"}
    records = [
        (5, 0, effect("kv", b"a", b"old")),
        (6, 0, effect("kv", b"gone", delete=True)),
        (7, 0, effect("kv", b"new", b"n")),
    ]
    assert replay(records, base, after_offset=5) == {("kv", b"a"): b"base", ("kv", b"new"): b"n"}
    assert base == {("kv", b"a"): b"base", ("kv", b"gone"): b"x"}  # untouched


def test_replay_refuses_two_different_records_at_one_position() -> None:
    same = (1, 0, effect("kv", b"a", b"1"))
    assert replay([same, same]) == {("kv", b"a"): b"1"}
    with pytest.raises(ChangeLogError):
        replay([same, (1, 0, effect("kv", b"a", b"2"))])


# ------------------------------------------------------------------ segments and compaction


def write_segment(directory: Path, records: list[tuple[int, int, Effect]]) -> Path:
    first = records[0][0]
    path = directory / f"{first:020d}.seg"
    path.write_bytes(
        encode_header(StreamKind.CHANGE_LOG_SEGMENT, first)
        + b"".join(encode_record(o, s, e.SerializeToString()) for o, s, e in records)
    )
    return path


SEGMENTS = [
    [
        (1, 0, effect("kv", b"a", b"1")),
        (1, 1, effect("kv", b"b", b"1")),
        (3, 0, effect("kv", b"a", b"3")),
    ],
    [(3, 1, effect("kv", b"c", b"3")), (5, 0, effect("kv", b"b", delete=True))],
    [(8, 0, effect("member", b"m", b"8")), (9, 0, effect("kv", b"a", b"9"))],
]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "log"
    directory.mkdir()
    for segment in SEGMENTS:
        write_segment(directory, segment)
    (directory / f"{1:020d}.idx").write_bytes(b"ignored")
    return directory


def test_read_segments_in_order_bounded(log_dir: Path) -> None:
    every = [(o, s) for seg in SEGMENTS for o, s, _ in seg]
    assert [(r.offset, r.sub) for r in read_segments(log_dir, 100)] == every
    assert [(r.offset, r.sub) for r in read_segments(log_dir, 3)] == every[:4]
    assert [(r.offset, r.sub) for r in read_segments(log_dir, 8, after_offset=3)] == [
        (5, 0),
        (8, 0),
    ]
    first = next(read_segments(log_dir, 100))
    assert first == ChangeRecord(1, 0, "kv", b"a", b"1", False)


def test_a_torn_tail_past_upto_is_harmless_before_it_an_error(log_dir: Path) -> None:
    """Reading stops at the first whole record past `upto`; a torn frame before such a
    record might have held a record at or below `upto`, so it is an error."""
    last = log_dir / f"{8:020d}.seg"
    torn = encode_record(10, 0, effect("kv", b"t", b"t").SerializeToString())[:-3]
    last.write_bytes(last.read_bytes() + torn)
    assert [r.offset for r in read_segments(log_dir, 8)] == [1, 1, 3, 3, 5, 8]
    with pytest.raises(ChangeLogError) as e:
        list(read_segments(log_dir, 9))
    assert str(last) in str(e.value) and e.value.position == last.stat().st_size - len(torn)
    assert "TornTailError" in e.value.reason


def test_segment_damage_is_a_change_log_error(log_dir: Path) -> None:
    middle = log_dir / f"{3:020d}.seg"
    data = bytearray(middle.read_bytes())
    data[HEADER_BYTES + 12] ^= 1
    middle.write_bytes(bytes(data))
    with pytest.raises(ChangeLogError) as e:
        list(read_segments(log_dir, 100))
    assert e.value.position == HEADER_BYTES and str(middle) in str(e.value)


def test_segment_order_and_names_are_checked(tmp_path: Path) -> None:
    write_segment(tmp_path, [(5, 0, effect("kv", b"a")), (4, 0, effect("kv", b"b"))])
    with pytest.raises(ChangeLogError, match="after"):
        list(read_segments(tmp_path, 100))
    (tmp_path / f"{5:020d}.seg").unlink()
    (tmp_path / f"{6:020d}.seg").write_bytes(encode_header(StreamKind.CHANGE_LOG_SEGMENT, 7))
    with pytest.raises(ChangeLogError, match="named"):
        list(read_segments(tmp_path, 100))


def test_compact_local_without_and_with_base(log_dir: Path, tmp_path: Path) -> None:
    first = compact_local(log_dir, None, 3, tmp_path / "a.snap", SnapshotMeta("c1", 3, 1))
    assert sorted(read_snapshot(tmp_path / "a.snap").records) == [
        ("kv", b"a", b"3"),
        ("kv", b"b", b"1"),
        ("kv", b"c", b"3"),
    ]
    assert first.last_offset == 3
    second = compact_local(
        log_dir, tmp_path / "a.snap", 9, tmp_path / "b.snap", SnapshotMeta("c1", 9, 2)
    )
    direct = compact_local(log_dir, None, 9, tmp_path / "c.snap", SnapshotMeta("c1", 9, 2))
    expected = {("kv", b"a"): b"9", ("kv", b"c"): b"3", ("member", b"m"): b"8"}
    assert read_snapshot(tmp_path / "b.snap").to_dict() == expected
    assert second.hashes == direct.hashes and second.counts == direct.counts == {
        "kv": 2,
        "member": 1,
    }


def test_compact_local_misuse(log_dir: Path, tmp_path: Path) -> None:
    base = tmp_path / "a.snap"
    compact_local(log_dir, None, 5, base, SnapshotMeta("c1", 5, 1))
    with pytest.raises(ValueError):
        compact_local(log_dir, None, 5, tmp_path / "x.snap", SnapshotMeta("c1", 6, 1))
    with pytest.raises(ValueError):
        compact_local(log_dir, base, 9, tmp_path / "x.snap", SnapshotMeta("other", 9, 1))
    with pytest.raises(ValueError):
        compact_local(log_dir, base, 4, tmp_path / "x.snap", SnapshotMeta("c1", 4, 1))
    assert not (tmp_path / "x.snap").exists()


def test_record_frames_carry_the_effect_bytes_protobuf_makes() -> None:
    """The writer encodes each record's Effect by hand: the bytes are protobuf's own, empty
    keys and values left out, lengths of one, two and more varint bytes, any type name."""
    from snapshots._recordstream import RecordReader
    from snapshots._writer import _record_chunks

    sizes = [0, 1, 127, 128, 16383, 16384, 70000]
    records = [
        (type_, b"k" * nk, b"v" * nv)
        for type_ in ("kv", "lease", "t\u00e9st")
        for nk in sizes
        for nv in sizes
    ]
    digest = RecordDigest()
    data = b"".join(chunk for chunk, _ in _record_chunks(9, records, digest))
    frames = list(RecordReader(data, start=0))
    assert [(f.offset, f.sub) for f in frames] == [(9, i + 1) for i in range(len(records))]
    for frame, (type_, key, value) in zip(frames, records, strict=True):
        assert frame.payload == Effect(type=type_, key=key, value=value).SerializeToString()
    expected = RecordDigest()
    for record in records:
        expected.add(*record)
    assert digest == expected
