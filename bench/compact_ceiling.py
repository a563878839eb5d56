"""What two cores give the compaction's read work without Spark: the machine's ceiling for
the 1 -> 2 core scaling that ``bench/compact_scaling.py`` measures.

    python -m bench.compact_ceiling [--size 1e7] [--tasks 4] [--rounds 2] [--data-dir DIR]

The same data set as compact_scaling (generated there once, kept in ``--data-dir``), planned
into ``--tasks`` read tasks as compact_spark plans them (``plan_reads``). Each measured task
does stage 1's own work in a bare Python process: read and decode its ranges, pre-fold
(``snapshots.compaction.read_stage``), then what PySpark's partitionBy does with the output
in the worker (a bucket per partition, pickled every 1000 records). One task alone, then
two at once in two processes (two different tasks), ``--rounds`` times. If two at once take
as long as one alone, the cores scale this work by 2x and what Spark loses beside it is
Spark's own.

Writes ``bench/results/compact_ceiling-<date>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import pickle
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.compact_scaling import dataset
from bench.report import RESULTS_DIR, timestamp, write_report

_PARTITIONS = 8


class _NoAccumulator:
    def add(self, value: object) -> None:
        pass


def _task(group: list[Any], out: Any) -> None:
    from snapshots.compaction import partition_of, read_stage

    t0, c0 = time.perf_counter(), time.process_time()
    buckets: defaultdict[int, list[Any]] = defaultdict(list)
    records = pickled = 0
    for key, version in read_stage(_NoAccumulator(), 2**20)([group]):
        buckets[partition_of(key) % _PARTITIONS].append((key, version))
        records += 1
        if records % 1000 == 0:
            for split in list(buckets):
                pickled += len(pickle.dumps(buckets.pop(split), pickle.HIGHEST_PROTOCOL))
    for items in buckets.values():
        pickled += len(pickle.dumps(items, pickle.HIGHEST_PROTOCOL))
    out.put((time.perf_counter() - t0, time.process_time() - c0, records, pickled))


def _run(groups: list[list[Any]]) -> list[tuple[float, float, int, int]]:
    out: mp.Queue[tuple[float, float, int, int]] = mp.Queue()
    procs = [mp.Process(target=_task, args=(g, out)) for g in groups]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--size", default="1e7", help="entries in the data set (default 1e7)")
    p.add_argument("--tasks", type=int, default=4, help="read tasks planned (default 4)")
    p.add_argument("--rounds", type=int, default=2, help="alone/together rounds (default 2)")
    p.add_argument("--data-dir", help="keep generated data here (default: a temp dir)")
    p.add_argument("--out-dir", default=str(RESULTS_DIR))
    args = p.parse_args(argv)
    if args.tasks < 2 or args.rounds < 1:
        p.error("--tasks must be at least 2 and --rounds at least 1")
    from snapshots.compaction import list_segments, plan_reads

    n = int(float(args.size))
    with contextlib.ExitStack() as stack:
        if args.data_dir:
            root = Path(args.data_dir)
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ceiling-")))
        seg, _ = dataset(root, n)
        upto = int(0.9 * n)
        groups = plan_reads(list_segments(seg, upto), -1, upto, args.tasks)
        alone: list[float] = []
        together: list[float] = []
        rows: list[dict[str, Any]] = []
        for r in range(args.rounds):
            one = _run(groups[:1])
            two = _run(groups[:2])
            alone += [w for w, *_ in one]
            together += [w for w, *_ in two]
            rows.append({"round": r + 1, "alone": one, "together": two})
            print(
                f"round {r + 1}: alone {one[0][0]:.2f} s; together "
                + " / ".join(f"{w:.2f} s" for w, *_ in two),
                flush=True,
            )
    ratio = statistics.mean(together) / statistics.mean(alone)
    date = timestamp()
    doc = {
        "date": date,
        "n": n,
        "tasks": args.tasks,
        "rounds": rows,
        "alone_s": alone,
        "together_s": together,
        "slowdown": ratio,
        "scaling": 2 / ratio,
    }
    lines = [
        f"# Compaction read work, one task alone vs two at once, bare processes ({date})",
        "",
        f"N={args.size}, {args.tasks} read tasks planned (plan_reads), task = read + "
        "pre-fold + bucket + pickle (stage 1's work in the worker, without Spark).",
        "",
        "| round | alone s (wall / CPU) | together s (wall / CPU, each) |",
        "|---|---|---|",
    ]
    for row in rows:
        one = row["alone"][0]
        lines.append(
            f"| {row['round']} | {one[0]:.2f} / {one[1]:.2f} | "
            + ", ".join(f"{w:.2f} / {c:.2f}" for w, c, *_ in row["together"])
            + " |"
        )
    lines += [
        "",
        f"Two at once take {ratio:.3f}x as long as one alone: two cores do this work "
        f"{2 / ratio:.2f}x as fast as one.",
    ]
    json_path, md_path = write_report("compact_ceiling", doc, "\n".join(lines), Path(args.out_dir))
    print("\n".join(lines))
    print(f"wrote {json_path}, {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
