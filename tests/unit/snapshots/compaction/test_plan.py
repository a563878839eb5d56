"""Splitting change-log segments into byte ranges for the compaction's read tasks: the
sparse offset index the server writes (``raftlog.segments``) read as a hint, cuts at its
points, every record read exactly once whatever the split, and no false error from a
missing or stale index."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protos.records_pb2 import Effect
from raftlog.segments import SegmentConfig, SegmentLog
from snapshots import (
    HEADER_BYTES,
    RecordReader,
    RecordStreamError,
    StreamKind,
    TornTailError,
    encode_header,
    encode_record,
)
from snapshots._recordstream import (
    INDEX_ENTRY_BYTES,
    FrameRange,
    iter_frames,
    read_index,
    split_ranges,
)
from snapshots.compaction import (
    FileStats,
    ReadTask,
    list_segments,
    plan_reads,
    plan_tasks,
    read_segment,
    read_task_count,
    window_bytes,
)

Position = tuple[int, int]


def write_log(directory: Path, entries: int = 600, seed: int = 3) -> list[Position]:
    """A change log written by the server's own segment writer (index every 256 bytes,
    ~4 KiB segments); 1-3 effects per offset. Returns every record's (offset, sub)."""
    rng = random.Random(seed)
    config = SegmentConfig(segment_max_bytes=4096, index_every_bytes=256, fsync_policy="never")
    written = []
    with SegmentLog.open(directory, config) as log:
        for offset in range(1, entries + 1):
            for sub in range(rng.randint(1, 3)):
                effect = Effect(type="kv", key=b"k%d" % rng.randrange(50), term=1)
                effect.value = rng.randbytes(rng.randint(0, 40))
                log.append(offset, sub, effect.SerializeToString())
                written.append((offset, sub))
    return written


def read_range(path: Path, r: FrameRange) -> list[Position]:
    with open(path, "rb") as f:
        reader = RecordReader(f, path=str(path), start=r.start, end=r.end)
        return [(rec.offset, rec.sub) for rec in reader]


def read_tasks(tasks: list[ReadTask]) -> list[Position]:
    out = []
    for task in tasks:
        for _, (offset, sub, _value) in read_segment(task, FileStats()):
            out.append((offset, sub))
    return out


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Position]]:
    d = tmp_path_factory.mktemp("seg")
    return d, write_log(d)


def test_every_record_read_once_for_any_split(log: tuple[Path, list[Position]]) -> None:
    directory, written = log
    segs = list_segments(directory, 10**9)
    assert len(segs) > 3
    for seg in segs:
        path = Path(seg.path)
        index = read_index(path.with_suffix(".idx"))
        full = seg.size_bytes > 3000  # all but the last, short, segment
        assert len(index) > 5 or not full  # the server indexed it
        whole = read_range(path, FrameRange(HEADER_BYTES, seg.size_bytes, None))
        positions = {p for _, p in index}
        for pieces in range(1, 40):
            ranges = split_ranges(index, seg.size_bytes, pieces)
            assert 1 <= len(ranges) <= pieces
            assert ranges[0].start == HEADER_BYTES and ranges[-1].end == seg.size_bytes
            for a, b in itertools.pairwise(ranges):
                assert a.end == b.start and b.start in positions  # contiguous, at index points
            got = [p for r in ranges for p in read_range(path, r)]
            assert got == whole  # each record once, in order
            for r in ranges[1:]:  # the index's offset is the range's first record's
                assert read_range(path, r)[0][0] == r.first_offset
        # as many ranges as asked while the index has points (one per 256 B here)
        assert len(split_ranges(index, seg.size_bytes, 4)) == 4 or not full
    whole_log = [
        p for seg in segs for p in read_range(Path(seg.path), FrameRange(36, seg.size_bytes, None))
    ]
    assert whole_log == written


@pytest.mark.parametrize("split_bytes", [None, 10**9, 4096, 1000, 300, 1])
@pytest.mark.parametrize(("after", "upto"), [(-1, 10**9), (-1, 333), (100, 450), (599, 600)])
def test_planned_tasks_read_exactly_the_window(
    log: tuple[Path, list[Position]], split_bytes: int | None, after: int, upto: int
) -> None:
    directory, written = log
    segs = list_segments(directory, upto, after)
    tasks = plan_tasks(segs, after, upto, split_bytes)
    assert [t.number for t in tasks] == list(range(len(tasks)))
    assert read_tasks(tasks) == [p for p in written if after < p[0] <= upto]
    if split_bytes in (None, 10**9):
        assert len(tasks) == len(segs)  # whole files
    elif split_bytes <= 1000 and upto - after > 300:
        assert len(tasks) > 2 * len(segs)
    # a range is left out only when the index shows it is outside the window
    for task in tasks:
        assert task.end is not None and task.start < task.end


