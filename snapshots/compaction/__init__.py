"""Offline compaction on Spark (docs/operations.md, "Offline compaction"): base snapshot +
change-log segments up to an offset -> a new snapshot, with the same per-type counts and content
hashes as the snapshot the server writes at that offset (and as :func:`snapshots.compact_local`).

Plan of :func:`compact_spark` (classic PySpark RDDs on a bare SparkContext; no pandas,
pyarrow or SparkSession needed)::

    driver       lists the segment FILE NAMES (and sizes) only; reads the base's header;
                 plans the read tasks (plan_reads): the window's bytes (by each file's
                 sparse offset index, <first-offset>.idx: from the last point at or below
                 `after` to the first past `upto`) cut into T even shares at index points,
                 within or across files, each cut checked by reading the one frame there;
                 T = 2 per core by default, 4-256 MiB each, a multiple of the cores
    stage 1      one task per share (+ one for the base snapshot): the worker opens each of
                 its ranges itself from the shared path, checks header/CRC/order like
                 read_segments (iter_frames: the block-wise frame parser), decodes the
                 effects in (after, upto] and keeps each key's last record in its share
                 (its ranges are in log order and positions strictly increase within a
                 file, so that is its newest; tombstones kept, at most ~1 M keys at a time):
                 ((type, key), (offset, sub, value | None)); base records are
                 ((type, key), (base offset, -1, value))
    shuffle      partitionBy crc32(type, key) -> P partitions, P >= 2 x cores (the log is
                 partitionable by key because it holds effects, not operations)
    stage 2      per partition: the replay rule of snapshots._replay on the versions
                 (greatest (offset, sub) wins across ranges, a winning delete drops the key,
                 the base underneath at (base offset, -1)); a RecordDigest per partition,
                 merged on the driver
    stage 3      per partition: the survivors encoded as snapshot frames (encode_frames),
                 numbered from the partition's first record by the stage-2 digests'
                 counts, in ~1 MiB chunks, then the digest of what they hold
    write        the chunks come to the driver a wave of partitions at a time (one job a
                 wave, every core encoding; the next wave computed while this one is
                 written) into write_snapshot_frames(), whose meta already carries the
                 merged counts and hashes: the driver only copies, and checks the encoders'
                 digests against the meta's (hashes are order-independent). The driver
                 encoding every record itself was the job's longest serial part (2-3 s of
                 ~28 at 1e7 entries on local[2])

Only the survivors' frames pass through the driver (they must: the snapshot is one file);
the log itself never does. Per-task stats (first/last position, term, records read and
shuffled) come back in an accumulator so the driver can check the ranges are in log order
across each other, as read_segments does. A task's size trades pre-fold for parallelism: a
smaller task folds fewer repeats of a key, so more records cross the shuffle (1e7 entries:
3.6 M with 4 tasks, 5.4 M with 8, 6.6 M with 14); hence 2 tasks per core, not more, cut
across files rather than one per file (14 tasks of whole 64 MiB files, the last short, ran
7 waves on one core and 6 and a bit on the other).

Spark settings and the JVM start: :mod:`._session`.

Numbers (``bench/compact_scaling.py --sizes 1e5,1e6,1e7 --warm-jobs 3``; 2 shared cores;
upto = 0.9 N, 10 % deletes, 64 MiB segments, no base; -20-38-43.md). Wall = the whole run in
a fresh process; job = the first job once the context is up; warm = the same job again on
that context (what a long-running Spark cluster pays per job); x = per entry against the
fold's wall time; cpu1 = local[1] with its whole process tree confined to one CPU::

    N     fold     local[1] warm   cpu1 warm   local[2]: wall / job / warm      1 CPU -> 2, warm
    1e5   0.5 s    0.6 s           0.8 s       4.3 / 1.9 / 0.6 s (9.0x / 1.15x)  no gain (fixed cost)
    1e6   4.6 s    4.1 s           4.5 s       6.3 / 3.9 / 2.4 s (1.36x / 0.51x) 1.88x (1.73x from local[1])
    1e7   49.9 s   40.8 s          43.2 s      27.2 / 24.8 / 22.7 s (0.55x / 0.45x) 1.91x (1.80x)

At 1e7 the first job scales 1.84x from one CPU (1.69x from local[1], which keeps 1.03 cores
busy: the JVM's threads and the driver beside its task), the whole run 1.78x (1.62x). The
same read work in two bare processes runs 2.02x as fast as in one (bench/compact_ceiling.py);
what Spark loses: each stage-1 task ~8 % longer in a worker than bare and ~15 % longer again
beside another (32.1 -> 37.0 task-s: the JVM's threads moving the shuffle share the two
CPUs), the JVM start (1.3 s) and the write (2.0 s). At 1e5 the job is ~0.6 s of mostly fixed
cost. History: one task per file, 1e7 local[2] 47.2 s / 78 CPU-s (-10-08-59.md); with the
block-wise frame parser, the stage-2 fold on versions, the GC paused in the folds and no SQL
31.9 s / 53 CPU-s (-11-38-31.md); with frames encoded on the executors 29.5 s (-19-16-38.md);
with even read shares across files 27.2 s / 49 CPU-s.

Memory (-10-11-39.md): the fold holds ~500-540 B per live key, whatever the log length;
Spark's tree is bounded by the JVM heap plus `worker_memory` per Python worker. 1e7 entries
with 50 % distinct keys (3.76 M live): fold 1906 MB; under a 1024 MB budget the fold
(RLIMIT_AS) raised MemoryError after 16 s, and local[2] with driver_memory 512m and
worker_memory 64m (140 partitions, pre-fold 65,536 keys) finished in 66 s at 956 MB peak RSS
(912 MB PSS), hashes equal to the unbounded fold. Without the bound local[2] peaked at
1273 MB. On this 23.5 GB box the fold stops fitting at about 4.5e7 live keys (~4.5e8
entries at 10 % distinct), an extrapolation.

Parquet copy of sealed segments: NOT implemented. Measured (bench ``--parquet``): pyarrow
converting a 64 MiB segment costs the server 2.2-4.2 s of CPU per seal (32-37 s per 1e7
entries) and pulls pyarrow (~170 MB) into the server; compacting from Parquet (JVM
groupBy/max_by with the full JIT, Python only hashing and writing the survivors) then took
82 s wall / 85 CPU-s / 1.7 GB at 1e7 against 51-96 s / 84-88 CPU-s / 1.4 GB for the binary
path of then (31.9 s / 53 CPU-s now), and was slower at 1e5 and 1e6 (14.0 s and 21.9 s).
Parsing segments in Python is real work here (~1-1.5 us per record with iter_frames, plus
the pre-fold), but the JVM read + groupBy that replaces it cost as much on this box, and
the rest (hashing, pickling the survivors, the session) is shared by both paths. Revisit only
if a profile on a many-core cluster says otherwise; the binary-segment path stays either way.

Modules: ``_plan`` (the driver's plan: segment files, read tasks, partition counts),
``_worker`` (what runs on the executors: read and pre-fold, partitioner, fold, digest,
frame encoding), ``_session`` (the SparkContext, its JVM and the workers' Python),
``_progress`` (the bar), ``_job`` (:func:`compact_spark`), ``_extent`` (:func:`log_end`:
where a segment directory's log ends, for checking a job's inputs before it starts),
``_errors`` (:class:`CompactionError`, a :class:`snapshots.SnapshotError`). The stage
functions are public so that benchmarks can run a stage's work outside Spark. This package
imports neither ``raftlog`` nor ``nameserver``.
"""

