"""The replicated log's snapshot duties: the engine's snapshot hooks.

The engine asks for a snapshot (``take``) as of the last item it handed over: a marker
goes through the apply queue, the state is captured there (cheap: an immutable image) and
written on a thread of its own, then published so the engine compacts its log behind it;
change-log segments every kept snapshot covers are deleted (or archived) after their
retention. A snapshot received from the leader (``load``) is adopted at once and
installed by the apply thread, never on the event loop.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial

from raftlog.health import Health
from raftlog.log.apply import Apply, Marker
from raftlog.log.contracts import Captured, SnapshotSink, StateMachine
from raftlog.segments import SegmentLog

log = logging.getLogger(__name__)

#: After a snapshot failed for lack of space (or any I/O error), the next is not tried
#: before this (the engine asks again on every commit).
SNAPSHOT_RETRY_S = 10.0


@contextlib.contextmanager
def gc_paused(freeze: bool = False) -> Iterator[None]:
    """No automatic cyclic garbage collection inside (the previous setting after).

    Restoring a snapshot allocates a few million objects that all survive: the collector,
    triggered every 700 allocations, would scan the growing heap over and over (a third
    of the CPU of a 1M-key restore) to find no garbage: these objects form no cycles.
    ``freeze``: move every object alive at the end out of the collector's generations
    (``gc.freeze``), or the first collection after the pause scans them all at once (a
    stall of ~300 ms for 1M keys), and every full collection after it again.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        if freeze:
            gc.freeze()
    finally:
        if was_enabled:
            gc.enable()