@pytest.mark.parametrize("tasks", [1, 2, 3, 4, 7, 16, 50])
@pytest.mark.parametrize(("after", "upto"), [(-1, 10**9), (-1, 333), (100, 450), (599, 600)])
def test_balanced_read_tasks_read_exactly_the_window(
    log: tuple[Path, list[Position]], tasks: int, after: int, upto: int
) -> None:
    """plan_reads: every record of the window read once, in log order, by ranges numbered
    in that order; each task a run of consecutive ranges, across files where a task's
    share falls so; and the tasks' bytes even, within an index step (256 B) of the share."""
    directory, written = log
    segs = list_segments(directory, upto, after)
    groups = plan_reads(segs, after, upto, tasks)
    flat = [t for g in groups for t in g]
    assert [t.number for t in flat] == list(range(len(flat)))
    assert read_tasks(flat) == [p for p in written if after < p[0] <= upto]
    assert all(groups) and len(groups) <= tasks
    window = window_bytes(segs, after, upto)
    read = sum(t.end - t.start for t in flat if t.end is not None)
    assert window == read  # the planned window is what the tasks read
    share = window / tasks
    if share > 4 * 256:  # many index points per share: as many tasks as asked, even
        assert len(groups) == tasks
        for g in groups:
            assert abs(sum(t.end - t.start for t in g) - share) <= 2 * 256
    if tasks > 1 and window > 3 * 4096:
        assert any(len({t.path for t in g}) > 1 for g in groups) or tasks > 3 * len(segs)


