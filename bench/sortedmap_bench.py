"""Micro-benchmark for :class:`nameserver.state.sortedmap.PersistentSortedMap`.

Builds a 1M-key map and times a bulk build, 10k single-key updates (each one
producing a new version), 10k point gets and 1000-key range scans. Prints the
numbers; asserts nothing.

    python -m bench.sortedmap_bench [--keys N] [--chunk-size C] [--fanout F]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

from nameserver.state.sortedmap import DEFAULT_CHUNK_SIZE, PersistentSortedMap

T = TypeVar("T")


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _key(i: int) -> bytes:
    return b"/registry/topics/t%09d" % i


def _line(label: str, seconds: float, extra: str = "") -> None:
    print(f"{label:<36}: {seconds * 1e3:9.3f} ms{'  ' + extra if extra else ''}")


def run(n_keys: int, chunk_size: int, fanout: int | None, seed: int = 42) -> None:
    rng = random.Random(seed)
    items = [(_key(i), i) for i in range(n_keys)]

    # A full collection left over from setup would otherwise land in a timing.
    gc.collect()
    m, t = _timed(lambda: PersistentSortedMap.from_sorted_items(items, chunk_size, fanout))
    items.clear()
    print(
        f"keys={n_keys:,} chunk_size={m.chunk_size} fanout={m.fanout} "
        f"height={m.height} chunks={m.chunk_count:,}"
    )
    _line("bulk build (from_sorted_items)", t)

    n_upd = 10_000
    # Half overwrites of existing keys, half inserts of new keys.
    upd_keys = [_key(rng.randrange(n_keys)) + (b"" if i % 2 else b"x") for i in range(n_upd)]

    def do_updates() -> PersistentSortedMap[int]:
        cur = m
        for i, k in enumerate(upd_keys):
            cur = cur.update(((k, -i),), ())
        return cur

    gc.collect()
    m2, t = _timed(do_updates)
    _line(
        f"{n_upd:,} single-key updates",
        t,
        f"({t / n_upd * 1e6:.1f} us/update, len {len(m):,} -> {len(m2):,})",
    )

    n_del = 10_000
    del_keys = [_key(rng.randrange(n_keys)) for _ in range(n_del)]

    def do_deletes() -> PersistentSortedMap[int]:
        cur = m2
        for k in del_keys:
            cur = cur.update((), (k,))
        return cur

    gc.collect()
    m3, t = _timed(do_deletes)
    _line(
        f"{n_del:,} single-key deletes",
        t,
        f"({t / n_del * 1e6:.1f} us/delete, len {len(m2):,} -> {len(m3):,})",
    )

    batch = {_key(rng.randrange(n_keys)) + b"y": 0 for _ in range(1000)}
    gc.collect()
    _, t = _timed(lambda: m.update(batch, ()))
    _line("one 1000-key random batch update", t)

    get_keys = [_key(rng.randrange(n_keys)) for _ in range(10_000)]

    def do_gets() -> int:
        get = m2.get
        hits = 0
        for k in get_keys:
            if get(k) is not None:
                hits += 1
        return hits

    gc.collect()
    hits, t = _timed(do_gets)
    _line(
        f"{len(get_keys):,} point gets", t, f"({t / len(get_keys) * 1e6:.2f} us/get, {hits:,} hits)"
    )

    n_scans = 100
    bounds = [
        (_key(s), _key(s + 1000)) for s in (rng.randrange(n_keys - 1000) for _ in range(n_scans))
    ]
    scan_times: list[float] = []
    scanned = 0
    gc.collect()
    for start, end in bounds:
        got, t = _timed(lambda: list(m2.range(start, end)))  # noqa: B023
        scanned += len(got)
        scan_times.append(t)
    _line(
        "1000-key range scan (median of 100)",
        statistics.median(scan_times),
        f"(min {min(scan_times) * 1e3:.3f}, max {max(scan_times) * 1e3:.3f} ms;"
        f" {scanned / n_scans:.0f} keys/scan)",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    ap.add_argument("--fanout", type=int, default=None)
    args = ap.parse_args()
    run(args.keys, args.chunk_size, args.fanout)


if __name__ == "__main__":
    main()
