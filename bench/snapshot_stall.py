"""How long a snapshot write stops the other threads of a node, in one process (issue 3).

    python -m bench.snapshot_stall [--keys 1000000] [--value-size 100] [--writer thread|process|both]

A 1M-key image is built once; then for each writer (``StoreSink`` with ``in_child`` False:
a thread of this process encodes and writes, or True: a forked child does) a snapshot is
written while a probe thread does what the commit path does between network waits: wake
up from a 1 ms sleep and apply one put to the image (``KvDelta``-free: one
``PersistentSortedMap.set``). The probe's lateness (wake-up to done, minus the 1 ms it
asked to sleep) is what a commit waits for the GIL. Reported: the probe's p50 / p99 / max
lateness before and during the write, the write's wall time, and this process's CPU
seconds during it (its children's, i.e. the forked writer's, apart).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from nameserver.kinds import REGISTRY
from nameserver.kv.records import KeyValue, KvImage
from nameserver.state.image import MetadataImage, Provenance
from nameserver.state.machine import CapturedImage
from nameserver.state.snapshotting import StoreSink
from raftlog import SegmentConfig, SegmentLog
from snapshots import FileSnapshotStore, verify_snapshot


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


class Probe(threading.Thread):
    def __init__(self, image: MetadataImage) -> None:
        super().__init__(name="probe", daemon=True)
        self.data = image.kv.data
        self.lateness_ms: list[tuple[float, float]] = []  # (when, lateness)
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            start = time.perf_counter()
            time.sleep(0.001)
            key = b"probe/%09d" % i
            self.data = self.data.set(key, KeyValue(key, b"v", i, i, 1))
            done = time.perf_counter()
            self.lateness_ms.append((done, (done - start - 0.001) * 1000))
            i += 1


def stats(samples: list[float]) -> str:
    return (
        f"p50 {percentile(samples, 0.5):6.2f}  p99 {percentile(samples, 0.99):6.2f}  "
        f"max {max(samples, default=0):6.2f} ms ({len(samples)} probes)"
    )


def run_one(image: MetadataImage, directory: Path, in_child: bool) -> None:
    store = FileSnapshotStore(directory / ("process" if in_child else "thread"), keep=1)
    segments = SegmentLog.open(directory / "log", SegmentConfig(fsync_policy="never"))
    sink = StoreSink(store, str(directory / "dump.snap"), "bench", segments, in_child=in_child)
    probe = Probe(image)
    probe.start()
    time.sleep(1.0)
    cpu_before, children_before = time.process_time(), os.times().children_user
    started = time.perf_counter()
    path = sink.write(CapturedImage(image), 1, b"")
    ended = time.perf_counter()
    cpu = time.process_time() - cpu_before
    children = os.times().children_user - children_before
    time.sleep(0.5)
    probe.stop.set()
    probe.join()
    segments.close()
    before = [ms for t, ms in probe.lateness_ms if t < started]
    during = [ms for t, ms in probe.lateness_ms if started <= t <= ended + 0.001]
    size = verify_snapshot(path).size_bytes
    print(
        f"writer {'process' if in_child else 'thread'}: {size / 1e6:.1f} MB in {ended - started:.2f} s"
    )
    print(f"  this process CPU {cpu:.2f} s, forked children user CPU {children:.2f} s")
    print(f"  probe lateness before: {stats(before)}")
    print(f"  probe lateness during: {stats(during)}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--writer", choices=("thread", "process", "both"), default="both")
    args = parser.parse_args(argv)
    value = b"x" * args.value_size
    items = [
        (k, KeyValue(k, value, 2 + i // 128, 2 + i // 128, 1))
        for i in range(args.keys)
        for k in (b"bench/%09d" % i,)
    ]
    image = MetadataImage(
        REGISTRY, Provenance(2 + args.keys // 128, 2), kv=KvImage.from_sorted_items(items)
    )
    del items
    print(f"load average {os.getloadavg()[0]:.2f} (other work on this machine skews wall times)")
    with tempfile.TemporaryDirectory(prefix="snapshot-stall-") as d:
        for in_child in {"thread": [False], "process": [True], "both": [False, True]}[args.writer]:
            run_one(image, Path(d), in_child)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
