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
from collections.abc import Iterator

from raftlog.log.base import LogBase, Marker
from raftlog.log.contracts import Captured, SnapshotSink

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


class SnapshotDuties(LogBase):
    """Taking, writing, publishing and installing snapshots (EngineSnapshots)."""

    def enable_snapshots(
        self,
        sink: SnapshotSink,
        engine_base_offset: int,
        every_bytes: int = 0,
        segment_retention_s: float = 0.0,
        segment_archive_dir: str | None = None,
    ) -> None:
        """Let the engine take and install snapshots through ``sink``.

        ``engine_base_offset`` is the last offset inside the engine's current snapshot
        (0 if it has none): the engine replays its log from there. ``every_bytes`` > 0 also
        asks for a snapshot once that many bytes of items were committed since the last
        one (the engine's own trigger counts items). Segments wholly covered by every kept
        snapshot are deleted once ``segment_retention_s`` old, or moved to
        ``segment_archive_dir``.
        """
        self._snapshot_sink = sink
        self._enqueued_offset = engine_base_offset
        self._snapshot_every_bytes = every_bytes
        self._segment_retention_s = segment_retention_s
        self._segment_archive_dir = segment_archive_dir

    def take(self, raft_index: int, engine_meta: bytes) -> None:
        self.snapshot_take(raft_index, engine_meta)

    def state(self) -> str:
        # 'done' and 'failed' are reported once: the engine then starts afresh
        state = self._snapshot_state
        if state in ("done", "failed"):
            self._snapshot_state = "idle"
        return state

    def load(self, path: str) -> bytes:
        return self.snapshot_load(path)

    def engine_meta(self, path: str) -> bytes:
        assert self._snapshot_sink is not None
        return self._snapshot_sink.header(path)[1]

    def snapshot_take(self, raft_index: int, engine_meta: bytes) -> None:
        """Engine thread: snapshot the state as of the last item handed over (cheap)."""
        if time.monotonic() < self._snapshot_retry_at:
            self._snapshot_state = "failed"  # the last one failed (I/O): not yet again
            return
        self._snapshot_state = "writing"
        self._bytes_since_snapshot = 0
        marker = Marker("take", raft_index, engine_meta, self._enqueued_offset)
        if self._apply_here():
            self._apply_inline()  # what committed before the marker, first
        if self._apply_here():  # (still: an inline group may have stalled on the disk)
            self._on_marker(marker)  # a capture and a thread start: cheap
        else:
            self._enqueue(marker)

    def snapshot_state(self) -> str:
        return self._snapshot_state

    def snapshot_load(self, path: str) -> bytes:
        """Engine thread: a snapshot file arrived (or is there at start); adopt it, number
        the following items after it, and let the apply thread install it. Returns the
        engine meta stored in it."""
        sink = self._snapshot_sink
        assert sink is not None
        kept = sink.adopt(path)
        last_offset, engine_meta = sink.header(kept)  # the apply thread reads the rest
        self._enqueued_offset = last_offset
        self._installed_offset = max(self._installed_offset, last_offset)
        # always the apply thread: reading a big snapshot must not stall the event loop
        if self._inline:
            self._apply_inline()  # the items committed before it go first
        self._enqueue(Marker("load", 0, b"", last_offset, kept))
        return engine_meta

    def _on_marker(self, marker: Marker) -> None:
        sink = self._snapshot_sink
        if sink is None:
            return
        if marker.kind == "take":
            if self._apply_offset != marker.offset:
                log.error(
                    "snapshot at raft index %d: applied %d, expected %d; not taken",
                    marker.raft_index,
                    self._apply_offset,
                    marker.offset,
                )
                self._snapshot_state = "failed"
                return
            captured = self._sm.capture()
            self._snapshot_thread = threading.Thread(
                target=self._write_snapshot,
                args=(sink, captured, marker.raft_index, marker.engine_meta),
                name="snapshot-writer",
                daemon=True,
            )
            self._snapshot_thread.start()
        elif marker.kind == "load":
            if marker.offset <= self._apply_offset:
                log.info("snapshot at offset %d: already applied here", marker.offset)
                return
            with gc_paused(freeze=True):
                last_offset, last_term, _meta, records = sink.read(marker.path)
                effects = self._sm.load(last_offset, last_term, records)
            if last_offset > self._segments.last_offset:
                n = len(effects)
                self._append_changes(
                    [
                        (last_offset, sub, eff.encode(last_term, 0, n))
                        for sub, eff in enumerate(effects)
                    ],
                    may_block=True,
                )
            self._sm.publish()
            self._apply_offset = last_offset
            if self._observer is not None:
                self._observer.on_installed(last_offset)
            log.info(
                "installed the leader's snapshot at offset %d (%d changed records)",
                last_offset,
                len(effects),
            )
            if self._offset_waiters:
                self._release_offset_waiters()

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
                self._snapshot_state = "failed"
                return
            sink.publish(path)
            self.last_snapshot_path = path
        except OSError as exc:  # ENOSPC, EIO...: the node goes on; tried again later
            self.health.fault("snapshot", exc)
            self._snapshot_retry_at = time.monotonic() + SNAPSHOT_RETRY_S
            self._snapshot_state = "failed"
            return
        except Exception as exc:
            # e.g. a child writer that failed (its error comes back as text): one line
            # each time, its traceback only the first time
            first = self._snapshot_retry_at == 0.0
            self._snapshot_retry_at = time.monotonic() + SNAPSHOT_RETRY_S
            log.warning(
                "snapshot at offset %d failed: %s; trying again in %.0fs at the earliest",
                captured.last_offset,
                exc,
                SNAPSHOT_RETRY_S,
                exc_info=exc if first else None,
            )
            self._snapshot_state = "failed"
            return
        self.health.clear("snapshot")
        elapsed = time.monotonic() - started
        self.snapshot_durations_s.append(elapsed)
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
        self._snapshot_state = "done"

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
