"""CPU cost of restoring a snapshot, stage by stage, in one process (issue 3, Performance).

    python -m bench.restore_profile [--keys 1000000] [--value-size 100] [--dir DIR] [--profile]

Wall clock on a machine shared with other work is noisy, so every stage is timed in CPU
seconds of this process (``time.process_time``). The snapshot (``--keys`` kv records of
``--value-size`` B values, as ``bench.restart_bench`` loads them) is written once into
``--dir`` and reused by later runs. Stages:

* ``records (per frame)``: :func:`snapshots.read_snapshot`, the streaming reader used for
  segments and compaction (frame CRCs, content hashes, footer checksum), then
  ``image_from_records`` from the record tuples: the restore path before columns.
* ``columns``: :func:`snapshots.read_snapshot_columns` (one map of the file, one footer
  checksum, content hashes), then ``image_from_records`` of the columns
  (``KvImage.from_records``), with the garbage collector paused as ``restore`` does.

``--profile`` prints the top functions of the columns path (cProfile).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from nameserver.kinds import REGISTRY
from nameserver.kv.records import KeyValue, KvImage
from nameserver.state.image import MetadataImage, Provenance
from nameserver.state.machine import CapturedImage, image_from_records
from raftlog.log import gc_paused
from snapshots import SnapshotMeta, read_snapshot, read_snapshot_columns, write_snapshot

T = TypeVar("T")


def cpu(what: str, fn: Callable[[], T], results: dict[str, float]) -> T:
    started = time.process_time()
    value = fn()
    results[what] = time.process_time() - started
    print(f"  {what:<44} {results[what]:7.2f} s CPU", flush=True)
    return value


def snapshot_file(directory: Path, keys: int, value_size: int) -> Path:
    """The benchmark snapshot, written once (keys ``bench/%09d``, 128 puts per revision)."""
    path = directory / f"restore-{keys}x{value_size}.snap"
    if path.exists():
        return path
    value = b"x" * value_size
    items = [
        (k, KeyValue(k, value, 2 + i // 128, 2 + i // 128, 1))
        for i in range(keys)
        for k in (b"bench/%09d" % i,)
    ]
    last = 2 + keys // 128
    image = MetadataImage(REGISTRY, Provenance(last, 2), kv=KvImage.from_sorted_items(items))
    started = time.process_time()
    write_snapshot(path, SnapshotMeta("bench", last, 2), CapturedImage(image).records)
    print(
        f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB) in {time.process_time() - started:.2f} s CPU"
    )
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    path = snapshot_file(args.dir, args.keys, args.value_size)
    old: dict[str, float] = {}
    new: dict[str, float] = {}

    print("records (per frame):")
    snap = cpu("read_snapshot (verify, hashes)", lambda: read_snapshot(path), old)
    cpu("read_snapshot (verify, no hashes)", lambda: read_snapshot(path, False), old)
    image = cpu(
        "image_from_records(records)",
        lambda: image_from_records(
            snap.records, snap.info.last_offset, snap.info.last_term, REGISTRY
        ),
        old,
    )

    print("columns:")
    with gc_paused():
        cols = cpu(
            "read_snapshot_columns (verify, hashes)", lambda: read_snapshot_columns(path), new
        )
        cpu(
            "read_snapshot_columns (verify, no hashes)",
            lambda: read_snapshot_columns(path, False),
            new,
        )
        restored = cpu(
            "image_from_records(columns)",
            lambda: image_from_records(cols, cols.info.last_offset, cols.info.last_term, REGISTRY),
            new,
        )
    gc.collect()
    # the heap now holds two 1M-key images, as a node's would hold its image and a new one
    cpu(
        "image_from_records(columns), gc running",
        lambda: image_from_records(cols, 0, 0, REGISTRY),
        new,
    )
    assert len(image.kv) == len(restored.kv) == args.keys

    before = old["read_snapshot (verify, hashes)"] + old["image_from_records(records)"]
    after = new["read_snapshot_columns (verify, hashes)"] + new["image_from_records(columns)"]
    print(
        f"restore (read + verify + image): {before:.2f} s -> {after:.2f} s CPU, {before / after:.2f}x"
    )

    if args.profile:
        profiler = cProfile.Profile()
        with gc_paused():
            profiler.enable()
            cols = read_snapshot_columns(path)
            image_from_records(cols, cols.info.last_offset, cols.info.last_term, REGISTRY)
            profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
