"""etcd 3.4's snapshot format, both ways: bbolt files laid out as etcd's backend, sans-I/O.

Bytes in, images out (and back); no file or socket is opened here. ``_bolt`` reads and writes
bbolt files (go.etcd.io/bbolt: meta pages with FNV-64a checksums, freelist, branch and leaf
pages, inline and nested buckets) as trees of buckets; ``_etcd`` maps etcd 3.4's buckets
(``key``, ``meta``, ``lease``, ``members``, ``cluster``, ``auth``, ...) to an ``EtcdImage``
and adds or checks the snapshot's trailing SHA-256.

Errors (all one line, naming the page, or the bucket and key, where it went wrong)::

    EtcdFormatError            root (a ValueError)
    ├── BoltFormatError        not a valid bbolt file (bad magic or version, checksum,
    │                          truncated, page out of range or referenced twice); `page`
    ├── EtcdLayoutError        valid bbolt, not etcd 3.4's layout (unknown bucket, a 3.5
    │                          meta key, a value that does not parse); `bucket`, `key`
    └── SnapshotHashError      the trailing SHA-256 does not match the database
"""

from snapshots.etcdfmt._bolt import BoltFormatError, EtcdFormatError, Tree, read_bolt, write_bolt
from snapshots.etcdfmt._etcd import (
    BUCKETS,
    LATEST_SCAN,
    EtcdImage,
    EtcdLayoutError,
    KeyRevision,
    Lease,
    Member,
    Permission,
    Role,
    SnapshotHashError,
    SnapshotStatus,
    User,
    buckets_to_image,
    image_to_buckets,
    key_record_slow,
    read_etcd_key_pages,
    read_etcd_latest,
    read_etcd_latest_kv,
    read_etcd_snapshot,
    revision_bytes,
    snapshot_status,
    split_snapshot_hash,
    write_etcd_db,
    write_etcd_snapshot,
)
from snapshots.etcdfmt._leafscan import LatestScan, first_key

__all__ = [
    "BUCKETS",
    "LATEST_SCAN",
    "BoltFormatError",
    "EtcdFormatError",
    "EtcdImage",
    "EtcdLayoutError",
    "KeyRevision",
    "LatestScan",
    "Lease",
    "Member",
    "Permission",
    "Role",
    "SnapshotHashError",
    "SnapshotStatus",
    "Tree",
    "User",
    "buckets_to_image",
    "first_key",
    "image_to_buckets",
    "key_record_slow",
    "read_bolt",
    "read_etcd_key_pages",
    "read_etcd_latest",
    "read_etcd_latest_kv",
    "read_etcd_snapshot",
    "revision_bytes",
    "snapshot_status",
    "split_snapshot_hash",
    "write_bolt",
    "write_etcd_db",
    "write_etcd_snapshot",
]
