"""Retention: delete whole commit-log segment files older than a age or beyond a total size.

The active (last) segment is never deleted; consume-queue files whose units all point
below the new commit-log minimum go with them (``ConsumeQueue.delete_below``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from broker.store.commitlog import CommitLog


@dataclass(frozen=True)
class RetentionPolicy:
    max_age_s: float | None = None  # a closed file whose mtime is older goes
    max_total_bytes: int | None = None  # oldest closed files go while the log is bigger


def expired_segments(log: CommitLog, policy: RetentionPolicy, now: float | None = None) -> int:
    """Delete the segments the policy selects, oldest first; how many went."""
    now = time.time() if now is None else now
    deleted = 0
    segs = log.segments()
    total = sum(s.size for s in segs)
    for seg in segs[:-1]:
        too_old = (
            policy.max_age_s is not None and now - os.path.getmtime(seg.path) > policy.max_age_s
        )
        too_big = policy.max_total_bytes is not None and total > policy.max_total_bytes
        if not (too_old or too_big):
            break  # files are in time order: a younger file is never removed before an older one
        log.delete_segment(seg)
        total -= seg.size
        deleted += 1
    return deleted
