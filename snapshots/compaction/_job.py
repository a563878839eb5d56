"""The compaction job, :func:`compact_spark`: checks the inputs, plans the read tasks
(:mod:`._plan`), runs the stages (:mod:`._worker`) on a SparkContext (:mod:`._session`),
checks the tasks' order from their stats, and writes the snapshot from the executors'
frames a wave of partitions at a time. The plan and its measurements are in the package
docstring.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from snapshots._digest import RecordDigest
from snapshots._format import SnapshotError, SnapshotInfo, SnapshotMeta, SnapshotRecord
from snapshots._reader import inspect
from snapshots._replay import ChangeLogError
from snapshots._writer import write_snapshot_frames
from snapshots.compaction._errors import CompactionError
from snapshots.compaction._plan import (
    BYTES_PER_PARTITION,
    ReadTask,
    list_segments,
    plan_spans,
    plan_tasks,
    read_task_count,
    shuffle_partitions,
    span_bytes,
    window_spans,
)
from snapshots.compaction._progress import ProgressBar
from snapshots.compaction._session import (
    DEFAULT_MASTER,
    default_class_archive_dir,
    finish_class_archive,
    make_spark_context,
    parse_memory_size,
)
from snapshots.compaction._worker import (
    digest_partition,
    encode_partitions,
    fold_versions,
    gc_paused,
    partition_of,
    read_stage,
)

if TYPE_CHECKING:
    from pyspark import RDD, SparkContext
    from pyspark.sql import SparkSession

__all__ = ["compact_spark", "in_waves"]

#: Partitions encoded at once for the write (a wave; the driver holds up to three), at
#: most this many whatever the cores, so the driver's memory does not grow with the cluster.
_WRITE_WAVE_MAX = 8
#: Memory of one folded key in a Python dict (the single-process fold measured 505-541 B
#: per live key with 20 B keys and 16-64 B values; the pre-fold's entries are alike).
_FOLD_BYTES_PER_KEY = 512
#: Pre-fold size without a worker memory bound: ~1 M keys, ~0.5 GB of dict (a read task of
#: up to _MAX_SPLIT_BYTES can hold several times that many distinct keys).
_PREFOLD_KEYS_DEFAULT = 2**20


def _identity(items: Iterable[Any]) -> Iterable[Any]:
    return items


def in_waves(sc: SparkContext, rdd: RDD[Any], wave: int, group: str) -> Iterator[Any]:
    """The items of `rdd`'s partitions in partition order, computed `wave` partitions at a
    time by one job each (every core busy), the next wave's job running in a thread (in
    job group `group`, for the progress bar) while the caller consumes this one's: the
    driver holds at most three waves. toLocalIterator runs one partition at a time
    (prefetching one): the executors' encoding used ~1.5 of 2 cores, and would use ~1.5 of
    any number. A job's error is raised here; closing the generator early waits for the
    running wave."""
    n = rdd.getNumPartitions()
    done: queue.Queue[tuple[list[Any] | None, BaseException | None]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def run() -> None:
        try:
            sc.setJobGroup(group, "compaction: write")
            for lo in range(0, n, max(1, wave)):
                if stop.is_set():
                    return
                done.put((sc.runJob(rdd, _identity, range(lo, min(n, lo + wave))), None))
        except BaseException as e:  # handed to the consumer, raised there
            done.put((None, e))
            return
        done.put((None, None))

    thread = threading.Thread(target=run, name="compaction-write-waves", daemon=True)
    thread.start()
    try:
        while True:
            items, error = done.get()
            if error is not None:
                raise error
            if items is None:
                return
            yield from items
    finally:
        stop.set()
        while thread.is_alive():  # unblock a put, let the running wave end
            with contextlib.suppress(queue.Empty):
                done.get(timeout=0.1)
        thread.join()


def _make_stats_param() -> Any:
    from pyspark.accumulators import AccumulatorParam

    class StatsParam(AccumulatorParam[dict[int, tuple[Any, ...]]]):
        """Per file index; idempotent merge, so a retried task does no harm."""

        def zero(self, value: dict[int, tuple[Any, ...]]) -> dict[int, tuple[Any, ...]]:
            return {}

        def addInPlace(
            self, v1: dict[int, tuple[Any, ...]], v2: dict[int, tuple[Any, ...]]
        ) -> dict[int, tuple[Any, ...]]:
            v1.update(v2)
            return v1

    return StatsParam()


def _worker_error(exc: BaseException) -> tuple[str | None, str]:
    """The exception a Python worker raised, as (class name, message), from Spark's text."""
    text = str(exc)
    found = re.findall(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception)): (.*)$", text, re.MULTILINE)
    for name, message in reversed(found):
        if name not in ("Py4JJavaError", "PythonException", "SparkException"):
            return name, message
    return None, text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def compact_spark(
    segments_dir: str | os.PathLike[str],
    upto: int,
    out_path: str | os.PathLike[str],
    meta: SnapshotMeta | str | None = None,
    base_snapshot: str | os.PathLike[str] | None = None,
    *,
    master: str = DEFAULT_MASTER,
    progress: bool | IO[str] = True,
    spark: SparkSession | SparkContext | None = None,
    partitions: int | None = None,
    log_level: str = "ERROR",
    fast_jvm: bool = True,
    driver_memory: str | None = None,
    executor_memory: str | None = None,
    worker_memory: str | None = None,
    conf: Mapping[str, str] | None = None,
    timings: dict[str, float] | None = None,
    split_bytes: int | None = None,
    read_tasks: int | None = None,
    class_archive: bool = True,
    class_archive_dir: str | os.PathLike[str] | None = None,
) -> SnapshotInfo:
    """Compact a base snapshot (or nothing) and the segments' records up to `upto` into a
    snapshot at `out_path` on Spark; the result hashes as :func:`snapshots.compact_local`'s.

    `meta`: a :class:`SnapshotMeta` whose last_offset is `upto` (its counts and hashes are
    ignored: the job computes them); or a cluster id (str), or None for the base's cluster
    id, in which case last_term is the term of the last record at or below `upto` (the
    base's when there is none) and raft_index is 0. The base must belong to the cluster and
    not be newer than `upto`.

    `spark`: an existing SparkSession or SparkContext to run on (not stopped afterwards;
    `master`, `log_level`, `fast_jvm`, `driver_memory` and `conf` are then ignored); else a
    context is made with :func:`make_spark_context` and stopped at the end. `segments_dir`
    (and the base) must be readable at the same path on every executor. `partitions`:
    shuffle partitions (default max(2 x default parallelism, input bytes / 128 MiB), rounded
    up to a multiple of the default parallelism).
    `read_tasks`: how many read tasks (default :func:`read_task_count`: about `split_bytes`
    of the window each, default 2 per core between 4 and 256 MiB, rounded up to a multiple
    of the default parallelism), each an even share of the window's bytes cut at index
    points, within or across files (:func:`plan_reads`); `split_bytes` 0 instead gives one
    task per whole file. `class_archive`: when this call starts the JVM, use (or, the first
    time, record) a class-data-sharing archive of the driver JVM in `class_archive_dir`
    (default ``$METALEDGER_SPARK_CACHE`` or ``~/.cache/metaledger``): ~1.5 CPU-s less at
    every later start; the recording run pays the JVM's dump at exit. `progress`: a bar on
    stderr (True),
    on a given stream, or nothing (False). `timings`, when given, receives the phases'
    wall times in seconds (session, fold, write).

    Memory: `driver_memory` is the JVM heap of the driver (and, on ``local[N]``, of the
    executor too: Spark refuses less than ~450 MiB); `executor_memory` the executors' heap
    on a cluster. `worker_memory` (e.g. ``128m``) bounds each Python worker: it is Spark's
    ``spark.python.worker.memory`` (the shuffle write's buckets spill at half of it), caps
    the per-file pre-fold at half of it in keys, and raises the partition count so that a
    partition's stage-2 fold (its keys) fits the other half; without it a worker holds up
    to a whole segment's keys. The driver's Python holds one partition of survivors at a
    time while writing.

    Raises ValueError for misuse, SnapshotCorruptError for a bad base header,
    ChangeLogError when the files are out of order across each other, CompactionError
    when the job fails (a worker's ChangeLogError or SnapshotCorruptError is named in it),
    SnapshotMismatchError if the written records disagree with the computed digest,
    OSError; nothing is written at `out_path` on error.
    """
    t_start = time.monotonic()
    base_info = inspect(base_snapshot) if base_snapshot is not None else None
    if isinstance(meta, SnapshotMeta):
        if meta.last_offset != upto:
            raise ValueError(f"meta.last_offset {meta.last_offset} is not upto {upto}")
        cluster_id = meta.cluster_id
    elif meta is None:
        if base_info is None:
            raise ValueError("give a cluster id (or a meta) when there is no base snapshot")
        cluster_id = base_info.cluster_id
    else:
        cluster_id = meta
    after = -1
    if base_info is not None:
        if base_info.cluster_id != cluster_id:
            raise ValueError(
                f"base snapshot {base_snapshot} is of cluster {base_info.cluster_id!r}, "
                f"not {cluster_id!r}"
            )
        if base_info.last_offset > upto:
            raise ValueError(
                f"base snapshot {base_snapshot} is at offset {base_info.last_offset}, past {upto}"
            )
        after = base_info.last_offset
    worker_bytes = parse_memory_size(worker_memory) if worker_memory else None
    prefold_keys = (
        max(1024, worker_bytes // 2 // _FOLD_BYTES_PER_KEY)
        if worker_bytes
        else _PREFOLD_KEYS_DEFAULT
    )
    # Input bytes per stage-2 partition: a segment record is ~100 B and a folded key ~5x
    # that, so w/10 of input keeps the partition's fold under w/2 even if no key repeats.
    partition_bytes = min(BYTES_PER_PARTITION, worker_bytes // 10) if worker_bytes else None
    if worker_memory:
        conf = {**(conf or {}), "spark.python.worker.memory": worker_memory}
    segments = list_segments(segments_dir, upto, after)
    input_bytes = sum(seg.size_bytes for seg in segments)
    if base_info is not None:
        input_bytes += base_info.size_bytes

    stream: IO[str] | None = (
        (sys.stderr if progress is True else None) if isinstance(progress, bool) else progress
    )
    work_dir = None
    own_session = spark is None
    if spark is None:
        work_dir = tempfile.mkdtemp(prefix="metaledger-compact-")
        if stream is not None:
            stream.write(f"compact: starting Spark ({master}) ...\n")
            stream.flush()
        spark = make_spark_context(
            master,
            work_dir=work_dir,
            class_archive_dir=(class_archive_dir or default_class_archive_dir())
            if class_archive
            else None,
            log_level=log_level,
            fast_jvm=fast_jvm,
            driver_memory=driver_memory,
            executor_memory=executor_memory,
            conf=conf,
        )
    from pyspark import SparkContext, StorageLevel

    sc = spark if isinstance(spark, SparkContext) else spark.sparkContext
    group = f"metaledger-compact-{uuid.uuid4().hex[:8]}"
    bar = ProgressBar(sc, group, stream)
    t_session = time.monotonic()
    survivors: RDD[SnapshotRecord] | None = None
    try:
        sc.setJobGroup(group, f"compact {segments_dir} up to {upto}")
        cores = sc.defaultParallelism
        n_parts = partitions or shuffle_partitions(input_bytes, cores, partition_bytes)
        if read_tasks is not None and split_bytes is not None:
            raise ValueError("give read_tasks or split_bytes, not both")
        if split_bytes == 0:
            groups = [[task] for task in plan_tasks(segments, after, upto)]
        else:
            spans = window_spans(segments, after, upto)  # the edge files' indexes, once
            if read_tasks is None:
                read_tasks = read_task_count(span_bytes(spans), cores, split_bytes)
            groups = plan_spans(spans, after, upto, read_tasks) if spans else []
        tasks = [task for group in groups for task in group]
        # Longest first, so the last wave is short: Spark starts partitions in order.
        ordered = sorted(groups, key=lambda g: sum(t.start - (t.end or 0) for t in g))
        if base_snapshot is not None and base_info is not None:
            base_task = ReadTask(-1, str(Path(base_snapshot).resolve()), after, after, upto)
            ordered.insert(0, [base_task])
        stats_acc = sc.accumulator({}, _make_stats_param())
        survivors = (
            sc.parallelize(ordered, max(1, len(ordered)))
            .mapPartitions(read_stage(stats_acc, prefold_keys))
            .partitionBy(n_parts, partition_of)
            .mapPartitions(fold_versions)
            .persist(StorageLevel.MEMORY_AND_DISK)  # hashed, then written: computed once
        )
        bar.spark_phase("read + fold + hash")
        try:
            parts = survivors.mapPartitions(digest_partition).collect()
            digest = RecordDigest.combine(parts)
        except Exception as e:
            name, detail = _worker_error(e)
            raise CompactionError(
                f"compaction job failed: {name or 'error'}: {detail}", name, detail
            ) from e
        stats = stats_acc.value
        last_term = _check_order(tasks, stats)
        t_fold = time.monotonic()
        if isinstance(meta, SnapshotMeta):
            out_meta = dataclasses.replace(meta, counts=None, hashes=None).with_digest(digest)
        else:
            term = last_term if last_term is not None else (base_info.last_term if base_info else 0)
            out_meta = SnapshotMeta(cluster_id, upto, term).with_digest(digest)
        bar.count_phase("write snapshot", digest.record_count, "records")
        # the executors encode the frames, numbered across partitions in order; the driver
        # only copies them into the file and checks the digests they come with
        firsts = [1]
        for part in parts[:-1]:
            firsts.append(firsts[-1] + part.record_count)
        frames = survivors.mapPartitionsWithIndex(encode_partitions(upto, firsts))
        written = RecordDigest()

        def chunks() -> Iterator[tuple[bytes, int]]:
            for item in in_waves(sc, frames, min(cores, _WRITE_WAVE_MAX), group):
                if isinstance(item, RecordDigest):
                    written.merge(item)
                else:
                    yield item

        try:
            with gc_paused():
                info = write_snapshot_frames(
                    out_path, out_meta, chunks(), written, progress=bar.advance
                )
        except SnapshotError:
            raise
        except Exception as e:
            if type(e).__module__.startswith(("pyspark", "py4j")):
                name, detail = _worker_error(e)
                raise CompactionError(
                    f"compaction job failed while writing: {name or 'error'}: {detail}",
                    name,
                    detail,
                ) from e
            raise
        t_write = time.monotonic()
    finally:
        bar.close()
        if survivors is not None:
            with contextlib.suppress(Exception):
                survivors.unpersist()
        if own_session:
            sc.stop()
            finish_class_archive()
            if work_dir is not None:
                shutil.rmtree(work_dir, ignore_errors=True)
    if timings is not None:
        timings.update(
            session_s=t_session - t_start,
            fold_s=t_fold - t_session,
            write_s=t_write - t_fold,
            total_s=time.monotonic() - t_start,
            partitions=n_parts,
            input_bytes=input_bytes,
            tasks=len(ordered),
            ranges=len(tasks),
            records_read=sum(v[3] for v in stats.values()),
            records_shuffled=sum(v[4] for v in stats.values()),
            prefold_keys=min(prefold_keys, 2**31),
        )
    return info


def _check_order(tasks: list[ReadTask], stats: Mapping[int, tuple[Any, ...]]) -> int | None:
    """Raise ChangeLogError unless each task's records come after the previous task's, in
    log order (what read_segments checks as it goes); the term of the last record after the
    base, or None."""
    prev: tuple[int, int] | None = None
    prev_path = ""
    term = None
    for task in tasks:
        first, last, last_term, records, _ = stats.get(task.number, (None, None, 0, 0, 0))
        if first is None:
            continue
        if prev is not None and tuple(first) <= prev:
            raise ChangeLogError(
                task.path,
                task.start,
                f"record {tuple(first)} after {prev} (the end of {prev_path})",
            )
        prev, prev_path = tuple(last), task.path
        if records:
            term = last_term
    return term
