"""Record-stream format, snapshots and offline compaction (docs/architecture.md).

This package imports no other metaledger package (but the generated ``protos``).

Modules: ``_recordstream`` (framing, CRC32C), ``_tail`` (torn tail or corruption, for
streams appended in place), snapshot files in ``_format`` (the layout, errors, meta and
info), ``_digest`` (content hashes), ``_writer`` and ``_reader`` (verification on read);
``_store`` (snapshot stores), ``_replay`` (record-level replay, segment reading,
single-process compaction); ``compaction/`` (offline compaction on Spark, its own public
surface: ``snapshots.compaction``); ``etcdfmt/`` (etcd 3.4's snapshot format: bbolt files
laid out as etcd's backend, read and written sans-I/O, its own public surface:
``snapshots.etcdfmt``).

Errors::

    RecordStreamError              framing of any record stream; `path`, `position`
    ├── BadHeaderError             the stream header is wrong
    ├── CorruptRecordError         a complete frame is wrong
    └── TornTailError              the data ends inside a frame; from tail_verdict, a torn
                                   tail (`repairable`)

    SnapshotError                  root of the snapshot and replay errors
    ├── SnapshotCorruptError       a snapshot file fails verification (any framing error
    │                              inside a snapshot is reported as this); `path`, `position`
    ├── SnapshotMismatchError      write: the records disagree with the meta's counts/hashes
    ├── ChangeLogError             replay: the change-log segments cannot be read as one log
    └── CompactionError            snapshots.compaction: the Spark job failed
"""

from typing import TYPE_CHECKING, Any

from snapshots._digest import HASH_ALGORITHM, RecordDigest, record_hash
from snapshots._format import (
    SNAPSHOT_FORMAT_VERSION,
    RecordSource,
    Snapshot,
    SnapshotColumns,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotInfo,
    SnapshotMeta,
    SnapshotMismatchError,
    SnapshotRecord,
    snapshot_name,
)
from snapshots._recordstream import (
    FORMAT_VERSION,
    FRAME_OVERHEAD_BYTES,
    HEADER_BYTES,
    INDEX_ENTRY,
    MAGIC,
    MAX_BODY_BYTES,
    BadHeaderError,
    CorruptRecordError,
    Record,
    RecordReader,
    RecordStreamError,
    StreamHeader,
    StreamKind,
    TornTailError,
    decode_header,
    encode_header,
    encode_record,
)
from snapshots._writer import (
    encode_frames,
    encode_snapshot,
    etcd_trailer,
    fsync_dir,
    makedirs_durable,
    write_snapshot,
    write_snapshot_frames,
)

if TYPE_CHECKING:
    from snapshots._reader import (
        SnapshotReader,
        inspect,
        open_snapshot,
        read_snapshot,
        read_snapshot_columns,
        verify_snapshot,
    )
    from snapshots._replay import (
        ChangeLogError,
        ChangeRecord,
        EffectLike,
        compact_local,
        read_segments,
        replay,
    )
    from snapshots._store import FileSnapshotStore, InMemorySnapshotStore, SnapshotStore
    from snapshots._tail import find_valid_frame, tail_verdict

#: the surface's names whose modules are imported when a name is first used (module
#: ``__getattr__``): a command that only writes a snapshot (seeding a data dir from etcd)
#: does not pay for the reader, the stores, replay and the torn-tail scan at its start
_LAZY = {
    **dict.fromkeys(
        (
            "SnapshotReader",
            "inspect",
            "open_snapshot",
            "read_snapshot",
            "read_snapshot_columns",
            "verify_snapshot",
        ),
        "snapshots._reader",
    ),
    **dict.fromkeys(
        (
            "ChangeLogError",
            "ChangeRecord",
            "EffectLike",
            "compact_local",
            "read_segments",
            "replay",
        ),
        "snapshots._replay",
    ),
    **dict.fromkeys(
        ("FileSnapshotStore", "InMemorySnapshotStore", "SnapshotStore"), "snapshots._store"
    ),
    **dict.fromkeys(("find_valid_frame", "tail_verdict"), "snapshots._tail"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'snapshots' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "FORMAT_VERSION",
    "FRAME_OVERHEAD_BYTES",
    "HASH_ALGORITHM",
    "HEADER_BYTES",
    "INDEX_ENTRY",
    "MAGIC",
    "MAX_BODY_BYTES",
    "SNAPSHOT_FORMAT_VERSION",
    "BadHeaderError",
    "ChangeLogError",
    "ChangeRecord",
    "CorruptRecordError",
    "EffectLike",
    "FileSnapshotStore",
    "InMemorySnapshotStore",
    "Record",
    "RecordDigest",
    "RecordReader",
    "RecordSource",
    "RecordStreamError",
    "Snapshot",
    "SnapshotColumns",
    "SnapshotCorruptError",
    "SnapshotError",
    "SnapshotInfo",
    "SnapshotMeta",
    "SnapshotMismatchError",
    "SnapshotReader",
    "SnapshotRecord",
    "SnapshotStore",
    "StreamHeader",
    "StreamKind",
    "TornTailError",
    "compact_local",
    "decode_header",
    "encode_frames",
    "encode_header",
    "encode_record",
    "encode_snapshot",
    "etcd_trailer",
    "find_valid_frame",
    "fsync_dir",
    "inspect",
    "makedirs_durable",
    "open_snapshot",
    "read_segments",
    "read_snapshot",
    "read_snapshot_columns",
    "record_hash",
    "replay",
    "snapshot_name",
    "tail_verdict",
    "verify_snapshot",
    "write_snapshot",
    "write_snapshot_frames",
]
