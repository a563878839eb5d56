"""The Spark compaction job against the single-process fold and a dict model.

Run with ``python -m pytest -m spark tests/spark``. The segments are written with the raw
record-stream writer (no raftlog), several files, several effects per offset, a base
snapshot in the middle of the log.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from protos.records_pb2 import Effect
from snapshots import (
    ChangeLogError,
    RecordDigest,
    SnapshotMeta,
    StreamKind,
    compact_local,
    encode_header,
    encode_record,
    inspect,
    read_snapshot,
    write_snapshot,
)
from snapshots.compaction import (
    CompactionError,
    compact_spark,
    last_term_upto,
    list_segments,
    plan_reads,
    plan_tasks,
    read_task_count,
    window_bytes,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

CLUSTER = "c-test"
REPO = Path(__file__).resolve().parents[2]

# (offset, sub, type, key, value, delete, term)
Rec = tuple[int, int, str, bytes, bytes, bool, int]


@dataclass
class Log:
    directory: Path
    records: list[Rec]

    def model(self, upto: int, after: int = -1, base: dict | None = None) -> dict:
        """The state at `upto` by applying the records in log order (the spec)."""
        state = dict(base or {})
        for offset, _sub, type_, key, value, delete, _term in self.records:
            if after < offset <= upto:
                if delete:
                    state.pop((type_, key), None)
                else:
                    state[type_, key] = value
        return state


def digest_of(state: dict) -> RecordDigest:
    digest = RecordDigest()
    for (type_, key), value in state.items():
        digest.add(type_, key, value)
    return digest


def make_log(
    directory: Path, seed: int, entries: int = 3000, files: int = 5, keys: int = 300
) -> Log:
    """Random puts/deletes over `keys` keys of three types, 1-3 effects per offset, offsets
    with gaps, split into `files` segment files (all subs of an offset in one file)."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    records: list[Rec] = []
    offset = 0
    for _ in range(entries):
        offset += rng.choice((1, 1, 1, 2))  # an entry may have no effects
        term = 1 + offset // 700
        for sub in range(rng.choice((1, 1, 2, 3))):
            type_ = rng.choice(("kv", "kv", "member", "lease"))
            key = rng.randrange(keys).to_bytes(2, "big") + (b"\xff" if type_ == "lease" else b"")
            delete = rng.random() < 0.2
            value = b"" if delete else rng.randbytes(rng.randrange(0, 40))
            records.append((offset, sub, type_, key, value, delete, term))
    cuts = sorted(rng.sample(range(1, entries), files - 1))
    offsets = sorted({r[0] for r in records})
    starts = [offsets[0]] + [offsets[c] for c in cuts]
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else None
        with open(directory / f"{start:020d}.seg", "wb") as f:
            f.write(encode_header(StreamKind.CHANGE_LOG_SEGMENT, start))
            for offset, sub, type_, key, value, delete, term in records:
                if offset >= start and (end is None or offset < end):
                    payload = Effect(type=type_, key=key, value=value, delete=delete, term=term)
                    f.write(encode_record(offset, sub, payload.SerializeToString()))
    return Log(directory, records)


def write_base(log: Log, path: Path, at: int) -> dict:
    state = log.model(at)
    write_snapshot(path, SnapshotMeta(CLUSTER, at, 1), [(t, k, v) for (t, k), v in state.items()])
    return state


def summary(info: object) -> tuple[dict, dict]:
    return dict(info.counts), dict(info.hashes)  # type: ignore[attr-defined]


# ------------------------------------------------------------------ (a) local[2]