def test_plan_reads_opens_few_indexes(
    log: tuple[Path, list[Position]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the files at the window's edges and those a cut falls in have their index read:
    a long log costs a few small reads on the driver, not one per file."""
    from snapshots.compaction import _plan

    directory, written = log
    opened: list[str] = []

    def counting(path: Path) -> list[tuple[int, int]]:
        opened.append(Path(path).name)
        return read_index(path)

    monkeypatch.setattr(_plan, "read_index", counting)
    segs = list_segments(directory, 10**9)
    assert len(segs) > 6
    groups = plan_reads(segs, -1, 10**9, 2)
    assert len(opened) <= 2  # the last file (for `upto`) and the one the midpoint falls in
    assert read_tasks([t for g in groups for t in g]) == written
    opened.clear()
    window = window_bytes(list_segments(directory, 450, 100), 100, 450)
    assert 1 <= len(opened) <= 2  # the files holding offsets 100 and 450
    assert window < window_bytes(segs, -1, 10**9)


def test_read_task_count_fills_whole_waves(monkeypatch: pytest.MonkeyPatch) -> None:
    from snapshots.compaction import _plan

    mib = 2**20
    assert read_task_count(100 * mib, 2) == 4  # two a core
    assert read_task_count(100 * mib, 1) == 2
    assert read_task_count(100 * mib, 3) == 6
    assert read_task_count(1 * mib, 2) == 2  # no task under 4 MiB, but every core busy
    assert read_task_count(10_000 * mib, 2) == 40  # none over 256 MiB
    assert read_task_count(100 * mib, 2, split_bytes=30 * mib) == 4  # 4 of 25 MiB
    assert read_task_count(100 * mib, 3, split_bytes=30 * mib) == 6
    assert read_task_count(0, 2) == 2
    for cores in (1, 2, 3, 4, 8):
        for size in (1, mib, 999 * mib, 12_345 * mib):
            n = read_task_count(size, cores)
            assert n % cores == 0 and n >= cores
            assert size / n <= _plan._MAX_SPLIT_BYTES


def test_file_without_an_index_stays_whole(tmp_path: Path) -> None:
    written = write_log(tmp_path, entries=300)
    for idx in tmp_path.glob("*.idx"):
        idx.unlink()
    segs = list_segments(tmp_path, 10**9)
    tasks = plan_tasks(segs, -1, 10**9, 200)
    assert len(tasks) == len(segs)
    assert all(t.start == HEADER_BYTES for t in tasks)
    assert read_tasks(tasks) == written
    groups = plan_reads(segs, -1, 10**9, 3)  # even shares snap to the files' edges
    assert [t for g in groups for t in g] == tasks and 1 < len(groups) <= 3
    with pytest.raises(ValueError, match="tasks"):
        plan_reads(segs, -1, 10**9, 0)
    assert read_index(tmp_path / "nothing.idx") == []
    assert split_ranges([], 5000, 8) == [FrameRange(HEADER_BYTES, 5000, None)]


def test_stale_index_costs_cuts_not_records(tmp_path: Path) -> None:
    """The index is an unsynced cache: entries pointing inside a frame or at the wrong offset
    are dropped as cuts (their ranges merge), never reported as damage."""
    written = write_log(tmp_path, entries=300)
    seg = Path(list_segments(tmp_path, 10**9)[0].path)
    idx = seg.with_suffix(".idx")
    index = read_index(idx)
    bad = [(o, p + 3) if i % 2 else (o + 1, p) for i, (o, p) in enumerate(index)]
    idx.write_bytes(b"".join(o.to_bytes(8, "little") + p.to_bytes(8, "little") for o, p in bad))
    segs = list_segments(tmp_path, 10**9)
    first = [t for t in plan_tasks(segs, -1, 10**9, 1) if t.path == str(seg.resolve())]
    assert len(first) == 1  # every cut failed its check
    assert read_tasks(plan_tasks(segs, -1, 10**9, 1)) == written
    for tasks in (2, 5, 40):  # balanced tasks: fewer cuts in that file, every record still
        groups = plan_reads(segs, -1, 10**9, tasks)
        assert read_tasks([t for g in groups for t in g]) == written
        assert len([t for g in groups for t in g if t.path == str(seg.resolve())]) == 1


def test_read_index_stops_at_garbage(tmp_path: Path) -> None:
    def entries(*pairs: Position) -> bytes:
        return b"".join(o.to_bytes(8, "little") + p.to_bytes(8, "little") for o, p in pairs)

    path = tmp_path / "x.idx"
    path.write_bytes(entries((5, 100), (5, 300), (9, 700)) + b"\x01\x02\x03")  # partial tail
    assert read_index(path) == [(5, 100), (5, 300), (9, 700)]
    path.write_bytes(entries((5, 100), (9, 700), (7, 900), (12, 1000)))  # offset goes back
    assert read_index(path) == [(5, 100), (9, 700)]
    path.write_bytes(entries((5, 100), (9, 100)))  # position does not move
    assert read_index(path) == [(5, 100)]
    path.write_bytes(entries((1, 10), (5, 100)))  # inside the header
    assert read_index(path) == []
    assert INDEX_ENTRY_BYTES == 16


def test_split_ranges_rejects_zero_pieces() -> None:
    with pytest.raises(ValueError, match="pieces"):
        split_ranges([(1, 100)], 1000, 0)


def test_bench_generator_writes_the_servers_index(tmp_path: Path) -> None:
    """bench/compact_scaling's synthetic log carries the index the server itself would
    write: opening it with the server's segment log rewrites nothing."""
    from bench.compact_scaling import generate

    generate(tmp_path, 20000, segment_bytes=512 * 1024)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.idx")}
    assert len(before) == len(list(tmp_path.glob("*.seg"))) > 2
    SegmentLog.open(
        tmp_path, SegmentConfig(segment_max_bytes=512 * 1024, fsync_policy="never")
    ).close()
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.idx")} == before


def _frames_and_error(frames: Iterator[tuple[int, int, bytes, int]]) -> tuple[list, Any]:
    out: list[tuple[int, int, bytes, int]] = []
    try:
        for frame in frames:
            out.append(frame)
    except RecordStreamError as e:
        return out, (type(e).__name__, e.position, e.reason)
    return out, None


@pytest.mark.parametrize("block", [1, 9, 100, 4096, 1 << 20])
def test_iter_frames_matches_the_record_reader(tmp_path: Path, block: int) -> None:
    """The bulk frame parser sees exactly what RecordReader sees, errors included, on a
    good file, on any byte flipped and on the data cut at any length."""
    rng = random.Random(block)
    good = b"".join(
        encode_record(o, rng.randrange(3), rng.randbytes(rng.randrange(0, 60)))
        for o in range(1, 40)
    )
    data = encode_header(StreamKind.CHANGE_LOG_SEGMENT, 1) + good
    cases = [data]
    cases += [data[:n] for n in rng.sample(range(HEADER_BYTES, len(data)), 25)]
    for at in rng.sample(range(HEADER_BYTES, len(data)), 25):
        bad = bytearray(data)
        bad[at] ^= 1 << rng.randrange(8)
        cases.append(bytes(bad))
    for case in cases:
        path = tmp_path / "s.seg"
        path.write_bytes(case)
        with open(path, "rb") as f:
            reader = RecordReader(f, path=str(path))
            expected = _frames_and_error((r.offset, r.sub, r.payload, r.position) for r in reader)
        with open(path, "rb") as f:
            got = _frames_and_error(
                iter_frames(f, HEADER_BYTES, len(case), str(path), block_bytes=block)
            )
        assert got == expected
    # a range in the middle, and `end` past the real data (the file shrank): a torn tail
    path.write_bytes(data)
    with open(path, "rb") as f:
        frames = list(iter_frames(f, HEADER_BYTES, len(data), block_bytes=block))
    mid = frames[10][3], frames[20][3]
    with open(path, "rb") as f:
        assert [fr[3] for fr in iter_frames(f, *mid, block_bytes=block)] == [
            fr[3] for fr in frames[10:20]
        ]
        with pytest.raises(TornTailError) as err:
            list(iter_frames(f, frames[-1][3], len(data) + 50, block_bytes=block))
        assert err.value.position == len(data)
