"""CPU per change-log append (``SegmentLog.append_many`` of one record), on this tree and on
a baseline checkout, in turn in one run:

    python -m bench.segment_append --baseline-tree /work/main [--appends 40000] [--rounds 3]

Each measurement is a child process with its tree first on ``sys.path``, appending 128-byte
records under ``fsync_policy="never"`` into a temporary directory (``/dev/shm`` where there
is one), so what is left is the Python and system-call cost of one call. Prints µs of
process CPU a call, baseline and this tree per round.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

CHILD = """
import os, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from raftlog import SegmentConfig, SegmentLog
n = int(sys.argv[2])
where = "/dev/shm" if os.path.isdir("/dev/shm") else None
with tempfile.TemporaryDirectory(dir=where) as d:
    log = SegmentLog.open(d, SegmentConfig(fsync_policy="never"))
    payload = b"x" * 128
    t0 = time.process_time()
    for i in range(1, n + 1):
        log.append_many([(i, 0, payload)])
    spent = time.process_time() - t0
    log.close()
print(f"{spent / n * 1e6:.2f}")
"""

HERE = Path(__file__).resolve().parents[1]


def measure(tree: Path, appends: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), str(appends)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tree,
    )
    return float(out.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.segment_append", description=__doc__)
    parser.add_argument("--baseline-tree", type=Path, required=True)
    parser.add_argument("--appends", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    for r in range(args.rounds):
        base = measure(args.baseline_tree.resolve(), args.appends)
        this = measure(HERE, args.appends)
        print(f"round {r + 1}: baseline {base:.2f} us, this tree {this:.2f} us an append_many")
    return 0


if __name__ == "__main__":
    sys.exit(main())
