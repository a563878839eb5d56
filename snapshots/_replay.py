"""Record-level replay, shared by the server and the compaction job.

The change log holds effects, not operations: every record is a whole new value of one
``(type, key)``, or a delete of it, at a position ``(offset, sub)``. So the state at an
offset is, per ``(type, key)``, the record with the greatest position (a delete removes the
key), whatever order the records arrive in. That is all :func:`replay` knows; no state
machine rules, so a job can partition the records by key and replay each part alone.

:func:`read_segments` reads change-log segment files (``<dir>/<first-offset:020d>.seg``,
record streams of kind CHANGE_LOG_SEGMENT whose payloads are ``records.Effect``) without
importing ``raftlog``. :func:`compact_local` is the single-process compaction: base snapshot
+ segments up to an offset -> new snapshot; the Spark job's output must hash the same.

Errors: :class:`ChangeLogError` (a :class:`~snapshots.SnapshotError`) when the segments
cannot be read as one log: a damaged frame (torn or corrupt, wrapping the record-stream
error), a wrong header, records out of order, an undecodable effect, or two different
records claiming one position for a key. :class:`~snapshots.SnapshotCorruptError` for a bad
base snapshot; ValueError for misuse; OSError from the file system.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import NamedTuple, Protocol

from google.protobuf.message import DecodeError

from protos.records_pb2 import Effect
from snapshots._format import SnapshotError, SnapshotInfo, SnapshotMeta
from snapshots._reader import open_snapshot
from snapshots._recordstream import RecordReader, RecordStreamError, StreamKind
from snapshots._writer import write_snapshot

__all__ = [
    "ChangeLogError",
    "ChangeRecord",
    "EffectLike",
    "compact_local",
    "read_segments",
    "replay",
]

_SEGMENT_NAME = re.compile(r"^(\d{20})\.seg$")
_READ_BUFFER_BYTES = 256 * 1024

#: Key of the replayed state: (type, key).
StateKey = tuple[str, bytes]


class ChangeLogError(SnapshotError):
    """The change log cannot be replayed; `path` and `position` say where when known."""

    def __init__(self, path: str | None, position: int | None, reason: str) -> None:
        where = f"{path or '<change log>'}" + (
            f" at byte {position}" if position is not None else ""
        )
        super().__init__(f"{where}: bad change log: {reason}")
        self.path = path
        self.position = position
        self.reason = reason


class EffectLike(Protocol):
    """What replay reads of a record: ``records.Effect`` or :class:`ChangeRecord`."""

    @property
    def type(self) -> str: ...
    @property
    def key(self) -> bytes: ...
    @property
    def value(self) -> bytes: ...
    @property
    def delete(self) -> bool: ...


class ChangeRecord(NamedTuple):
    """One change-log record as :func:`read_segments` yields it."""

    offset: int
    sub: int
    type: str
    key: bytes
    value: bytes
    delete: bool


def replay(
    records: Iterable[tuple[int, int, EffectLike]],
    base: Mapping[StateKey, bytes] | None = None,
    *,
    after_offset: int = -1,
) -> dict[StateKey, bytes]:
    """The state ``{(type, key): value}`` after `records`, on top of `base`.

    `records` are ``(offset, sub, effect)`` in any order: per (type, key) the greatest
    (offset, sub) wins, and a delete that wins removes the key. Records at or below
    `after_offset` are skipped: pass the base snapshot's last offset, since the base already
    holds their effect (replay is idempotent). `base` is not modified.

    Raises ChangeLogError when two different records of one (type, key) share a position
    (the same record twice, e.g. from overlapping inputs, is fine).
    """
    state = dict(base) if base is not None else {}
    _replay_into(state, records, after_offset)
    return state


def _replay_into(
    state: dict[StateKey, bytes],
    records: Iterable[tuple[int, int, EffectLike]],
    after_offset: int,
) -> None:
    winners: dict[StateKey, tuple[int, int, bytes | None]] = {}
    get = winners.get
    for offset, sub, effect in records:
        if offset <= after_offset:
            continue
        key = (effect.type, effect.key)
        value = None if effect.delete else effect.value
        seen = get(key)
        if seen is not None:
            if (seen[0], seen[1]) > (offset, sub):
                continue
            if seen[0] == offset and seen[1] == sub and seen[2] != value:
                raise ChangeLogError(
                    None, None, f"two different records of {key!r} at ({offset}, {sub})"
                )
        winners[key] = (offset, sub, value)
    for key, (_, _, value) in winners.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value


def read_segments(
    directory: str | os.PathLike[str], upto_offset: int, *, after_offset: int = -1
) -> Iterator[ChangeRecord]:
    """The records of the segment files in `directory` with
    ``after_offset < offset <= upto_offset``, in log order.

    Segments wholly at or below `after_offset` are not opened. Reading stops at the first
    record past `upto_offset`, so a torn tail beyond it (a segment being written) does no
    harm; a torn tail before it is an error, since the records it cut off might be at or
    below `upto_offset`. An offset the log does not reach is not an error (an entry may have
    no effects), so check the log's extent separately when that matters.

    Raises ChangeLogError (see the module docstring), OSError.
    """
    root = Path(directory)
    matches = ((_SEGMENT_NAME.match(p.name), p) for p in root.iterdir())
    segments = sorted((int(m.group(1)), p) for m, p in matches if m)
    last = (-1, -1)
    for i, (first, path) in enumerate(segments):
        if first > upto_offset:
            return
        # every record of a segment is at or below the next segment's first offset
        if i + 1 < len(segments) and segments[i + 1][0] <= after_offset:
            continue
        with open(path, "rb", buffering=_READ_BUFFER_BYTES) as f:
            reader = RecordReader(f, path=str(path), start=0)
            try:
                header = reader.read_header()
                if header.kind != StreamKind.CHANGE_LOG_SEGMENT or header.base_offset != first:
                    raise ChangeLogError(
                        str(path),
                        0,
                        f"header of kind {header.kind.name} based at "
                        f"{header.base_offset} in a segment named for {first}",
                    )
                for record in reader:
                    position = (record.offset, record.sub)
                    if position <= last:
                        raise ChangeLogError(
                            str(path), record.position, f"record {position} after {last}"
                        )
                    last = position
                    if record.offset > upto_offset:
                        return
                    if record.offset <= after_offset:
                        continue
                    effect = Effect()
                    try:
                        effect.ParseFromString(record.payload)
                    except DecodeError as e:
                        raise ChangeLogError(
                            str(path), record.position, f"undecodable effect: {e}"
                        ) from e
                    yield ChangeRecord(
                        record.offset,
                        record.sub,
                        effect.type,
                        effect.key,
                        effect.value,
                        effect.delete,
                    )
            except RecordStreamError as e:
                raise ChangeLogError(e.path, e.position, f"{type(e).__name__}: {e.reason}") from e


def compact_local(
    segments_dir: str | os.PathLike[str],
    base_snapshot: str | os.PathLike[str] | None,
    upto: int,
    out_path: str | os.PathLike[str],
    meta: SnapshotMeta,
    progress: Callable[[int], None] | None = None,
) -> SnapshotInfo:
    """Fold a base snapshot (or nothing) and the segments' records up to `upto` into a new
    snapshot at `out_path` (written as :func:`~snapshots.write_snapshot` does).

    `meta` describes the result: its `last_offset` must be `upto`; its `last_term` and
    `raft_index` come from the caller (the log knows them, the effects may not); leave its
    counts and hashes None to have them computed. The base must belong to
    `meta.cluster_id` and not be newer than `upto`.

    Raises ValueError for such misuse, SnapshotCorruptError for a bad base, ChangeLogError
    for bad segments, OSError; nothing is written at `out_path` on error.
    """
    if meta.last_offset != upto:
        raise ValueError(f"meta.last_offset {meta.last_offset} is not upto {upto}")
    state: dict[StateKey, bytes] = {}
    after = -1
    if base_snapshot is not None:
        with open_snapshot(base_snapshot) as reader:
            info = reader.info
            if info.cluster_id != meta.cluster_id:
                raise ValueError(
                    f"base snapshot {base_snapshot} is of cluster {info.cluster_id!r}, "
                    f"not {meta.cluster_id!r}"
                )
            if info.last_offset > upto:
                raise ValueError(
                    f"base snapshot {base_snapshot} is at offset {info.last_offset}, past {upto}"
                )
            for type_, key, value in reader.iter_records():
                state[type_, key] = value
        after = info.last_offset
    records = read_segments(segments_dir, upto, after_offset=after)
    _replay_into(state, ((r.offset, r.sub, r) for r in records), after)
    return write_snapshot(
        out_path, meta, lambda: ((t, k, v) for (t, k), v in state.items()), progress
    )
