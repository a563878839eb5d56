"""Offline compaction scaling: Spark (local[1], local[2]) against the single-process fold.

    python -m bench.compact_scaling [--sizes 1e5,1e6,1e7] [--engines local,spark1,spark2]
                                    [--parquet] [--data-dir DIR] [--timeout-s 900]
                                    [--distinct 0.1] [--memory-budget-mb MB] [--warm-jobs 1]

For each size N a synthetic change log is written with the raw record-stream writer into
``<data-dir>/n<N>/seg`` (64 MiB segments, like the server's default): entry i has one effect
at offset i; keys are drawn uniformly from N/10 ids (so ~10 % distinct), 10 % of the effects
are deletes, values are 16-64 random bytes, 90 % type ``kv`` and 10 % ``member``, the term
rises every N/50 entries. Every engine compacts up to ``upto = 0.9 N`` (no base snapshot),
each in a fresh child process, and all must produce the same counts and hashes.

Measured per run: wall time of the child (Spark: session start included, and split into
session / fold / write), CPU seconds and peak memory of the whole process tree (driver, JVM,
Python workers), sampled every 0.1 s: the sum of RSS (an upper bound: forked workers share
pages) and the sum of PSS (every 2 s and while the RSS rises; a JVM's smaps are dear). A Spark
child then runs the same job again ``--warm-jobs`` times (default 1) on the context it
started, reported as "warm job": what a job costs a long-running cluster, whose JVM, context
and Python workers are already up (wall and CPU stop at the first job). Engines:

    local           snapshots.compact_local (one process, a dict of the live keys)
    spark1/spark2   snapshots.compaction.compact_spark on local[1] / local[2] (C1 JIT and
                    serial GC, the job's default); ``spark2-full``: default JIT and GC;
                    ``spark1-cpu1``: local[1] with the child's whole process tree (JVM and
                    Python workers) confined to one CPU (sched_setaffinity), i.e. one core
    (--parquet)     parquet2-full: the alternative of a Parquet copy of each sealed segment:
                    pyarrow converts every segment (timed separately: the server's extra
                    cost per seal), then Spark local[2] folds in the JVM (DataFrame max_by,
                    default JIT since the work is in the JVM) and Python only hashes and
                    writes the survivors. Needs pyarrow on PYTHONPATH (``--pyarrow-path``),
                    which is not a project dependency.

The memory line (``--memory-budget-mb B``) adds two rows per size with the same budget:

    local@B         the fold with its address space limited to B MB (RLIMIT_AS, which for
                    this process is its RSS + ~30 MB of mappings); it either completes or
                    reports ``MemoryError`` (its own status, not a crash). When the failed
                    allocation is protobuf's (upb allocates each Effect's arena with
                    malloc and does not survive NULL) the child dies of SIGSEGV instead,
                    reported as ``killed by SIGSEGV``: seen in 1 of 8 runs at a 60 MB
                    budget and once at 1 GB (-21-01-58.md), where the dict's resizes are
                    the large requests; either way the fold did not fit the budget
    spark2@B        Spark local[2] with a 512 MiB JVM heap (Spark's floor for local mode),
                    Python workers bounded by ``--budget-worker-memory`` (the job's
                    ``worker_memory``: spill and smaller folds) and C1 JIT; the process
                    tree's peak RSS and PSS are compared with B (RLIMIT_AS cannot bound a
                    JVM, which reserves gigabytes of address space it never touches)

Writes ``bench/results/compact_scaling-<date>.json`` and ``.md`` and, when matplotlib is
installed (``pip install -e .[bench]``), a ``.png`` of time and memory against N.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import RESULTS_DIR, result_stem, timestamp, write_report

SEGMENT_BYTES = 64 * 1024 * 1024
INDEX_EVERY_BYTES = 4096
ENGINES = ("local", "spark1", "spark1-cpu1", "spark2")
CLUSTER = "bench"
#: The child's exit status when the fold ran out of its memory budget (MemoryError).
EXIT_MEMORY = 3
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")
#: PSS every 2 s, and while the RSS sets new peaks every tick, or every 0.5 s when the
#: read is dear: summing a JVM's smaps_rollup costs ~12 ms of CPU (and takes the JVM's
#: memory-map lock), which at every 0.5 s throughout took ~2.5 % of a core from the run
#: measured; a Python process's costs ~0.1 ms.
_PSS_EVERY_TICKS = 20
_PSS_RISING_TICKS = 5
_PSS_CHEAP_S = 0.002


# --------------------------------------------------------------------------- data


def generate(
    directory: Path,
    n: int,
    seed: int = 7,
    segment_bytes: int = SEGMENT_BYTES,
    distinct: float = 0.1,
) -> dict[str, Any]:
    """Write the synthetic change log of `n` entries (see the module docstring), with the
    sparse offset index the server writes beside each segment (an entry for the first frame
    at least INDEX_EVERY_BYTES after the previous one; raftlog.segments' default)."""
    import struct

    from protos.records_pb2 import Effect
    from snapshots import HEADER_BYTES, StreamKind, encode_header, encode_record

    index_entry = struct.Struct("<QQ")
    index: list[bytes] = []
    indexed_at = HEADER_BYTES

    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    keys = max(1, int(n * distinct))
    term_every = max(1, n // 50)
    files = 0
    total = 0
    out = None
    size = 0
    ts = 1_700_000_000_000
    effect = Effect()
    chunk: list[bytes] = []
    randbytes = rng.randbytes
    randrange = rng.randrange
    random_ = rng.random
    for offset in range(n):
        k = randrange(keys)
        effect.Clear()
        effect.type = "member" if k % 10 == 0 else "kv"
        effect.key = b"/registry/topic/%09d" % k
        if random_() < 0.1:
            effect.delete = True
        else:
            effect.value = randbytes(16 + randrange(49))
        effect.term = 1 + offset // term_every
        effect.timestamp_ms = ts + offset
        frame = encode_record(offset, 0, effect.SerializeToString())
        if out is None or size + len(frame) > segment_bytes:
            if out is not None:
                out.write(b"".join(chunk))
                chunk.clear()
                out.close()
                Path(out.name).with_suffix(".idx").write_bytes(b"".join(index))
            out = open(directory / f"{offset:020d}.seg", "wb")
            header = encode_header(StreamKind.CHANGE_LOG_SEGMENT, offset)
            out.write(header)
            size = len(header)
            index, indexed_at = [], HEADER_BYTES
            files += 1
        if size - indexed_at >= INDEX_EVERY_BYTES:
            index.append(index_entry.pack(offset, size))
            indexed_at = size
        chunk.append(frame)
        size += len(frame)
        total += len(frame)
        if len(chunk) >= 4096:
            out.write(b"".join(chunk))
            chunk.clear()
    if out is not None:
        out.write(b"".join(chunk))
        out.close()
        Path(out.name).with_suffix(".idx").write_bytes(b"".join(index))
    return {"entries": n, "files": files, "bytes": total, "distinct": distinct}


def dataset(root: Path, n: int, distinct: float = 0.1) -> tuple[Path, dict[str, Any]]:
    """The segments of size `n` under `root`, generated once (kept while `root` is)."""
    name = f"n{n}" if distinct == 0.1 else f"n{n}-d{distinct:g}"
    seg = root / name / "seg"
    marker = root / name / "dataset.json"
    if marker.exists():
        return seg, json.loads(marker.read_text())
    t0 = time.monotonic()
    info = generate(seg, n, distinct=distinct)
    info["generate_s"] = round(time.monotonic() - t0, 2)
    marker.write_text(json.dumps(info))
    return seg, info


# --------------------------------------------------------------------------- process tree


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(name))
    return tree


def _kids(pid: int) -> list[int] | None:
    """`pid`'s children from /proc/PID/task/*/children (no scan of all of /proc), or None
    where the kernel does not offer that file."""
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids.extend(int(k) for k in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return None
        except OSError:
            continue
    return kids


def _tree(root: int) -> list[int]:
    """`root` and its descendants. The sampler runs this every tick beside the run it
    measures, so it asks each process for its children (a JVM's threads included) rather
    than reading every process's stat (~1 ms a tick on this box)."""
    tree: dict[int, list[int]] | None = None
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        kids = _kids(pid) if tree is None else None
        if kids is None:
            tree = tree if tree is not None else _children()
            kids = tree.get(pid, [])
        todo.extend(kids)
    return out


def _read_int_field(path: str, field: bytes) -> int:
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class TreeSampler:
    """Peak RSS/PSS sums and CPU time of a process and its descendants."""

    def __init__(self, pid: int, mark: Path | None = None) -> None:
        self.pid = pid
        self.mark = mark  # when this file appears: note the time and the CPU so far
        self.marked: tuple[float, float] | None = None
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_parts: dict[str, int] = {}
        self._cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        last_pss = -_PSS_EVERY_TICKS
        pss_cost = 0.0
        while not self._stop.is_set():
            pids = _tree(self.pid)
            rss = 0
            parts: dict[str, int] = {}
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/stat", "rb") as f:
                        stat = f.read()
                    with open(f"/proc/{pid}/comm", "rb") as f:
                        comm = f.read().strip().decode(errors="replace")
                except OSError:
                    continue
                fields = stat[stat.rindex(b")") + 2 :].split()
                self._cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICK
                r = int(fields[21]) * _PAGE
                rss += r
                kind = "java" if comm == "java" else "python"
                parts[kind] = parts.get(kind, 0) + r
            rising = rss > self.peak_rss
            if rising:
                self.peak_rss, self.peak_parts = rss, parts
            if self.mark is not None and self.marked is None and self.mark.exists():
                self.marked = (time.monotonic(), self.cpu_s)
            wait = _PSS_RISING_TICKS if pss_cost > _PSS_CHEAP_S else 1
            if i - last_pss >= _PSS_EVERY_TICKS or (rising and i - last_pss >= wait):
                t = time.perf_counter()
                pss = sum(_read_int_field(f"/proc/{p}/smaps_rollup", b"Pss:") for p in pids)
                pss_cost = time.perf_counter() - t
                self.peak_pss = max(self.peak_pss, pss)
                last_pss = i
            i += 1
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def cpu_s(self) -> float:
        return sum(self._cpu.values())


def run_child(
    argv: list[str], timeout_s: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``python -m bench.compact_scaling --child ...`` and measure its process tree.

    A Spark child with warm jobs touches its mark file when the first job is done: the
    wall time and CPU are then the first job's (plus the context's stop), as without warm
    jobs; peak memory is over the whole run."""
    t0 = time.monotonic()
    mark = Path(tempfile.mkdtemp(prefix="bench-mark-")) / "first-job-done"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.compact_scaling", "--child", *argv, f"--mark-file={mark}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    sampler = TreeSampler(proc.pid, mark)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        status = {0: "ok", EXIT_MEMORY: "MemoryError"}.get(
            proc.returncode,
            f"killed by {signal.Signals(-proc.returncode).name}"
            if proc.returncode < 0
            else f"exit {proc.returncode}",
        )
    except subprocess.TimeoutExpired:
        for pid in reversed(_tree(proc.pid)):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        out, err = proc.communicate()
        status = f"timeout after {timeout_s:.0f} s"
    wall = time.monotonic() - t0
    sampler.stop()
    result: dict[str, Any] = {
        "status": status,
        "wall_s": round(wall, 2),
        "cpu_s": round(sampler.cpu_s, 1),
        "peak_rss_mb": round(sampler.peak_rss / 2**20),
        "peak_pss_mb": round(sampler.peak_pss / 2**20),
        "peak_rss_parts_mb": {k: round(v / 2**20) for k, v in sampler.peak_parts.items()},
    }
    if status in ("ok", "MemoryError"):
        result.update(json.loads(out.strip().splitlines()[-1]))
    else:
        result["stderr_tail"] = err.strip().splitlines()[-5:]
    if sampler.marked is not None and "stop_s" in result:
        result["total_wall_s"] = result["wall_s"]
        result["wall_s"] = round(sampler.marked[0] - t0 + result["stop_s"], 2)
        result["cpu_s"] = round(sampler.marked[1], 1)
    mark.unlink(missing_ok=True)
    mark.parent.rmdir()
    return result


# --------------------------------------------------------------------------- child side


def child(args: argparse.Namespace) -> int:
    """One compaction in this (fresh) process; prints one JSON line. ``ENGINE@MB`` runs it
    under a memory budget (see the module docstring)."""
    import resource

    from snapshots import SnapshotMeta, compact_local

    timings: dict[str, float] = {}
    stages: list[dict[str, Any]] = []
    t0 = time.monotonic()
    name, _, budget = args.child.partition("@")
    engine, *flags = name.split("-")
    full_jit = args.full_jit or "full" in flags
    if "cpu1" in flags:
        # one CPU for the whole tree: the JVM and the Python workers inherit the affinity
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    spark_memory: dict[str, str | None] = {}
    if budget and engine == "local":
        limit = int(budget) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    elif budget:
        spark_memory = {
            "driver_memory": args.budget_driver_memory,
            "worker_memory": args.budget_worker_memory,
        }
    try:
        if engine == "local":
            info = compact_local(
                args.segments, None, args.upto, args.out, SnapshotMeta(CLUSTER, args.upto, 0)
            )
        elif engine.startswith("spark"):
            from snapshots.compaction import compact_spark

            cores = int(engine[len("spark") :])
            events = tempfile.mkdtemp(prefix="bench-events-")
            job = functools.partial(
                compact_spark,
                args.segments,
                args.upto,
                args.out,
                SnapshotMeta(CLUSTER, args.upto, 0),
                progress=False,
                read_tasks=args.read_tasks,
                worker_memory=spark_memory.get("worker_memory"),
            )
            conf = _event_log_conf(events)
            if spark_memory.get("worker_memory"):  # what compact_spark sets on its own context
                conf["spark.python.worker.memory"] = str(spark_memory["worker_memory"])
            options = dict(
                master=f"local[{cores}]",
                fast_jvm=not full_jit,
                conf=conf,
                driver_memory=spark_memory.get("driver_memory"),
            )
            if args.warm_jobs:
                info = _spark_jobs(job, options, timings, args.warm_jobs, args.mark_file)
            else:
                info = job(timings=timings, **options)
            # the first job's stages (a warm job starts again at partitionBy)
            stages = stage_summary(Path(events))
            firsts = [i for i, st in enumerate(stages) if st["name"] == "partitionBy"]
            stages = stages[: firsts[1]] if len(firsts) > 1 else stages
        elif engine == "parquet":
            print(json.dumps(convert_to_parquet(Path(args.segments), Path(args.out))))
            return 0
        elif engine == "parquet2":
            info = compact_parquet(args.segments, args.upto, args.out, timings, full_jit=full_jit)
        else:
            raise SystemExit(f"unknown child {args.child}")
    except MemoryError:
        # The fold's state is released with the frames the error unwound, so there is
        # memory again to say so; the partial snapshot was never renamed into place.
        usage = resource.getrusage(resource.RUSAGE_SELF)
        print(
            json.dumps(
                {
                    "job_s": round(time.monotonic() - t0, 2),
                    "error": "MemoryError",
                    "budget_mb": int(budget) if budget else None,
                    "maxrss_mb": round(usage.ru_maxrss / 1024),
                }
            )
        )
        return EXIT_MEMORY
    doc = {
        "job_s": round(time.monotonic() - t0, 2),
        "records": info.record_count,
        "counts": dict(info.counts),
        "hashes": dict(info.hashes),
        "snapshot_bytes": info.size_bytes,
    }
    if budget:
        doc["budget_mb"] = int(budget)
    doc.update({k: round(v, 2) if isinstance(v, float) else v for k, v in timings.items()})
    if stages:
        doc["stages"] = stages
    print(json.dumps(doc))
    return 0


def _spark_jobs(
    job: Callable[..., Any],
    options: dict[str, Any],
    timings: dict[str, Any],
    warm: int,
    mark: str | None,
) -> Any:
    """The compaction on a Spark context of this process's own (as ``compact_spark`` makes
    it), then ``warm`` more times on the same context: what a job costs once the context
    and its Python workers are up, as on a long-running cluster. ``timings`` gets the first
    job's phases (its session: the context's start), ``warm_job_s`` (each warm job's wall
    time) and ``stop_s`` (the context's stop). ``mark`` is touched when the first job is
    done (see :func:`run_child`)."""
    import shutil

    from snapshots.compaction import (
        default_class_archive_dir,
        finish_class_archive,
        make_spark_context,
    )

    work = tempfile.mkdtemp(prefix="bench-spark-")
    t0 = time.monotonic()
    sc = make_spark_context(
        options["master"],
        work_dir=work,
        fast_jvm=options["fast_jvm"],
        driver_memory=options["driver_memory"],
        conf=options["conf"],
        class_archive_dir=default_class_archive_dir(),
    )
    started = time.monotonic() - t0
    try:
        info = job(spark=sc, timings=timings)
        timings["session_s"] = started + timings["session_s"]
        if mark:
            Path(mark).touch()
        warm_s = []
        for _ in range(warm):
            t = time.monotonic()
            job(spark=sc)
            warm_s.append(round(time.monotonic() - t, 2))
        timings["warm_job_s"] = warm_s
    finally:
        t = time.monotonic()
        sc.stop()
        finish_class_archive()
        timings["stop_s"] = time.monotonic() - t
        shutil.rmtree(work, ignore_errors=True)
    return info


def _event_log_conf(directory: str) -> dict[str, str]:
    """Spark's event log (uncompressed JSON lines) into `directory`: where the job's time
    goes, per stage, from Spark's own task metrics. A few dozen tasks: no measurable cost."""
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": f"file://{directory}",
        "spark.eventLog.compress": "false",
    }


