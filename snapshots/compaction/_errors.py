"""The compaction's one error of its own. The others it raises are the package's
(:mod:`snapshots`): ChangeLogError for segments out of order or damaged,
SnapshotCorruptError for a bad base, SnapshotMismatchError for a digest that disagrees."""

from __future__ import annotations

from snapshots._format import SnapshotError

__all__ = ["CompactionError"]


class CompactionError(SnapshotError):
    """The Spark job failed. `worker_error` names the exception a worker raised when one can
    be read from Spark's error (e.g. ``ChangeLogError``), `detail` is its message."""

    def __init__(self, message: str, worker_error: str | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.worker_error = worker_error
        self.detail = detail
