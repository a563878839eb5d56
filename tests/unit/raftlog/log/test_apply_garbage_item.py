"""A committed item that is not a metaledger item is skipped as one range of no-ops.

Its request count is whatever its first four bytes say; the apply path used to build one
empty request per announced offset, so a garbage item claiming 1.6 billion requests (the
fuzz run's PROPOSE from a peer, ``tests/integration/test_fuzz_ports.py``) stalled every
node applying it. The offsets it numbers are still skipped (every node numbers alike), at
no cost per offset.
"""

from __future__ import annotations

import asyncio
import struct
import tracemalloc
from pathlib import Path

from raftlog import Applied, Entry
from tests.unit.raftlog.log.test_replicated_log import make_log

ANNOUNCED = 1_000_000  # offsets the garbage item claims


def test_a_garbage_item_is_skipped_without_a_cost_per_announced_offset(tmp_path: Path) -> None:
    rlog, sm, engine = make_log(tmp_path)
    garbage = struct.pack("<I", ANNOUNCED) + b"\xff not a RaftItem"
    outcome: list[object] = []

    async def main() -> Applied:
        engine.propose(garbage, lambda offset, err: outcome.append(err or offset))
        return await rlog.propose([Entry("set", b"a", b"1")], 5)

    tracemalloc.start()
    try:
        applied = asyncio.run(main())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        rlog.stop()
    assert outcome == [1]  # the engine committed it
    assert applied.offset == ANNOUNCED + 1  # numbered after the skipped range
    assert sm.data == {b"a": b"1"}
    # one empty list per announced offset was ~64 MB for a million
    assert peak < 8 * 1024 * 1024, f"peak {peak} bytes while applying the garbage item"