#: Stages of one phase run as several jobs: the write's waves (runJob; toLocalIterator in
#: results before 2026-11-22T20).
_MERGED_STAGES = ("runJob", "toLocalIterator")


def stage_summary(directory: Path) -> list[dict[str, Any]]:
    """Per stage of the event log under `directory`: tasks, wall time (submitted ->
    completed), the sum and max of task run times (Python worker time included: the JVM task
    waits on it), JVM CPU and GC, shuffle write time, and the time from the application's
    start to the stage's submission. The write's jobs (one per wave of partitions) are
    merged into one row. Removes `directory`."""
    import shutil

    events = []
    for path in sorted(directory.rglob("events_*")) or sorted(directory.glob("*")):
        if path.is_file():
            with open(path) as f:
                events += [json.loads(line) for line in f if line.strip()]
    shutil.rmtree(directory, ignore_errors=True)
    app_start = next(
        (e["Timestamp"] for e in events if e["Event"] == "SparkListenerApplicationStart"), 0
    )
    stages: dict[int, dict[str, Any]] = {}
    for e in events:
        kind = e["Event"]
        if kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            name = info["Stage Name"].split(" at ")[0]
            stages[info["Stage ID"]] = {
                "name": name,
                "tasks": info["Number of Tasks"],
                "submitted_ms": info["Submission Time"] - app_start,
                "wall_ms": info["Completion Time"] - info["Submission Time"],
                "task_ms": 0,
                "max_task_ms": 0,
                "jvm_cpu_ms": 0,
                "gc_ms": 0,
                "shuffle_write_ms": 0,
            }
    for e in events:
        if e["Event"] != "SparkListenerTaskEnd" or e["Stage ID"] not in stages:
            continue
        st, m = stages[e["Stage ID"]], e.get("Task Metrics") or {}
        run = m.get("Executor Run Time", 0)
        st["task_ms"] += run
        st["max_task_ms"] = max(st["max_task_ms"], run)
        st["jvm_cpu_ms"] += m.get("Executor CPU Time", 0) // 1_000_000
        st["gc_ms"] += m.get("JVM GC Time", 0)
        st["shuffle_write_ms"] += (m.get("Shuffle Write Metrics") or {}).get(
            "Shuffle Write Time", 0
        ) // 1_000_000
    out: list[dict[str, Any]] = []
    for _, st in sorted(stages.items()):
        if out and st["name"] == out[-1]["name"] and st["name"] in _MERGED_STAGES:
            last = out[-1]
            end = max(last["submitted_ms"] + last["wall_ms"], st["submitted_ms"] + st["wall_ms"])
            for k in ("tasks", "task_ms", "jvm_cpu_ms", "gc_ms", "shuffle_write_ms"):
                last[k] += st[k]
            last["max_task_ms"] = max(last["max_task_ms"], st["max_task_ms"])
            last["wall_ms"] = end - last["submitted_ms"]
            continue
        out.append(dict(st))
    return out


