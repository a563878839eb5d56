"""Seeding a new data dir from an etcd 3.4 snapshot (``metaledger snapshot restore
--from-etcd``): the records of a new image at the etcd snapshot's revision
(:mod:`nameserver.etcd_snapshot` says what is carried), written as metaledger's snapshot.

This is a command's whole run, so its imports are few: no state machine, no :mod:`raftlog`,
no gRPC. With a second CPU to spare and a large file, the ``key`` bucket is read and its
records framed in two processes (:mod:`nameserver.etcd_seed_split`); otherwise in one.
What both ways share is in :mod:`nameserver.etcd_seed_records`.
"""

from __future__ import annotations

import gc
import itertools
import mmap
import os
import shutil
from collections.abc import Callable
from typing import cast

from nameserver.etcd_seed_records import (
    SEEDED_CLUSTER_ID,
    Seeded,
    kv_record_encoder,
    live_count,
    live_records,
    other_records,
    progress_of,
    say_counts,
)
from nameserver.state.seeding import check_new_data_dir, seed_data_dir_from_records
from snapshots import SnapshotMeta, etcdfmt

#: from this many key records on (and with a second CPU to spare, see _spare_cpu, in the
#: compiled build), two processes read the key bucket and frame its records, each half of
#: the bucket's pages (:mod:`nameserver.etcd_seed_split`)
SPLIT_RECORDS = 100_000


def seed_from_etcd(
    etcd_file: str,
    data_dir: str,
    progress: Callable[[str], None] | None = None,
    offset_revisions: bool = False,
) -> Seeded:
    """Seed a new, empty data dir from an etcd 3.4 snapshot (or ``member/snap/db``) file, as
    ``metaledger snapshot restore`` seeds one from metaledger's own snapshot.

    The file is read and checked whole before anything is written (``EtcdFormatError``: one
    line naming what is wrong and where; ``OSError``; ``SnapshotError`` for a data dir in
    use); a failure while writing removes what it wrote (the data dir too, if it was new).
    ``progress`` gets a line per stage and, while writing, about one a second. The image
    counts revisions etcd's way from the start unless ``offset_revisions``
    (:mod:`nameserver.etcd_snapshot`'s module doc)."""
    # a million records that form no cycles: the collector would rescan them over and over
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _seed(etcd_file, data_dir, progress or (lambda _line: None), offset_revisions)
    finally:
        if was_enabled:
            gc.enable()


def _seed(
    etcd_file: str, data_dir: str, say: Callable[[str], None], offset_revisions: bool
) -> Seeded:
    check_new_data_dir(data_dir)
    data = _map(etcd_file)
    say(f"read {len(data)} bytes from {etcd_file}; checking etcd's layout")
    made = [
        p
        for p in (data_dir, *(os.path.join(data_dir, d) for d in ("snap", "raft")))
        if not os.path.exists(p)
    ]
    try:
        split = _split_pays()
        seeded = _seed_split(data, data_dir, say, offset_revisions) if split else None
        if seeded is None:
            seeded = _seed_one(data, data_dir, say, offset_revisions)
    except BaseException:
        for path in made:  # what this call made goes again (a data dir it made, whole)
            shutil.rmtree(path, ignore_errors=True)
        raise
    say(f"seeded {data_dir}")
    return seeded


def _map(path: str) -> bytes:
    """The file's bytes, mapped (not copied: a large file is read in place, page by page,
    and a forked child shares the pages); an empty file as ``b""``. A map reads as the
    readers here read bytes (``len``, slices, the buffer)."""
    with open(path, "rb") as f:
        if not os.fstat(f.fileno()).st_size:
            return b""
        return cast(bytes, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def _seed_one(
    data: bytes, data_dir: str, say: Callable[[str], None], offset_revisions: bool
) -> Seeded:
    """Read the file and write the snapshot in this process."""
    etcd, latest, revision = etcdfmt.read_etcd_latest_kv(data, kv_record_encoder())
    del data
    others = other_records(etcd, revision, None, offset_revisions)
    seeded = Seeded.of(etcd, revision, live_count(latest))
    say_counts(say, seeded)
    total = seeded.keys + len(others)
    records = itertools.chain(live_records(latest), others)
    meta = SnapshotMeta(cluster_id=SEEDED_CLUSTER_ID, last_offset=revision, last_term=0)
    seed_data_dir_from_records(data_dir, meta, records, progress_of(say, total))
    return seeded


def _seed_split(
    data: bytes, data_dir: str, say: Callable[[str], None], offset_revisions: bool
) -> Seeded | None:
    """:func:`_seed_one` in two processes, or None where the file is not read that way (too
    few keys, or not a file that way takes whole: the one-process way names its fault)."""
    from nameserver import etcd_seed_split

    return etcd_seed_split.seed(data, data_dir, say, SPLIT_RECORDS, offset_revisions)


def _split_pays() -> bool:
    """Whether to read and frame in two processes: the compiled build (the page scan's
    methods as Python would cost more than the second CPU gives), a fork, and a second CPU
    to spare."""
    return etcdfmt.LATEST_SCAN and hasattr(os, "fork") and _spare_cpu()


def _spare_cpu() -> bool:
    """Whether a second CPU is there for the child: more than one CPU to run on, and a load
    average (the last minute's) below twice their count. The two processes spend about 12 %
    more CPU than one (the parent's look at the child's keys, the fork, the child's frames
    handed over), and still seed faster on a busy machine: 1M keys on 2 CPUs at load 2.2-2.9,
    1.95-2.96 s wall against 2.96-3.65 s in one process; past twice the CPUs the second
    process's CPU is only taken from someone else's."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if not cpus or cpus < 2:
        return False
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average: assume the CPUs are free
        return True
    return load < 2 * cpus
