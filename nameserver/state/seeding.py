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
    from snapshots import FileSnapshotStore  # (the frames' way, the usual one, needs none)

    check_new_data_dir(data_dir)
    store = FileSnapshotStore(os.path.join(data_dir, "snap"))
    info = store.save(meta, records, progress, one_pass=True)
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
    snap_dir = os.path.join(data_dir, "snap")  # new and empty: no temp file to remove
    makedirs_durable(snap_dir)
    path = os.path.join(snap_dir, snapshot_name(meta.last_offset))
    info = write_snapshot_frames(path, meta, frames, actual, progress)
    write_base_offset(data_dir, meta.last_offset)
    return info


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
