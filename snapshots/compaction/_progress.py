"""The compaction's progress bar: Spark tasks of the current phase, polled from the status
tracker in a thread, then records written."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["ProgressBar"]


class ProgressBar:
    """A one-line progress bar on stderr: Spark tasks of the current phase (polled from
    the status tracker), then records written. Without a TTY, one line per phase."""

    _WIDTH = 28

    def __init__(self, sc: SparkContext | None, group: str, stream: IO[str] | None) -> None:
        self._sc = sc
        self._group = group
        self._out = stream
        self._tty = bool(stream is not None and stream.isatty())
        self._lock = threading.Lock()
        self._label = ""
        self._done = 0
        self._total = 0
        self._unit = ""
        self._spark = False
        self._old_jobs: set[int] = set()
        self._t0 = self._phase_t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if stream is not None and sc is not None:
            self._thread = threading.Thread(target=self._poll, name="compact-progress", daemon=True)
            self._thread.start()

    def spark_phase(self, label: str) -> None:
        self._end_phase()
        with self._lock:
            self._label, self._unit, self._spark = label, "tasks", True
            self._done = self._total = 0
            self._phase_t0 = time.monotonic()
            if self._sc is not None:
                tracker = self._sc.statusTracker()
                self._old_jobs = set(tracker.getJobIdsForGroup(self._group))

    def count_phase(self, label: str, total: int, unit: str) -> None:
        self._end_phase()
        with self._lock:
            self._label, self._unit, self._spark = label, unit, False
            self._done, self._total = 0, total
            self._phase_t0 = time.monotonic()
        self._render()

    def advance(self, done: int) -> None:
        with self._lock:
            self._done = done
        if self._tty:
            self._render()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        self._end_phase()

    def _end_phase(self) -> None:
        if self._out is None or not self._label:
            return
        if self._spark:
            self._poll_once()
        self._render(final=True)
        self._label = ""

    def _poll(self) -> None:
        while not self._stop.wait(0.3):
            if self._spark and self._label:
                with contextlib.suppress(Exception):  # the tracker is best effort
                    self._poll_once()
                    if self._tty:
                        self._render()

    def _poll_once(self) -> None:
        if self._sc is None:
            return
        tracker = self._sc.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self._group):
            if job_id in self._old_jobs:
                continue
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        with self._lock:
            self._done, self._total = done, total

    def _render(self, final: bool = False) -> None:
        if self._out is None or (not self._tty and not final):
            return
        with self._lock:
            done, total, label, unit = self._done, self._total, self._label, self._unit
            elapsed = time.monotonic() - self._phase_t0
        frac = min(1.0, done / total) if total else (1.0 if final else 0.0)
        filled = round(frac * self._WIDTH)
        bar = "#" * filled + "-" * (self._WIDTH - filled)
        text = f"compact: {label:<20} [{bar}] {done:,}/{total:,} {unit}  {elapsed:6.1f} s"
        if self._tty:
            self._out.write("\r" + text + ("\n" if final else ""))
        else:
            self._out.write(text + "\n")
        self._out.flush()