class SnapshotDuties:
    """Taking, writing, publishing and installing snapshots: the engine's
    :class:`~raftlog.consensus.EngineSnapshots` hooks. Owns the snapshot's state (read by
    the engine) and the segments' retention."""

    def __init__(
        self,
        sink: SnapshotSink,
        apply: Apply,
        state_machine: StateMachine,
        segments: SegmentLog,
        health: Health,
        force_snapshot: Callable[[], None],
        segment_retention_s: float = 0.0,
        segment_archive_dir: str | None = None,
    ) -> None:
        """``apply``: where markers go, in commit order; ``force_snapshot``: the engine's
        (the trigger by bytes asks through it). Segments wholly covered by every kept
        snapshot are deleted once ``segment_retention_s`` old, or moved to
        ``segment_archive_dir``."""
        self._sink = sink
        self._apply = apply
        self._sm = state_machine
        self._segments = segments
        self._health = health
        self._force_snapshot = force_snapshot
        self._segment_retention_s = segment_retention_s
        self._segment_archive_dir = segment_archive_dir
        self._state = "idle"  # idle | writing | done | failed (read by the engine)
        self._retry_at = 0.0
        self._thread: threading.Thread | None = None
        self._installed_offset = 0  # the last snapshot installed from the leader
        self.last_snapshot_path = ""

    # ---------------------------------------------------------------- EngineSnapshots
    def take(self, raft_index: int, engine_meta: bytes) -> None:
        """Engine thread: snapshot the state as of the last item handed over (cheap)."""
        if time.monotonic() < self._retry_at:
            self._state = "failed"  # the last one failed (I/O): not yet again
            return
        self._state = "writing"
        self._apply.restart_snapshot_bytes()
        offset = self._apply.committed_offset
        self._apply.at_commit_point(Marker(partial(self._capture, raft_index, engine_meta, offset)))

    def state(self) -> str:
        # 'done' and 'failed' are reported once: the engine then starts afresh
        state = self._state
        if state in ("done", "failed"):
            self._state = "idle"
        return state

    def load(self, path: str) -> bytes:
        """Engine thread: a snapshot file arrived (or is there at start); adopt it, number
        the following items after it, and let the apply thread install it. Returns the
        engine meta stored in it."""
        kept = self._sink.adopt(path)
        last_offset, engine_meta = self._sink.header(kept)  # the apply thread reads the rest
        self._installed_offset = max(self._installed_offset, last_offset)
        self._apply.jump_to(last_offset, Marker(partial(self._install, last_offset, kept)))
        return engine_meta

    def engine_meta(self, path: str) -> bytes:
        return self._sink.header(path)[1]

    def verify(self, path: str) -> str | None:
        return self._sink.verify(path)

    # ---------------------------------------------------------------- the rest
    def due_by_bytes(self) -> bool:
        """Enough bytes committed since the last snapshot: ask the engine for one unless
        one is under way (engine thread). True if it asked."""
        if self._state != "idle":
            return False
        self._force_snapshot()
        return True

    def _capture(self, raft_index: int, engine_meta: bytes, offset: int) -> None:
        """On the apply path, at the take's commit point: capture, and write on a thread."""
        applied = self._apply.apply_offset
        if applied != offset:
            log.error(
                "snapshot at raft index %d: applied %d, expected %d; not taken",
                raft_index,
                applied,
                offset,
            )
            self._state = "failed"
            return
        captured = self._sm.capture()
        self._thread = threading.Thread(
            target=self._write_snapshot,
            args=(self._sink, captured, raft_index, engine_meta),
            name="snapshot-writer",
            daemon=True,
        )
        self._thread.start()

    def _install(self, offset: int, path: str) -> None:
        """Apply thread: install the leader's snapshot ending at ``offset``."""
        if offset <= self._apply.apply_offset:
            log.info("snapshot at offset %d: already applied here", offset)
            return
        with gc_paused(freeze=True):
            last_offset, last_term, _meta, records = self._sink.read(path)
            effects = self._sm.load(last_offset, last_term, records)
        self._apply.install(last_offset, last_term, effects)
        log.info(
            "installed the leader's snapshot at offset %d (%d changed records)",
            last_offset,
            len(effects),
        )

    def _write_snapshot(
        self, sink: SnapshotSink, captured: Captured, raft_index: int, engine_meta: bytes
    ) -> None:
        started = time.monotonic()
        try:
            path = sink.write(captured, raft_index, engine_meta)
            if self._installed_offset >= captured.last_offset:
                # a newer snapshot from the leader replaced the engine's log meanwhile:
                # compacting behind ours now would cut that log; keep the file, skip the rest
                log.info("snapshot at offset %d superseded by the leader's", captured.last_offset)
                self._state = "failed"
                return
            sink.publish(path)
            self.last_snapshot_path = path
        except OSError as exc:  # ENOSPC, EIO...: the node goes on; tried again later
            self._health.fault("snapshot", exc)
            self._retry_at = time.monotonic() + SNAPSHOT_RETRY_S
            self._state = "failed"
            return
        except Exception as exc:
            # e.g. a child writer that failed (its error comes back as text): one line
            # each time, its traceback only the first time
            first = self._retry_at == 0.0
            self._retry_at = time.monotonic() + SNAPSHOT_RETRY_S
            log.warning(
                "snapshot at offset %d failed: %s; trying again in %.0fs at the earliest",
                captured.last_offset,
                exc,
                SNAPSHOT_RETRY_S,
                exc_info=exc if first else None,
            )
            self._state = "failed"
            return
        self._health.clear("snapshot")
        elapsed = time.monotonic() - started
        log.info(
            "snapshot at offset %d (raft index %d) written in %.2fs: %s",
            captured.last_offset,
            raft_index,
            elapsed,
            self.last_snapshot_path,
        )
        # Here, not on the apply thread: unlinking 64 MB segments and syncing the directory
        # took the apply thread (the commit path) 50-90 ms after every big snapshot.
        self._delete_covered_segments(sink.retention_offset())
        self._state = "done"

    def _delete_covered_segments(self, before: int) -> None:
        try:
            removed = self._segments.delete_before(
                before, self._segment_retention_s, self._segment_archive_dir
            )
        except (OSError, ValueError):
            log.exception("deleting change-log segments below offset %d failed", before)
            return
        if removed:
            log.info("deleted %d change-log segments below offset %d", removed, before)