@pytest.mark.parametrize("seed", [1, 2])
def test_spark_equals_local_fold_and_model(spark: SparkSession, tmp_path: Path, seed: int) -> None:
    log = make_log(tmp_path / "seg", seed)
    offsets = sorted({r[0] for r in log.records})
    at, upto = offsets[len(offsets) // 3], offsets[-len(offsets) // 5]
    base = write_base(log, tmp_path / "base.snap", at)
    expected = digest_of(log.model(upto, after=at, base=base))
    assert expected.record_count > 100

    meta = SnapshotMeta(CLUSTER, upto, 9)
    local = compact_local(log.directory, tmp_path / "base.snap", upto, tmp_path / "l.snap", meta)
    timings: dict[str, float] = {}
    result = compact_spark(
        log.directory,
        upto,
        tmp_path / "s.snap",
        meta,
        tmp_path / "base.snap",
        spark=spark,
        progress=False,
        partitions=3,
        timings=timings,
    )
    assert summary(result) == summary(local) == (expected.counts, expected.hashes)
    assert result.last_offset == upto and result.last_term == 9
    # every segment file that can hold records in (at, upto] read whole (no index here),
    # in as many read tasks as the cores (a tiny window), plus a task for the base
    assert timings["ranges"] == len(list_segments(log.directory, upto, at))
    assert timings["ranges"] < len(os.listdir(log.directory))  # some files never opened
    assert timings["tasks"] == 1 + spark.sparkContext.defaultParallelism
    # the written file verifies and holds exactly the model's records
    assert read_snapshot(tmp_path / "s.snap").to_dict() == log.model(upto, after=at, base=base)


def test_worker_memory_bounds_prefold_and_partitions(spark: SparkSession, tmp_path: Path) -> None:
    """A worker bound small enough that every file's pre-fold is emitted in several rounds
    (the same key leaves a file more than once) and stage 2 gets more partitions: the
    result still equals the model."""
    log = make_log(tmp_path / "seg", 4, entries=12000, files=3, keys=4000)
    offsets = sorted({r[0] for r in log.records})
    at, upto = offsets[len(offsets) // 4], offsets[-1]
    base = write_base(log, tmp_path / "base.snap", at)
    timings: dict[str, float] = {}
    result = compact_spark(
        log.directory,
        upto,
        tmp_path / "s.snap",
        SnapshotMeta(CLUSTER, upto, 2),
        tmp_path / "base.snap",
        spark=spark,
        progress=False,
        worker_memory="1m",
        timings=timings,
    )
    expected = digest_of(log.model(upto, after=at, base=base))
    assert summary(result) == (expected.counts, expected.hashes)
    assert timings["prefold_keys"] == 1024  # half of 1 MiB at 512 B a key
    # > 1024 distinct keys per file, so each pre-fold flushed at least once
    per_file = len({(r[2], r[3]) for r in log.records}) // 3
    assert per_file > 1024
    assert timings["partitions"] >= timings["input_bytes"] / (2**20 / 10)


@pytest.mark.parametrize("split_bytes", [700, 3000])
def test_split_ranges_equal_the_fold_with_a_base(
    spark: SparkSession, tmp_path: Path, split_bytes: int
) -> None:
    """Segments indexed as the server indexes them (raftlog.segments rebuilds a missing
    index on open, here every 256 bytes) and read in byte ranges much smaller than a file:
    the same snapshot as the single-process fold, with and without a base, and ranges the
    index shows at or below the base are not read at all."""
    from raftlog.segments import SegmentConfig, SegmentLog

    log = make_log(tmp_path / "seg", 21, entries=3000, files=3)
    config = SegmentConfig(index_every_bytes=256, fsync_policy="never")
    SegmentLog.open(log.directory, config).close()
    assert len(list(log.directory.glob("*.idx"))) == 3
    offsets = sorted({r[0] for r in log.records})
    at, upto = offsets[len(offsets) // 2], offsets[-10]
    base = write_base(log, tmp_path / "base.snap", at)
    for base_path, after in ((None, -1), (tmp_path / "base.snap", at)):
        meta = SnapshotMeta(CLUSTER, upto, 4)
        out = tmp_path / f"s{after}.snap"
        local = compact_local(log.directory, base_path, upto, tmp_path / "l.snap", meta)
        timings: dict[str, float] = {}
        result = compact_spark(
            log.directory,
            upto,
            out,
            meta,
            base_path,
            spark=spark,
            progress=False,
            split_bytes=split_bytes,
            timings=timings,
        )
        assert summary(result) == summary(local)
        model = log.model(upto, after=after, base=base if after >= 0 else None)
        assert read_snapshot(out).to_dict() == model
        files = len(list_segments(log.directory, upto, after))
        assert timings["ranges"] > 2 * files  # many ranges per file
        window = sum(1 for r in log.records if after < r[0] <= upto)
        assert timings["records_read"] == window  # every record in the window read once
        segs = list_segments(log.directory, upto, after)
        cores = spark.sparkContext.defaultParallelism
        tasks = read_task_count(window_bytes(segs, after, upto), cores, split_bytes)
        planned = plan_reads(segs, after, upto, tasks)
        assert timings["tasks"] == len(planned) + (after >= 0)  # + the base's task
        assert timings["ranges"] == sum(map(len, planned))
        if after >= 0:  # the ranges the index shows below the base are left out
            assert window_bytes(segs, after, upto) < window_bytes(segs, -1, upto)


def test_records_out_of_order_across_ranges_of_one_file(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Order within a file is checked by each range's task up to its end and across the
    cuts by the driver: a file whose records go back in offset right at an index point
    is refused when split there, as when it is read whole."""
    d = tmp_path / "seg"
    d.mkdir()
    data = bytearray(encode_header(StreamKind.CHANGE_LOG_SEGMENT, 1))
    index = []
    for i, offset in enumerate([*range(1, 41), *range(30, 40)]):
        if i in (20, 40):
            index.append((offset, len(data)))
        payload = Effect(type="kv", key=b"k%d" % offset, value=b"v").SerializeToString()
        data += encode_record(offset, 0, payload)
    (d / f"{1:020d}.seg").write_bytes(bytes(data))
    (d / f"{1:020d}.idx").write_bytes(
        b"".join(o.to_bytes(8, "little") + p.to_bytes(8, "little") for o, p in index)
    )
    assert len(plan_tasks(list_segments(d, 100), -1, 100, 100)) == 3  # cut at both points
    for split in (0, 100):
        out = tmp_path / f"{split}.snap"
        with pytest.raises((ChangeLogError, CompactionError), match=r"\(30, 0\) after \(40, 0\)"):
            compact_spark(
                d,
                100,
                out,
                CLUSTER,
                spark=spark,
                progress=False,
                split_bytes=split,
            )
        assert not out.exists()


def test_without_base_and_derived_meta(spark: SparkSession, tmp_path: Path) -> None:
    """Cluster id given as a string: last_term is the term of the last record <= upto."""
    log = make_log(tmp_path / "seg", 3, entries=1500, files=3)
    upto = log.records[-1][0]
    result = compact_spark(
        log.directory, upto, tmp_path / "s.snap", CLUSTER, spark=spark, progress=False
    )
    expected = digest_of(log.model(upto))
    assert summary(result) == (expected.counts, expected.hashes)
    assert result.last_term == log.records[-1][6] == last_term_upto(log.directory, upto)
    assert result.cluster_id == CLUSTER
    # cluster id from the base, base at the very end: nothing to replay
    again = compact_spark(
        log.directory,
        upto,
        tmp_path / "t.snap",
        None,
        tmp_path / "s.snap",
        spark=spark,
        progress=False,
    )
    assert summary(again) == summary(result)


def test_segments_past_upto_and_torn_tail_beyond_it(spark: SparkSession, tmp_path: Path) -> None:
    """As read_segments: a torn tail after a record past `upto` is harmless (a segment being
    written); one the reader reaches before passing `upto` is an error."""
    log = make_log(tmp_path / "seg", 4, entries=2000, files=4)
    last = max(log.directory.iterdir())
    with open(last, "ab") as f:  # a torn frame after the last record (a crash mid-write)
        f.write(encode_record(10**9, 0, b"x" * 50)[:20])
    for upto in (int(last.name[:20]) - 1, max(r[0] for r in log.records) - 1):
        out = tmp_path / f"{upto}.snap"
        result = compact_spark(log.directory, upto, out, CLUSTER, spark=spark, progress=False)
        assert summary(result) == summary(digest_of(log.model(upto)))
    upto = max(r[0] for r in log.records)
    with pytest.raises(ChangeLogError, match="TornTail"):
        compact_local(
            log.directory, None, upto, tmp_path / "l.snap", SnapshotMeta(CLUSTER, upto, 0)
        )
    with pytest.raises(CompactionError, match="TornTail") as err:
        compact_spark(
            log.directory, upto, tmp_path / "s.snap", CLUSTER, spark=spark, progress=False
        )
    assert err.value.worker_error == "ChangeLogError"


def test_corrupt_record_fails_the_job_and_writes_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    log = make_log(tmp_path / "seg", 5, entries=1000, files=2)
    seg = sorted(log.directory.iterdir())[0]
    data = bytearray(seg.read_bytes())
    data[200] ^= 0xFF
    seg.write_bytes(bytes(data))
    out = tmp_path / "s.snap"
    with pytest.raises(CompactionError) as err:
        compact_spark(log.directory, 10**6, out, CLUSTER, spark=spark, progress=False)
    assert err.value.worker_error == "ChangeLogError"
    assert seg.name in err.value.detail
    assert not out.exists() and os.listdir(tmp_path) == ["seg"]


def test_files_out_of_order_across_each_other(spark: SparkSession, tmp_path: Path) -> None:
    """A segment whose records overlap the next file's is refused (as read_segments does)."""
    d = tmp_path / "seg"
    d.mkdir()
    for start, offsets in ((0, (0, 5, 9)), (6, (6, 7))):  # file 0 reaches past file 6's start
        with open(d / f"{start:020d}.seg", "wb") as f:
            f.write(encode_header(StreamKind.CHANGE_LOG_SEGMENT, start))
            for o in offsets:
                f.write(
                    encode_record(o, 0, Effect(type="kv", key=b"k", value=b"v").SerializeToString())
                )
    with pytest.raises(Exception, match="after"):
        compact_spark(d, 100, tmp_path / "s.snap", CLUSTER, spark=spark, progress=False)
    assert not (tmp_path / "s.snap").exists()


def test_progress_bar_goes_to_the_given_stream(spark: SparkSession, tmp_path: Path) -> None:
    import io

    log = make_log(tmp_path / "seg", 6, entries=500, files=2)
    stream = io.StringIO()
    compact_spark(log.directory, 10**6, tmp_path / "s.snap", CLUSTER, spark=spark, progress=stream)
    text = stream.getvalue()
    assert "read + fold + hash" in text and "write snapshot" in text
    assert "[" + "#" * 28 + "]" in text


def test_class_archive_recorded_used_and_damage_survived(tmp_path: Path) -> None:
    """Each compaction here starts its own JVM (a fresh process): the first records the
    driver JVM's class-data-sharing archive (moved into place only after the JVM exited),
    the second starts from it, and a damaged archive (which crashes a JVM) is dropped and
    the job runs without it, leaving no crash report in the caller's directory."""
    log = make_log(tmp_path / "seg", 11, entries=800, files=2)
    upto = max(r[0] for r in log.records)
    cache = tmp_path / "cache"
    script = (
        "import json, sys\n"
        "from snapshots.compaction import compact_spark\n"
        "t = {}\n"
        "info = compact_spark(sys.argv[1], int(sys.argv[2]), sys.argv[3], 'c', master='local[1]',"
        " progress=False, timings=t, class_archive_dir=sys.argv[4])\n"
        "print(json.dumps({'hashes': dict(info.hashes), 'session_s': t['session_s']}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def run(name: str) -> dict:
        proc = subprocess.run(
            [sys.executable, "-c", script, str(log.directory), str(upto), name, str(cache)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    expected = digest_of(log.model(upto)).hashes
    first = run("a.snap")
    archives = list(cache.iterdir())
    assert [a.suffix for a in archives] == [".jsa"] and archives[0].stat().st_size > 10**6
    second = run("b.snap")
    assert first["hashes"] == second["hashes"] == expected
    assert list(cache.iterdir()) == archives  # used, not recorded again
    # damaged as a new file (truncating it in place would SIGBUS a JVM still mapping it,
    # e.g. the last run's, which exits after its Python process)
    damaged = tmp_path / "damaged.jsa"
    damaged.write_bytes(archives[0].read_bytes()[: archives[0].stat().st_size // 3])
    os.replace(damaged, archives[0])
    assert run("c.snap")["hashes"] == expected
    assert not any(cache.iterdir())  # dropped; the next run records a new one
    assert not list(tmp_path.glob("hs_err*"))


def test_snapshot_inspect_cli(tmp_path: Path) -> None:
    log = make_log(tmp_path / "seg", 8, entries=300, files=1)
    write_base(log, tmp_path / "b.snap", max(r[0] for r in log.records))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nameserver.cli",
            "snapshot",
            "inspect",
            str(tmp_path / "b.snap"),
            "--output",
            "json",
            "--verify",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    info = inspect(tmp_path / "b.snap")
    assert doc["last_offset"] == info.last_offset and doc["last_term"] == 1
    assert (doc["counts"], doc["hashes"]) == summary(info)
