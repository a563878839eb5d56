"""Where a watcher's replay comes from: :class:`SegmentHistory` (the change-log segments and
the newest snapshot) and the persisted compaction floor.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Protocol

from nameserver.kv.records import KeyValue
from nameserver.watch.events import Compacted, in_range
from raftlog import Effect, SegmentLog
from snapshots import FileSnapshotStore, open_snapshot


# --------------------------------------------------------------------------- history
class History(Protocol):
    """Past changes, for replay (the change-log segments on a server)."""

    def floor(self, delivered: int) -> int:
        """The oldest revision whose changes are all available (``delivered + 1`` if none)."""

    def changes(self, start: int, upto: int) -> Iterator[tuple[int, Effect]]:
        """``(offset, effect)`` for ``start <= offset <= upto`` in order. Raises
        :class:`Compacted` when ``start`` is (or became) below the floor. Blocking."""

    def base(
        self, before: int, type_: str, key: bytes, end: bytes | None
    ) -> tuple[int, dict[bytes, KeyValue]]:
        """``(X, state)``: the range's records at the newest kept snapshot ``X < before``,
        or ``(0, {})`` when there is none. Blocking."""


class SegmentHistory:
    """Replay from this node's change-log segments and snapshot store."""

    def __init__(self, segments: SegmentLog, store: FileSnapshotStore, floor_path: str) -> None:
        self.segments = segments
        self.store = store
        self.floor_path = floor_path
        self.installed_floor = read_floor(floor_path)

    def floor(self, delivered: int) -> int:
        if not self.store.list() and not self.installed_floor:
            return 1  # never snapshotted: no segment was ever deleted, history is complete
        first = self.segments.first_offset or delivered + 1
        return max(first, self.installed_floor)

    def changes(self, start: int, upto: int) -> Iterator[tuple[int, Effect]]:
        try:
            records = self.segments.read_from(start)
        except ValueError as exc:  # closed: the node is stopping
            raise Compacted(self.floor(upto)) from exc
        # read_from fixed its view of the segments: if the floor is still at or below start
        # now, it was when the view was taken (the floor only rises)
        floor = self.floor(upto)
        if start < floor:
            raise Compacted(floor)
        try:
            for record in records:
                if record.offset > upto:
                    return
                yield record.offset, Effect.decode(record.payload)
        except FileNotFoundError as exc:  # retention deleted a segment under us
            raise Compacted(self.floor(upto)) from exc

    def base(
        self, before: int, type_: str, key: bytes, end: bytes | None
    ) -> tuple[int, dict[bytes, KeyValue]]:
        below = [i for i in self.store.list() if i.last_offset < before and i.path is not None]
        if not below:
            return 0, {}
        info = max(below, key=lambda i: i.last_offset)
        state: dict[bytes, KeyValue] = {}
        try:
            with open_snapshot(str(info.path)) as reader:
                for t, k, v in reader.iter_records(False):
                    if t == type_ and in_range(k, key, end):
                        state[k] = KeyValue.from_record(v)
        except OSError:  # deleted meanwhile (keep): fall back to the segments alone
            return 0, {}
        return info.last_offset, state


def read_floor(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def write_floor(path: str, floor: int) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{floor}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
