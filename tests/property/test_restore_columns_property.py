"""Restore's fast path (issue 3, Performance) against the careful one it replaces.

:func:`snapshots.read_snapshot_columns` skips the frames' own CRCs (the footer checksum
covers the same bytes) and falls back to the frame-by-frame reader on any anomaly;
:meth:`KvImage.from_records` builds the kv sub-image from raw records in bulk. Both must
give exactly what the per-record path gives: the same records, the same image, and for a
damaged file the same error naming the same file and byte.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
from dataclasses import replace
from pathlib import Path
from unittest import mock

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nameserver.kinds import REGISTRY
from nameserver.kv.records import KeyValue, KvImage
from nameserver.state.machine import image_from_records, image_records
from nameserver.state.sortedmap import PersistentSortedMap
from protos.records_pb2 import Effect
from protos.snapshot_pb2 import SnapshotFooter
from snapshots import (
    RecordReader,
    SnapshotColumns,
    SnapshotCorruptError,
    SnapshotInfo,
    SnapshotMeta,
    SnapshotReader,
    encode_record,
    encode_snapshot,
    etcd_trailer,
    read_snapshot,
    read_snapshot_columns,
    write_snapshot,
)
from tests.property.test_snapshot_property import SETTINGS, Rec, record_sets

META = SnapshotMeta(cluster_id="c", last_offset=77, last_term=2, created_ms=1)


def grouped(records: list[Rec]) -> dict[str, tuple[list[bytes], list[bytes]]]:
    out: dict[str, tuple[list[bytes], list[bytes]]] = {}
    for type_, key, value in records:
        keys, values = out.setdefault(type_, ([], []))
        keys.append(key)
        values.append(value)
    return out


def error_of(fn: object, path: Path) -> str:
    with pytest.raises(SnapshotCorruptError) as e:
        fn(path)  # type: ignore[operator]
    assert e.value.path == str(path)
    return str(e.value)


@SETTINGS
@given(records=record_sets)
def test_columns_hold_the_records_of_the_file(records: list[Rec]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s.snap"
        path.write_bytes(encode_snapshot(META, records)[0])
        with mock.patch.object(SnapshotReader, "iter_records", side_effect=AssertionError):
            cols = read_snapshot_columns(path)  # a good file takes one (fast) pass
        snap = read_snapshot(path)
        assert cols.info == snap.info
        assert dict(cols.columns) == grouped(records)
        assert sorted(cols) == sorted(records) and len(cols) == len(records)
        assert sorted(cols.without("kv")) == sorted(r for r in records if r[0] != "kv")
        assert read_snapshot_columns(path, check_hashes=False).columns == cols.columns


@SETTINGS
@given(records=record_sets, data=st.data())
def test_damage_gets_the_same_error_as_the_careful_reader(
    records: list[Rec], data: st.DataObject
) -> None:
    """A flipped byte anywhere, a cut, or bytes appended: refused with the very error the
    frame-by-frame reader gives (which names the file and, for a frame, its position)."""
    raw = bytearray(encode_snapshot(META, records)[0])
    how = data.draw(st.sampled_from(["flip", "cut", "append"]), label="how")
    if how == "flip":
        position = data.draw(st.integers(0, len(raw) - 1), label="position")
        raw[position] ^= data.draw(st.integers(1, 255), label="xor")
    elif how == "cut":
        del raw[data.draw(st.integers(0, len(raw) - 1), label="cut at") :]
    else:
        raw += data.draw(st.binary(min_size=1, max_size=40), label="appended")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s.snap"
        path.write_bytes(bytes(raw))
        assert error_of(read_snapshot_columns, path) == error_of(read_snapshot, path)


def test_a_file_saved_by_etcdctl_reads_as_columns(tmp_path: Path) -> None:
    """etcd's snapshot stream appends padding and a SHA-256; the footer check allows it."""
    records = [("kv", b"a", b"1"), ("member", b"n1", b"x")]
    data = encode_snapshot(META, records)[0]
    path = tmp_path / "etcd.snap"
    path.write_bytes(data + etcd_trailer(len(data), hashlib.sha256(data)))
    assert read_snapshot_columns(path).columns == grouped(records)


