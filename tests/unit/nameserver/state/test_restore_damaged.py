"""nameserver.state.snapshotting.restore at a restart, when a snapshot on disk was damaged
(a flipped byte) while the node ran: the newest snapshot, which the engine's dump links.

What holds: the damaged snapshot is refused with a WARNING naming the file and the byte;
the image comes from the older snapshot plus the change log after it, the same image the
damaged one held; the engine's dump is rebuilt at its offset and verifies. With no good
snapshot and no change log to rebuild it from, the node stops naming the file.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from nameserver.kinds import REGISTRY
from nameserver.state.image import MetadataImage
from nameserver.state.machine import CapturedImage, image_records
from nameserver.state.snapshotting import StoreSink, replay_segments, restore
from raftlog import SegmentConfig, SegmentLog
from raftlog.entry import Effect
from snapshots import FileSnapshotStore, SnapshotError, inspect, verify_snapshot
from tests.faults.inject import flip_byte
from tests.unit.nameserver.state.test_forked import image_of


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[StoreSink, SegmentLog]]:
    segments = SegmentLog.open(tmp_path / "log", SegmentConfig(fsync_policy="never"))
    store = FileSnapshotStore(tmp_path / "snap", keep=2)
    (tmp_path / "raft").mkdir()
    yield StoreSink(store, str(tmp_path / "raft" / "dump.snap"), "c1", segments), segments
    segments.close()


def kv(image: MetadataImage) -> list[tuple[str, bytes, bytes]]:
    return list(image_records(image))


def two_snapshots(sink: StoreSink, segments: SegmentLog) -> tuple[MetadataImage, str]:
    """A snapshot at offset 10, ten puts in the change log, a snapshot at 20 (the dump).
    Returns the image at 20 and the newest snapshot's path."""
    older = image_of(50, 10)
    sink.publish(sink.write(CapturedImage(older), 9, b"{}"))
    newer_keys = [r for r in image_records(image_of(60, 20)) if r[1] >= b"k00050"]
    for i, (type_, key, value) in enumerate(newer_keys):
        segments.append(11 + i, 1, Effect(type_, key, value).encode(count=1))
    segments.flush()
    image = replay_segments(older, segments)
    assert image.provenance.last_offset == 20
    path = sink.write(CapturedImage(image), 19, b"{}")
    sink.publish(path)
    return image, path


def test_a_damaged_newest_snapshot_falls_back_and_the_dump_is_rebuilt(
    node: tuple[StoreSink, SegmentLog], caplog: pytest.LogCaptureFixture
) -> None:
    sink, segments = node
    image, newest = two_snapshots(sink, segments)
    flip_byte(Path(newest), inspect(newest).size_bytes // 2)
    with caplog.at_level(logging.WARNING):
        restored, base = restore(sink.store, segments, sink.dump_file, "c1", REGISTRY)
    assert kv(restored) == kv(image) and restored.provenance.last_offset == 20
    assert base == 20
    warnings = "\n".join(r.getMessage() for r in caplog.records)
    assert f"refusing snapshot {newest}" in warnings and "at byte" in warnings, warnings
    assert verify_snapshot(sink.dump_file).last_offset == 20  # rebuilt, whole again
    assert sink.verify(sink.dump_file) is None


def test_the_sinks_check_names_the_file_and_the_byte(node: tuple[StoreSink, SegmentLog]) -> None:
    sink, segments = node
    _image, newest = two_snapshots(sink, segments)
    assert sink.verify(sink.dump_file) is None
    flip_byte(Path(newest), inspect(newest).size_bytes // 2)
    problem = sink.verify(sink.dump_file)  # the dump is a link to the newest
    assert problem is not None
    assert problem.startswith(sink.dump_file) and "at byte" in problem, problem


def test_a_damaged_only_snapshot_without_its_change_log_stops_naming_the_file(
    tmp_path: Path, node: tuple[StoreSink, SegmentLog]
) -> None:
    sink, segments = node
    path = sink.write(CapturedImage(image_of(50, 10)), 9, b"{}")
    sink.publish(path)
    flip_byte(Path(path), inspect(path).size_bytes // 2)
    with pytest.raises(SnapshotError) as e:
        restore(sink.store, segments, sink.dump_file, "c1", REGISTRY)
    assert sink.dump_file in str(e.value) or path in str(e.value), e.value