from snapshots.compaction._errors import CompactionError
from snapshots.compaction._extent import LogEnd, log_end
from snapshots.compaction._job import compact_spark
from snapshots.compaction._plan import (
    ReadTask,
    SegmentFile,
    list_segments,
    plan_reads,
    plan_tasks,
    read_task_count,
    shuffle_partitions,
    window_bytes,
)
from snapshots.compaction._session import (
    DEFAULT_MASTER,
    default_class_archive_dir,
    finish_class_archive,
    make_spark_context,
    make_spark_session,
    parse_memory_size,
    worker_python,
)
from snapshots.compaction._worker import (
    FileStats,
    StateKey,
    StatsSink,
    Version,
    digest_partition,
    fold_versions,
    last_term_upto,
    partition_of,
    read_segment,
    read_stage,
)

__all__ = [
    "DEFAULT_MASTER",
    "CompactionError",
    "FileStats",
    "LogEnd",
    "ReadTask",
    "SegmentFile",
    "StateKey",
    "StatsSink",
    "Version",
    "compact_spark",
    "default_class_archive_dir",
    "digest_partition",
    "finish_class_archive",
    "fold_versions",
    "last_term_upto",
    "list_segments",
    "log_end",
    "make_spark_context",
    "make_spark_session",
    "parse_memory_size",
    "partition_of",
    "plan_reads",
    "plan_tasks",
    "read_segment",
    "read_stage",
    "read_task_count",
    "shuffle_partitions",
    "window_bytes",
    "worker_python",
]
