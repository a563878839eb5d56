"""Automatic compaction (etcd's ``--auto-compaction-mode`` / ``--auto-compaction-retention``,
etcdserver/api/v3compactor): the leader proposes ``compact`` entries, as any client's
Compact would (:mod:`nameserver.kv.mvcc`).

- ``revision`` mode, retention N: compact at ``current revision - N`` (v3compactor's
  revision.go; etcd looks every 5 minutes, metaledger every :data:`REVISION_CHECK_S`: a
  compaction here is one small entry and a prune of the in-memory index).
- ``periodic`` mode, retention D (a duration; a bare number is hours, as etcd): keep at
  least D of history. The revision is sampled every tenth of min(D, 1 h); once D has passed
  (since this node leads), compact at the newest sample at least D old, then again every
  min(D, 1 h) (periodic.go).

It proposes through the node's facade (:class:`nameserver.node.NodeFacade`), as the gRPC
Compact does. Only the leader compacts; a new leader starts counting afresh (etcd pauses and resumes its
compactor on leadership changes). A Compact that lost a race to another ("compacted") is
not an error; any other failure is retried at the next tick.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from nameserver.config import parse_auto_compaction_retention
from nameserver.kv.mvcc import Compacted
from nameserver.state.duties import PeriodicDuties
from protos import records_pb2
from raftlog import Entry

if TYPE_CHECKING:
    from nameserver.node import NodeFacade

log = logging.getLogger(__name__)

#: how often revision mode looks (etcd: 5 minutes)
REVISION_CHECK_S = 5.0
#: periodic mode's sampling interval is a tenth of min(retention, this), as etcd
PERIODIC_MAX_INTERVAL_S = 3600.0


class AutoCompactor(PeriodicDuties):
    def __init__(
        self,
        node: NodeFacade,
        mode: str,
        retention: str,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(node.log)
        self.node = node
        self.mode = mode
        self.retention = parse_auto_compaction_retention(mode, retention)
        self._clock_s = clock_s
        #: periodic mode: (time, revision) samples while this node leads
        self._samples: deque[tuple[float, int]] = deque()
        self._since: float | None = None
        self._candidate = 0
        self._done: float | None = None  # when the last compaction succeeded (periodic)

    @property
    def enabled(self) -> bool:
        return self.retention > 0

    @property
    def interval_s(self) -> float:
        if self.mode == "revision":
            return REVISION_CHECK_S
        return min(self.retention, PERIODIC_MAX_INTERVAL_S) / 10

    def start(self) -> None:
        if self.enabled:
            self.run_every((self.interval_s, self.tick))

    async def stop(self) -> None:
        await self.stop_jobs()

    def target(self, now: float, revision: int) -> int:
        """The revision to compact at now (0: none yet); records a sample (periodic)."""
        if self.mode == "revision":
            return max(0, revision - int(self.retention))
        if self._since is None:
            self._since = now
        self._samples.append((now, revision))
        # the first compaction after one retention, then one per min(retention, 1 h) after
        # the last that succeeded; in between, a failed one is retried every tick (etcd)
        wait = self.retention if self._done is None else self.every_s
        if now - (self._since if self._done is None else self._done) < wait:
            return 0
        while self._samples and now - self._samples[0][0] >= self.retention:
            self._candidate = self._samples.popleft()[1]  # the newest sample old enough
        return self._candidate

    @property
    def every_s(self) -> float:
        """Periodic mode: how often it compacts once started (etcd's compactInterval)."""
        return min(self.retention, PERIODIC_MAX_INTERVAL_S)

    def done(self, now: float) -> None:
        """A compaction :meth:`target` asked for is applied (or another got there first)."""
        self._done = now

    async def tick(self) -> None:
        if self.lead() is None:
            self._samples.clear()
            self._since, self._candidate, self._done = None, 0, None
            return
        image = self.node.state.image
        now = self._clock_s()
        rev = self.target(now, image.revision)
        if rev <= 0 or rev <= image.mvcc.compacted:
            return
        body = records_pb2.MvccCompaction(revision=rev).SerializeToString()
        try:
            await self.node.propose(Entry("compact", value=body), None)
        except Compacted:
            self.done(now)
            return  # another compaction got there first
        self.done(now)
        log.info(
            "auto compaction (%s, retention %s) at revision %d", self.mode, self.retention, rev
        )
