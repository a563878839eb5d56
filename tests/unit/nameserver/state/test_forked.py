"""Snapshots written from a forked child (nameserver.state.forked, StoreSink(in_child=True)):
results and failures come back to the parent, a dead child leaves the kept snapshots as
they were and nothing half-written, and the next attempt succeeds."""

from __future__ import annotations

import errno
import gc
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from nameserver.kinds import REGISTRY
from nameserver.kv.records import KeyValue, KvImage
from nameserver.state.forked import ChildFailedError, ForkError, run_in_child
from nameserver.state.image import MetadataImage, Provenance
from nameserver.state.machine import CapturedImage, image_records
from nameserver.state.snapshotting import StoreSink
from raftlog import SegmentConfig, SegmentLog
from snapshots import FileSnapshotStore, read_snapshot

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def test_the_result_comes_from_another_process() -> None:
    child = run_in_child(lambda: str(os.getpid()), "pid")
    assert int(child.value) == child.pid != os.getpid()
    assert child.fork_ms > 0 and child.cpu_s >= 0


def test_an_exception_in_the_child_is_reported_with_its_message() -> None:
    def fail() -> str:
        raise OSError(28, "No space left on device")

    with pytest.raises(ChildFailedError, match=r"OSError: .*No space left") as e:
        run_in_child(fail, "writing")
    assert str(e.value).startswith("writing in a child process failed")


def test_a_killed_child_is_reported() -> None:
    def die() -> str:
        os.kill(os.getpid(), signal.SIGKILL)
        return "unreachable"

    with pytest.raises(ChildFailedError, match="killed by signal SIGKILL"):
        run_in_child(die, "writing")


def test_the_child_runs_below_the_parents_priority() -> None:
    """Its own nice, and its own session whose autogroup weighs less (where the kernel has
    autogroups): its CPU is not charged to the node's session."""

    def priority() -> str:
        group = Path("/proc/self/autogroup")
        nice = group.read_text().split()[-1] if group.exists() else "-"
        return f"{os.nice(0)} {os.getsid(0) == os.getpid()} {nice}"

    child_nice, own_session, group_nice = run_in_child(priority, "priority").value.split()
    assert int(child_nice) > os.nice(0) and own_session == "True"
    assert group_nice in ("-", "10")


def image_of(n: int, offset: int) -> MetadataImage:
    items = [(b"k%05d" % i, KeyValue(b"k%05d" % i, b"v" * 50, i + 1, offset, 1)) for i in range(n)]
    return MetadataImage(REGISTRY, Provenance(offset, 2), kv=KvImage.from_sorted_items(items))


@dataclass
class DyingCapture:
    """A capture whose records kill the (child) process part-way through the write, its
    temp file open."""

    image: MetadataImage
    last_offset: int
    last_term: int
    die_after: int
    image_dir: str

    def records(self) -> Iterator[tuple[str, bytes, bytes]]:
        for i, record in enumerate(image_records(self.image)):
            if i == self.die_after:
                assert list(Path(self.image_dir).glob(".*.tmp"))
                os.kill(os.getpid(), signal.SIGKILL)
            yield record


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[StoreSink]:
    segments = SegmentLog.open(tmp_path / "log", SegmentConfig(fsync_policy="never"))
    store = FileSnapshotStore(tmp_path / "snap", keep=2)
    yield StoreSink(store, str(tmp_path / "dump.snap"), "c1", segments, in_child=True)
    segments.close()
    gc.unfreeze()  # a write freezes what is alive (see StoreSink.write)


def test_a_snapshot_written_in_a_child(sink: StoreSink) -> None:
    image = image_of(5000, 10)
    path = sink.write(CapturedImage(image), 7, b"meta")
    assert gc.get_freeze_count() > 5000  # the image left the collector before the fork
    snap = read_snapshot(path)
    assert snap.records == list(image_records(image))
    assert (snap.info.last_offset, snap.info.raft_index, snap.info.engine_meta) == (10, 7, b"meta")


def test_a_dead_child_keeps_the_previous_snapshot_and_the_next_try_succeeds(
    sink: StoreSink,
) -> None:
    first = sink.write(CapturedImage(image_of(100, 10)), 1, b"")
    newer = image_of(30000, 20)
    with pytest.raises(ChildFailedError, match="killed by signal SIGKILL"):
        sink.write(DyingCapture(newer, 20, 2, 25000, str(sink.store.directory)), 2, b"")
    files = sorted(p.name for p in sink.store.directory.iterdir())
    assert files == [Path(first).name]  # no temp file, nothing at the new offset
    assert sink.store.latest() == Path(first)
    assert read_snapshot(first).info.last_offset == 10
    again = sink.write(CapturedImage(newer), 2, b"")  # the engine asks again later
    assert read_snapshot(again).records == list(image_records(newer))
    assert sink.store.latest() == Path(again)


def test_a_child_forked_from_another_thread_works() -> None:
    """The node forks from its snapshot-writer thread, never the main one."""
    results: list[str] = []
    writer = threading.Thread(
        target=lambda: results.append(run_in_child(lambda: "written", "writing").value)
    )
    writer.start()
    writer.join(30)
    assert results == ["written"]


def test_no_fork_is_a_fork_error_and_the_sink_writes_on_its_thread(sink: StoreSink) -> None:
    image = image_of(300, 12)
    no_memory = OSError(errno.ENOMEM, "Cannot allocate memory")
    with mock.patch("nameserver.state.forked.os.fork", side_effect=no_memory):
        with pytest.raises(ForkError, match="fork failed: Cannot allocate memory"):
            run_in_child(lambda: "never", "writing")
        path = sink.write(CapturedImage(image), 3, b"")
    assert read_snapshot(path).records == list(image_records(image))
    assert not list(sink.store.directory.glob(".*.tmp"))