def test_a_swapped_record_fails_the_content_hash_on_the_fast_path(tmp_path: Path) -> None:
    """Valid framing and checksum but a record the header's hash does not cover: the
    content hash (recomputed in the fast pass) refuses it; without it, it passes."""
    good = encode_snapshot(META, [("kv", b"a", b"1")])[0]
    reader = RecordReader(good, start=0)
    reader.read_header()
    reader.next_record()
    forged = good[: reader.position] + encode_record(  # the header frame, another record
        77, 1, Effect(type="kv", key=b"a", value=b"2").SerializeToString()
    )
    footer = SnapshotFooter(record_count=1, checksum_crc32c=crc32c.crc32c(forged))
    path = tmp_path / "s.snap"
    path.write_bytes(forged + encode_record(77, 2, footer.SerializeToString()))
    assert "hashes" in error_of(read_snapshot_columns, path)
    assert read_snapshot_columns(path, check_hashes=False).columns == {"kv": ([b"a"], [b"2"])}


kvs = st.lists(
    st.tuples(
        st.binary(max_size=8),
        st.binary(max_size=20),
        st.integers(1, 2**40),
        st.integers(0, 3),
    ),
    max_size=60,
    unique_by=lambda t: t[0],
)


@SETTINGS
@given(items=kvs, seed=st.randoms(use_true_random=False))
def test_kv_image_from_records_equals_the_per_record_build(
    items: list[tuple[bytes, bytes, int, int]], seed: random.Random
) -> None:
    """Any order in (a Spark job writes its partitions' records in any order), sorted out,
    with the lease index and byte total of the per-record build."""
    values = [KeyValue(k, v, rev, rev + 1, 2, lease) for k, v, rev, lease in items]
    pairs = [(kv.key, kv.to_record()) for kv in values]
    seed.shuffle(pairs)
    built = KvImage.from_records([k for k, _ in pairs], [r for _, r in pairs])
    expected = KvImage.from_sorted_items(sorted((kv.key, kv) for kv in values))
    assert list(built.data.items()) == list(expected.data.items())
    assert built.by_lease == expected.by_lease and built.value_bytes == expected.value_bytes
    assert all(type(kv) is KeyValue for kv in built.data.values())
    built.data.check_invariants()


def test_kv_image_from_records_refuses_a_key_twice() -> None:
    record = KeyValue(b"k", b"v", 1, 1, 1).to_record()
    with pytest.raises(ValueError, match="strictly increasing"):
        KvImage.from_records([b"k", b"j", b"k"], [record, record, record])


def test_from_columns_checks_its_input() -> None:
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        PersistentSortedMap.from_columns([b"a", b"b"], [1])
    with pytest.raises(TypeError):
        PersistentSortedMap.from_columns(["a"], [1])  # type: ignore[list-item]
    built = PersistentSortedMap.from_columns([b"a", b"b", b"c"], [1, 2, 3], chunk_size=2)
    assert list(built.items()) == [(b"a", 1), (b"b", 2), (b"c", 3)]


@SETTINGS
@given(records=record_sets)
def test_an_image_from_columns_equals_one_from_records(records: list[Rec]) -> None:
    """The whole image (kv in bulk, every other type per record) as from the tuples."""
    kv = [
        ("kv", key, KeyValue(key, value, 3, 4, 1, len(value) % 3).to_record())
        for t, key, value in records
        if t == "kv"
    ]
    members = [("member", b"m1", b"\x0a\x02m1")]
    image_records_in = [*kv, *members]
    cols = SnapshotColumns(read_info(), grouped(image_records_in))
    from_cols = image_from_records(cols, 9, 2, REGISTRY)
    from_tuples = image_from_records(image_records_in, 9, 2, REGISTRY)
    assert list(image_records(from_cols)) == list(image_records(from_tuples))
    assert from_cols.kv.by_lease == from_tuples.kv.by_lease
    assert from_cols.provenance == from_tuples.provenance


def read_info() -> SnapshotInfo:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s.snap"
        path.write_bytes(encode_snapshot(META, [])[0])
        return read_snapshot(path).info


@SETTINGS
@given(records=record_sets)
def test_one_pass_writes_the_bytes_of_two_passes(records: list[Rec]) -> None:
    """The forked writer's one pass (frames held in memory) writes the same file, and
    takes a one-shot iterator, which two passes refuse."""
    two = encode_snapshot(META, records)
    one = encode_snapshot(META, iter(records), one_pass=True)
    assert one == two
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s.snap"
        info = write_snapshot(path, META, lambda: iter(records), one_pass=True)
        assert path.read_bytes() == two[0] and info == replace(two[1], path=path)