def convert_to_parquet(seg_dir: Path, out_dir: Path) -> dict[str, Any]:
    """What a server would do at each seal: segment -> Parquet (pyarrow). Timed per file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from snapshots.compaction import FileStats, ReadTask, list_segments, read_segment

    out_dir.mkdir(parents=True, exist_ok=True)
    times = []
    for seg in list_segments(seg_dir, 2**63 - 1):
        t0 = time.monotonic()
        cols: dict[str, list[Any]] = {
            c: [] for c in ("offset", "sub", "type", "key", "value", "delete")
        }
        task = ReadTask(0, seg.path, seg.first_offset, -1, 2**63 - 1)
        for (type_, key), (offset, sub, value) in read_segment(task, FileStats()):
            cols["offset"].append(offset)
            cols["sub"].append(sub)
            cols["type"].append(type_)
            cols["key"].append(key)
            cols["value"].append(value if value is not None else b"")
            cols["delete"].append(value is None)
        table = pa.table(
            {
                "offset": pa.array(cols["offset"], pa.int64()),
                "sub": pa.array(cols["sub"], pa.int32()),
                "type": pa.array(cols["type"], pa.string()),
                "key": pa.array(cols["key"], pa.binary()),
                "value": pa.array(cols["value"], pa.binary()),
                "delete": pa.array(cols["delete"], pa.bool_()),
            }
        )
        pq.write_table(table, out_dir / f"{seg.first_offset:020d}.parquet")
        times.append(time.monotonic() - t0)
    size = sum(p.stat().st_size for p in out_dir.iterdir())
    return {
        "files": len(times),
        "convert_s": round(sum(times), 2),
        "per_segment_s": round(max(times), 2) if times else 0,
        "parquet_bytes": size,
    }


def compact_parquet(
    segments: str, upto: int, out: str, timings: dict[str, float], *, full_jit: bool
) -> Any:
    """The Parquet alternative: JVM-side fold, Python only for hashing and writing."""
    import shutil

    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from snapshots import RecordDigest, SnapshotMeta, write_snapshot
    from snapshots.compaction import digest_partition, make_spark_session

    t0 = time.monotonic()
    work = tempfile.mkdtemp(prefix="bench-parquet-")
    spark = make_spark_session("local[2]", work_dir=work, fast_jvm=not full_jit)
    t1 = time.monotonic()
    try:
        df = spark.read.parquet(str(Path(segments).parent / "parquet"))
        winners = (
            df.filter(F.col("offset") <= upto)
            .groupBy("type", "key")
            .agg(F.max_by(F.struct("value", "delete"), F.struct("offset", "sub")).alias("w"))
            .filter(~F.col("w.delete"))
            .select("type", "key", F.col("w.value").alias("value"))
        )
        survivors = winners.rdd.map(lambda r: (r[0], bytes(r[1]), bytes(r[2]))).persist(
            StorageLevel.MEMORY_AND_DISK
        )
        digest = RecordDigest.combine(survivors.mapPartitions(digest_partition).collect())
        t2 = time.monotonic()
        meta = SnapshotMeta(CLUSTER, upto, 0).with_digest(digest)
        info = write_snapshot(out, meta, survivors.toLocalIterator())
        t3 = time.monotonic()
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    timings.update(session_s=t1 - t0, fold_s=t2 - t1, write_s=t3 - t2)
    return info


# --------------------------------------------------------------------------- report


def warm_up(root: Path, timeout_s: float, env: dict[str, str] | None) -> str:
    """One small Spark compaction before the measured runs, so the driver JVM's class
    archive (compact_spark's default, in the user cache) exists: the runs then measure the
    steady state that every compaction after the first gets. Says whether it was there."""
    from snapshots.compaction import default_class_archive_dir

    cache = default_class_archive_dir()
    before = set(cache.glob("*.jsa")) if cache.is_dir() else set()
    seg, _ = dataset(root, 1000)
    run_child(
        ["spark2", "--segments", str(seg), "--upto", "900", "--out", str(root / "warm.snap")],
        timeout_s,
        env,
    )
    (root / "warm.snap").unlink(missing_ok=True)
    after = set(cache.glob("*.jsa")) if cache.is_dir() else set()
    if after - before:
        return f"recorded by the warm-up run in {cache}"
    return f"present in {cache}" if after else "none (not recorded: see compact_spark)"


def default_read_tasks(seg: Path, upto: int, cores: int = 2) -> tuple[int, int]:
    """The number of read tasks compact_spark picks on local[`cores`] for this input, and
    the window's bytes. Every Spark engine gets the local[2] plan, so local[1] and local[2]
    run the same tasks (the same pre-fold, the same shuffle) and differ only in cores."""
    from snapshots.compaction import list_segments, read_task_count, window_bytes

    window = window_bytes(list_segments(seg, upto), -1, upto)
    return read_task_count(window, cores), window


def _fmt_n(n: int) -> str:
    return f"1e{len(str(n)) - 1}" if str(n).strip("0") == "1" else str(n)


def report(doc: dict[str, Any]) -> str:
    lines = [
        f"# Offline compaction scaling ({doc['date']})",
        "",
        f"Host: {doc['host']['cpus']} CPUs, {doc['host']['mem_gb']} GB RAM, load1 before "
        f"{doc['host']['load1_before']}; Python {doc['host']['python']}. "
        f"upto = 0.9 N, no base snapshot, {doc.get('distinct', 0.1):.0%} distinct keys, "
        "10 % deletes, 64 MiB segments. Spark: a bare SparkContext, C1 JIT + serial GC, "
        f"driver JVM class archive {doc.get('class_archive', '-')}.",
        "",
        "Per entry: wall (the whole run: a fresh JVM and Spark context included), job (the "
        "first job after the Spark context is up: read, fold, shuffle, hash and write, with "
        "the Python workers' start) and warm job (the best of the same job run again on that "
        "context: what a long-running Spark cluster pays per job); the ratio is to the "
        "single-process fold's wall time per entry. Wall and CPU s stop at the first job "
        "(and the context's stop); CPU s: the whole process tree (driver, JVM, workers); "
        "peak memory: the whole run, warm jobs included.",
        "",
        "| N | engine | load1 | status | wall s | session / fold / write s | job s | "
        "warm job s | us/entry wall / job / warm | x fold wall / job / warm | CPU s | "
        "cores busy | peak RSS MB (java/python) | peak PSS MB | live keys |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    fold = {
        r["n"]: r["wall_s"] for r in doc["runs"] if r["engine"] == "local" and r["status"] == "ok"
    }
    for run in doc["runs"]:
        parts = run.get("peak_rss_parts_mb", {})
        n = run["n"]
        job = run.get("fold_s", 0) + run.get("write_s", 0) if "fold_s" in run else run["wall_s"]
        warm = min(run["warm_job_s"]) if run.get("warm_job_s") else job
        per = f"{run['wall_s'] / n * 1e6:.2f} / {job / n * 1e6:.2f} / {warm / n * 1e6:.2f}"
        ratio = (
            f"{run['wall_s'] / fold[n]:.2f} / {job / fold[n]:.2f} / {warm / fold[n]:.2f}"
            if n in fold and run["status"] == "ok"
            else "-"
        )
        warm_cell = (
            ", ".join(f"{w:.1f}" for w in run["warm_job_s"]) if run.get("warm_job_s") else "-"
        )
        split = (
            f"{run.get('session_s', 0):.1f} / {run.get('fold_s', 0):.1f} / {run.get('write_s', 0):.1f}"
            if "fold_s" in run
            else "-"
        )
        lines.append(
            f"| {_fmt_n(n)} | {run['engine']} | {run.get('load1', '-')} | {run['status']} "
            f"| {run['wall_s']:.1f} | {split} | {job:.1f} | {warm_cell} | {per} | {ratio} | "
            f"{run['cpu_s']:.0f} | {run['cpu_s'] / max(run['wall_s'], 1e-9):.2f} | "
            f"{run['peak_rss_mb']} ({parts.get('java', 0)}/{parts.get('python', 0)}) | "
            f"{run['peak_pss_mb']} | {run.get('records', '-')} |"
        )
    lines += scaling_lines(doc)
    lines += stage_lines(doc)
    lines += ["", "Data sets:", ""]
    for n, info in doc["datasets"].items():
        lines.append(
            f"* N={_fmt_n(int(n))}: {info['files']} segment files, {info['bytes'] / 2**20:.0f} MiB, "
            f"generated in {info.get('generate_s', '?')} s"
            + (
                f"; Spark: {info['read_tasks']} read tasks of "
                f"{info['window_bytes'] / info['read_tasks'] / 2**20:.1f} MiB"
                if "read_tasks" in info
                else ""
            )
            + (
                f"; Parquet copy {info['parquet']['parquet_bytes'] / 2**20:.0f} MiB, "
                f"conversion {info['parquet']['convert_s']} s in all, "
                f"{info['parquet']['per_segment_s']} s for the largest segment"
                if "parquet" in info
                else ""
            )
        )
    if doc.get("bytes_per_live_key"):
        lines += ["", "Single-process fold, memory per live key (peak RSS above a 1e5 run):", ""]
        for n, b in doc["bytes_per_live_key"].items():
            lines.append(f"* N={_fmt_n(int(n))}: {b:.0f} B per live key")
    budget = doc.get("memory_budget_mb")
    if budget:
        lines += ["", f"Memory budget {budget} MB (same for both engines):", ""]
        for run in doc["runs"]:
            if not run["engine"].endswith(f"@{budget}"):
                continue
            if run["engine"].startswith("local"):
                verdict = (
                    f"MemoryError after {run.get('job_s', run['wall_s'])} s (RLIMIT_AS "
                    f"{budget} MB; peak RSS {run['peak_rss_mb']} MB)"
                    if run["status"] == "MemoryError"
                    else f"{run['status']}, peak RSS {run['peak_rss_mb']} MB"
                )
            else:
                inside = "within" if run["peak_rss_mb"] <= budget else "OVER"
                verdict = (
                    f"{run['status']}, peak RSS {run['peak_rss_mb']} MB / PSS "
                    f"{run['peak_pss_mb']} MB of the process tree: {inside} the budget, "
                    f"{run.get('partitions', '?')} partitions, pre-fold "
                    f"{run.get('prefold_keys', '?')} keys"
                )
            lines.append(f"* N={_fmt_n(run['n'])} {run['engine']}: {verdict}")
    lines += ["", "Hashes equal across engines: " + ("yes" if doc["hashes_equal"] else "**NO**")]
    if doc.get("plot"):
        lines += ["", f"![scaling]({doc['plot']})"]
    elif doc.get("plot_note"):
        lines += ["", doc["plot_note"]]
    return "\n".join(lines) + "\n"


def scaling_lines(doc: dict[str, Any]) -> list[str]:
    """1 core -> 2 per size: speedup of the wall time, the job time and the warm job, and
    the CPU seconds of each. Two baselines: local[1] (one task slot, but the JVM's own
    threads and the driver run on the second core beside it: 'cores busy' says what it
    really used) and local[1] confined to one CPU (``spark1-cpu1``: what one core gives)."""
    ok = {(r["n"], r["engine"]): r for r in doc["runs"] if r["status"] == "ok"}
    rows = []
    for n in sorted({r["n"] for r in doc["runs"]}):
        two = ok.get((n, "spark2"))
        for base in ("spark1", "spark1-cpu1"):
            one = ok.get((n, base))
            if one is None or two is None or "fold_s" not in one:
                continue
            job1, job2 = (r["fold_s"] + r["write_s"] for r in (one, two))
            warm1, warm2 = (min(r.get("warm_job_s") or [float("nan")]) for r in (one, two))
            rows.append(
                f"| {_fmt_n(n)} | {base} | {one['wall_s']:.1f} -> {two['wall_s']:.1f} "
                f"({one['wall_s'] / two['wall_s']:.2f}x) | {job1:.1f} -> {job2:.1f} "
                f"({job1 / job2:.2f}x) | {warm1:.1f} -> {warm2:.1f} ({warm1 / warm2:.2f}x) | "
                f"{one['fold_s']:.1f} -> {two['fold_s']:.1f} "
                f"({one['fold_s'] / two['fold_s']:.2f}x) | "
                f"{one['cpu_s']:.0f} / {two['cpu_s']:.0f} | "
                f"{one['cpu_s'] / one['wall_s']:.2f} / {two['cpu_s'] / two['wall_s']:.2f} | "
                f"{one.get('tasks', '?')} read tasks, {one.get('partitions', '?')} / "
                f"{two.get('partitions', '?')} partitions, {one.get('records_read', 0):,} "
                f"records read, {one.get('records_shuffled', 0):,} shuffled |"
            )
    if not rows:
        return []
    return [
        "",
        "1 core -> 2 (local[2]; the same read tasks for all: see the data sets below). From "
        "spark1: local[1] on this 2-CPU box, its JVM threads running on the other CPU; from "
        "spark1-cpu1: local[1] with the whole process tree confined to one CPU:",
        "",
        "| N | from | wall s | job s | warm job s | fold s (Spark stages only) | CPU s 1 / 2 "
        "| cores busy 1 / 2 | plan |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def stage_lines(doc: dict[str, Any]) -> list[str]:
    """Where each Spark run's job time went, from Spark's event log."""
    rows = []
    for run in doc["runs"]:
        for st in run.get("stages", ()):
            rows.append(
                f"| {_fmt_n(run['n'])} | {run['engine']} | {st['name']} | {st['tasks']} | "
                f"{st['submitted_ms'] / 1000:.1f} | {st['wall_ms'] / 1000:.1f} | "
                f"{st['task_ms'] / 1000:.1f} | {st['max_task_ms'] / 1000:.1f} | "
                f"{st['jvm_cpu_ms'] / 1000:.1f} | {st['gc_ms'] / 1000:.1f} | "
                f"{st['shuffle_write_ms'] / 1000:.1f} |"
            )
    if not rows:
        return []
    return [
        "",
        "Spark stages (event log): partitionBy = read + pre-fold + shuffle write; collect = "
        "shuffle read + fold + hash; runJob = the survivors encoded as frames, a wave of "
        "partitions at a time, to the driver while it writes. Submitted: seconds after the context started. Task s: sum of task run times "
        "(the Python worker's time included); JVM CPU: the task threads' own CPU.",
        "",
        "| N | engine | stage | tasks | submitted s | wall s | task s | max task s | "
        "JVM CPU s | GC s | shuffle write s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def plot(doc: dict[str, Any], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    engines = sorted({r["engine"] for r in doc["runs"]})
    for engine in engines:
        runs = [r for r in doc["runs"] if r["engine"] == engine and r["status"] == "ok"]
        if not runs:
            continue
        xs = [r["n"] for r in runs]
        ax1.plot(xs, [r["wall_s"] for r in runs], marker="o", label=engine)
        ax2.plot(xs, [r["peak_rss_mb"] for r in runs], marker="o", label=engine)
    for ax, title, unit in ((ax1, "wall time", "s"), (ax2, "peak RSS of the process tree", "MB")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("log entries N (upto = 0.9 N)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"metaledger offline compaction, {doc['host']['cpus']} CPUs ({doc['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _positive_int(text: str) -> int:
    # here, not nameserver.cli's: that package pulls in grpc, which would inflate the
    # measured children
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def _task_count(text: str) -> int:
    # not _positive_int: children parse this flag too, and must not import grpc
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of tasks")
    return int(text)


def _count(text: str) -> int:
    # children parse this flag too (see _task_count)
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return int(text)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1]")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--sizes", default="1e5,1e6", help="comma-separated entry counts (default 1e5,1e6)"
    )
    p.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"of {','.join(ENGINES)}, spark2-full (default {','.join(ENGINES)})",
    )
    p.add_argument(
        "--parquet", action="store_true", help="also measure a Parquet copy (needs pyarrow)"
    )
    p.add_argument("--pyarrow-path", default="", help="extra PYTHONPATH entry holding pyarrow")
    p.add_argument("--data-dir", help="keep generated data here (default: a temp dir)")
    p.add_argument("--timeout-s", type=float, default=900, help="limit per run (default 900)")
    p.add_argument("--full-jit", action="store_true", help="Spark with the default JIT and GC")
    p.add_argument(
        "--distinct",
        type=_fraction,
        default=0.1,
        help="distinct keys as a fraction of N (default 0.1)",
    )
    p.add_argument(
        "--memory-budget-mb",
        type=_positive_int,
        help="also run local@MB (the fold under RLIMIT_AS) and spark2@MB (bounded Spark)",
    )
    p.add_argument(
        "--budget-driver-memory",
        default="512m",
        help="JVM heap of spark2@MB (default 512m, Spark's floor)",
    )
    p.add_argument(
        "--budget-worker-memory",
        default="64m",
        help="Python worker bound of spark2@MB (default 64m)",
    )
    p.add_argument("--out-dir", default=str(RESULTS_DIR))
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--mark-file", help=argparse.SUPPRESS)
    p.add_argument("--segments", help=argparse.SUPPRESS)
    p.add_argument("--upto", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument(
        "--warm-jobs",
        type=_count,
        default=1,
        metavar="K",
        help="Spark: run the job K more times on the same context and report the best "
        "(a long-running cluster's cost per job: context and Python workers up; default 1)",
    )
    p.add_argument(
        "--read-tasks",
        type=_task_count,
        help="Spark read tasks (default: what the job picks on local[2], for every engine)",
    )
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    engines = [e for e in args.engines.split(",") if e]
    if args.memory_budget_mb:
        engines += [f"local@{args.memory_budget_mb}", f"spark2@{args.memory_budget_mb}"]
    tmp = None
    if args.data_dir:
        root = Path(args.data_dir)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="compact-scaling-")
        root = Path(tmp.name)
    env = dict(os.environ)
    if args.pyarrow_path:
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [args.pyarrow_path, env.get("PYTHONPATH")])
        )
    date = timestamp()
    doc: dict[str, Any] = {
        "date": date,
        "host": {
            "cpus": os.cpu_count(),
            "mem_gb": round(os.sysconf("SC_PHYS_PAGES") * _PAGE / 2**30, 1),
            "load1_before": round(os.getloadavg()[0], 2),
            "python": sys.version.split()[0],
        },
        "runs": [],
        "datasets": {},
    }
    extra = ["--full-jit"] if args.full_jit else []
    extra += [
        f"--budget-driver-memory={args.budget_driver_memory}",
        f"--budget-worker-memory={args.budget_worker_memory}",
    ]
    doc["distinct"] = args.distinct
    doc["memory_budget_mb"] = args.memory_budget_mb
    if any(e.startswith("spark") for e in engines):
        doc["class_archive"] = warm_up(root, args.timeout_s, env)
        print(f"Spark class archive: {doc['class_archive']}", flush=True)
    try:
        for n in sizes:
            seg, info = dataset(root, n, args.distinct)
            doc["datasets"][str(n)] = info
            print(
                f"N={_fmt_n(n)}: {info['files']} segments, {info['bytes'] / 2**20:.0f} MiB",
                flush=True,
            )
            upto = int(0.9 * n)
            tasks, window = default_read_tasks(seg, upto)
            tasks = args.read_tasks or tasks
            info.update(read_tasks=tasks, window_bytes=window)
            runs = list(engines)
            if args.parquet:
                conv = run_child(
                    [
                        "parquet-convert",
                        "--segments",
                        str(seg),
                        "--out",
                        str(seg.parent / "parquet"),
                    ],
                    args.timeout_s,
                    env,
                )
                info["parquet"] = {
                    k: conv.get(k) for k in ("convert_s", "per_segment_s", "parquet_bytes", "files")
                }
                info["parquet"]["peak_rss_mb"] = conv["peak_rss_mb"]
                runs.append("parquet2-full")
            for engine in runs:
                out = root / f"n{n}" / f"{engine}.snap"
                argv_ = [
                    engine,
                    "--segments",
                    str(seg),
                    "--upto",
                    str(upto),
                    "--out",
                    str(out),
                    *extra,
                ]
                if engine.startswith("spark"):
                    argv_ += [f"--read-tasks={tasks}", f"--warm-jobs={args.warm_jobs}"]
                load1 = round(os.getloadavg()[0], 2)
                result = run_child(argv_, args.timeout_s, env)
                result.update(n=n, engine=engine, load1=load1)
                doc["runs"].append(result)
                out.unlink(missing_ok=True)
                print(
                    f"  {engine:9} {result['status']:8} wall {result['wall_s']:7.1f} s  "
                    f"cpu {result['cpu_s']:6.0f} s  peak RSS {result['peak_rss_mb']:5} MB  "
                    f"PSS {result['peak_pss_mb']:5} MB  {result.get('records', '')}",
                    flush=True,
                )
    finally:
        if tmp is not None:
            tmp.cleanup()
    ok = [r for r in doc["runs"] if r["status"] == "ok"]
    doc["hashes_equal"] = all(
        r["hashes"] == next(o["hashes"] for o in ok if o["n"] == r["n"]) for r in ok
    )
    local = {r["n"]: r for r in ok if r["engine"] == "local"}
    if local:
        floor = min(local.values(), key=lambda r: r["n"])
        doc["bytes_per_live_key"] = {
            str(n): (r["peak_rss_mb"] - floor["peak_rss_mb"])
            * 2**20
            / max(1, r["records"] - floor["records"])
            for n, r in sorted(local.items())
            if n != floor["n"]
        }
    out_dir = Path(args.out_dir)
    png = plot(doc, result_stem("compact_scaling", date, out_dir).with_suffix(".png"))
    if png:
        doc["plot"] = png
    else:
        doc["plot_note"] = "No plot: matplotlib is not installed (pip install -e .[bench])."
    text = report(doc)
    json_path, md_path = write_report("compact_scaling", doc, text, out_dir)
    print()
    print(text)
    print(f"wrote {json_path}, {md_path}" + (", .png" if png else f" ({doc['plot_note']})"))
    return 0 if doc["hashes_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
