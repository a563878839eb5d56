"""snapshots.write_snapshot_frames: a snapshot from frames encoded elsewhere (in parts, as
the compaction's executors do) is the same file write_snapshot makes, and a part whose
digest disagrees leaves nothing behind."""

from __future__ import annotations

import dataclasses
import itertools
import random
from pathlib import Path

import pytest

from snapshots import (
    RecordDigest,
    SnapshotMeta,
    SnapshotMismatchError,
    encode_frames,
    read_snapshot,
    write_snapshot,
    write_snapshot_frames,
)


def _records(n: int = 5000, seed: int = 7) -> list[tuple[str, bytes, bytes]]:
    rng = random.Random(seed)
    return [
        (rng.choice(["kv", "lease", "member"]), b"key-%d" % i, rng.randbytes(rng.randint(0, 300)))
        for i in range(n)
    ]


def _frames_in_parts(
    offset: int, records: list[tuple[str, bytes, bytes]], cuts: list[int], written: RecordDigest
) -> list[tuple[bytes, int]]:
    """Each part encoded on its own, numbered from its first record, as executors do."""
    out: list[tuple[bytes, int]] = []
    bounds = [0, *cuts, len(records)]
    for a, b in itertools.pairwise(bounds):
        part = RecordDigest()
        out += encode_frames(offset, records[a:b], part, first_sub=a + 1)
        written.merge(part)
    return out


@pytest.mark.parametrize("cuts", [[], [1], [2500], [0, 0, 4999], [1000, 1001, 3000]])
def test_frames_encoded_in_parts_make_the_file_write_snapshot_makes(
    tmp_path: Path, cuts: list[int]
) -> None:
    records = _records()
    meta = SnapshotMeta("c1", 77, 3, created_ms=1_700_000_000_000)
    whole = write_snapshot(tmp_path / "whole.snap", meta, records)
    digest = RecordDigest()
    for r in records:
        digest.add(*r)
    written = RecordDigest()
    progress: list[int] = []
    info = write_snapshot_frames(
        tmp_path / "parts.snap",
        meta.with_digest(digest),
        _frames_in_parts(77, records, cuts, written),
        written,
        progress=progress.append,
    )
    assert (tmp_path / "parts.snap").read_bytes() == (tmp_path / "whole.snap").read_bytes()
    assert info.hashes == whole.hashes and info.record_count == len(records)
    assert progress[-1] == len(records)
    assert read_snapshot(tmp_path / "parts.snap").records == records


def test_a_part_that_disagrees_with_the_meta_leaves_nothing(tmp_path: Path) -> None:
    records = _records(200)
    digest = RecordDigest()
    for r in records:
        digest.add(*r)
    meta = SnapshotMeta("c1", 9, 1).with_digest(digest)
    written = RecordDigest()
    frames = _frames_in_parts(9, records[:-1], [50], written)  # one record lost on the way
    with pytest.raises(SnapshotMismatchError):
        write_snapshot_frames(tmp_path / "s.snap", meta, frames, written)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match=r"^meta: frames encoded elsewhere need the counts"):
        write_snapshot_frames(
            tmp_path / "s.snap", dataclasses.replace(meta, counts=None, hashes=None), [], written
        )
    assert list(tmp_path.iterdir()) == []


def test_a_part_of_many_megabytes_is_written_as_it_is_into_the_same_file(tmp_path: Path) -> None:
    """A chunk of frames larger than a sync step (one process's share of a seeding, handed
    over whole as a map of its file) goes out in views of it, not copied: the same file."""
    records = [("kv", b"key-%06d" % i, b"v" * 600) for i in range(20_000)]  # about 13 MB
    meta = SnapshotMeta("c1", 77, 3, created_ms=1_700_000_000_000)
    whole = write_snapshot(tmp_path / "whole.snap", meta, records)
    digest = RecordDigest()
    head = list(encode_frames(77, records[:100], digest))
    tail = b"".join(chunk for chunk, _ in encode_frames(77, records[100:], digest, 101))
    assert len(tail) > 8 * 1024 * 1024
    info = write_snapshot_frames(
        tmp_path / "big.snap", meta.with_digest(digest), [*head, (tail, 20_000)], digest
    )
    assert (tmp_path / "big.snap").read_bytes() == (tmp_path / "whole.snap").read_bytes()
    assert info.size_bytes == whole.size_bytes
