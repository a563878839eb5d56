"""The garbage collector's settings for a replicator process (measured: bench/redis_pipeline.py).

A replicator allocates a few dozen short-lived objects per replicated write (the command's
argv, its message, properties, a future) and keeps thousands alive while they are in flight.
With CPython's default thresholds (700, 10, 10) a young collection runs every ~25 writes and
the full collections walk every object the process ever imported (gRPC, protobuf, the command
table): at 20k writes/s that was about a third of the replicator's CPU (25 µs of ~55 µs per
write). :func:`tune` moves what exists after start-up out of the collector's view
(``gc.freeze``) and collects young objects ~70x less often. The pipeline's own objects hold
few cycles (a done future's callbacks are dropped once they run), so memory between
collections stays small.
"""

from __future__ import annotations

import gc

__all__ = ["THRESHOLDS", "tune"]

THRESHOLDS = (50_000, 20, 20)


def tune() -> None:
    """Call once, after imports and configuration, before the work starts."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
