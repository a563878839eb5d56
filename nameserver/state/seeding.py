"""Seeding a new data dir with a snapshot made here (from records, or from frames encoded
elsewhere): the snapshot store's file and the Raft log's base offset. Apart from
:mod:`nameserver.state.snapshotting`, which re-exports these, so that ``metaledger snapshot
restore --from-etcd`` imports neither the state machine nor :mod:`raftlog`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from snapshots import (
    RecordDigest,
    RecordSource,
    SnapshotError,
    SnapshotInfo,
    SnapshotMeta,
    makedirs_durable,
    snapshot_name,
    write_snapshot,
    write_snapshot_frames,
)

#: the file in ``<data-dir>/raft`` naming the offset a restored node's Raft log continues after
BASE_OFFSET_FILE = "base_offset"


def seed_data_dir_from_records(
    data_dir: str,
    meta: SnapshotMeta,
    records: RecordSource,
    progress: Callable[[int], None] | None = None,
) -> SnapshotInfo:
    """``seed_data_dir`` (:mod:`nameserver.state.snapshotting`) from records made here (an
    image seeded from elsewhere, such as an etcd snapshot): written once, straight into the
    new data dir's snapshot store (one pass: the encoded records are held in memory until
    the header is written), then the Raft log's base offset."""
    check_new_data_dir(data_dir)
    path = _new_snapshot_path(data_dir, meta.last_offset)
    # the file's pages go to the disk in steps without a wait for each (no node runs on a
    # new data dir yet), the file synced whole at the end
    info = write_snapshot(path, meta, records, progress, one_pass=True, background_writeback=True)
    write_base_offset(data_dir, meta.last_offset)
    return info


def seed_data_dir_from_frames(
    data_dir: str,
    meta: SnapshotMeta,
    frames: Iterable[tuple[bytes, int]],
    actual: RecordDigest,
    progress: Callable[[int], None] | None = None,
) -> SnapshotInfo:
    """:func:`seed_data_dir_from_records` of records whose frames were encoded elsewhere
    (``snapshots.encode_frames``, e.g. in parts on several processes): ``meta`` carries the
    counts and hashes, ``actual`` is the encoders' digest (see ``write_snapshot_frames``)."""
    check_new_data_dir(data_dir)
    path = _new_snapshot_path(data_dir, meta.last_offset)
    info = write_snapshot_frames(
        path, meta, frames, actual, progress, background_writeback=True
    )  # (as seed_data_dir_from_records writes)
    write_base_offset(data_dir, meta.last_offset)
    return info


def _new_snapshot_path(data_dir: str, last_offset: int) -> str:
    """The path of the snapshot store's file at ``last_offset`` in ``data_dir`` (checked
    new: no snapshot and so no temp file of an interrupted write to remove), its directory
    made."""
    snap_dir = os.path.join(data_dir, "snap")
    makedirs_durable(snap_dir)
    return os.path.join(snap_dir, snapshot_name(last_offset))


def check_new_data_dir(data_dir: str) -> None:
    """SnapshotError unless ``data_dir`` holds no snapshot, Raft log or change log yet."""
    for sub in ("snap", "raft", "log"):
        path = os.path.join(data_dir, sub)
        if os.path.isdir(path) and os.listdir(path):
            raise SnapshotError(f"{path}: not empty; restore needs a new data dir")


def write_base_offset(data_dir: str, offset: int) -> None:
    """``<data-dir>/raft/base_offset``: a restored node's Raft log continues after ``offset``."""
    raft_dir = os.path.join(data_dir, "raft")
    makedirs_durable(raft_dir)
    with open(os.path.join(raft_dir, BASE_OFFSET_FILE), "w") as f:
        f.write(f"{offset}\n")
        f.flush()
        os.fsync(f.fileno())
