"""Snapshots on a node: the store-backed sink the replicated log writes through, and
restart from the latest valid snapshot plus the change-log segments after it (docs/operations.md,
"Restarts").

Files under ``<data-dir>``::

    snap/<last-offset>.snap   our snapshots, the newest `keep` kept (snapshots.FileSnapshotStore)
    raft/dump.snap            a hard link to the snapshot PySyncObj's log is compacted behind;
                              PySyncObj ships this file to followers that fell behind
    log/<first-offset>.seg    the change log; segments wholly below the oldest kept snapshot
                              are deleted (or moved to an archive directory for Spark)
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from nameserver.state.forked import ChildFailedError, ForkError, can_fork, run_in_child
from nameserver.state.image import MetadataDelta, MetadataImage, Provenance
from nameserver.state.machine import CapturedImage, image_from_records, image_records
from nameserver.state.registry import Registry
from nameserver.state.seeding import (
    BASE_OFFSET_FILE,
    check_new_data_dir,
    write_base_offset,
)
from protos import records_pb2
from raftlog import SegmentLog
from raftlog.entry import Effect
from raftlog.log import Captured, gc_paused
from snapshots import (
    FileSnapshotStore,
    RecordSource,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotMeta,
    SnapshotMismatchError,
    inspect,
    open_snapshot,
    read_snapshot_columns,
    verify_snapshot,
)

log = logging.getLogger(__name__)


class StoreSink:
    """The replicated log's snapshot sink: a file store plus PySyncObj's dump link."""

    def __init__(
        self,
        store: FileSnapshotStore,
        dump_file: str,
        cluster_id: str,
        segments: SegmentLog,
        archive_dir: str | None = None,
        in_child: bool = False,
    ) -> None:
        """`in_child`: write each snapshot from a forked child process (see
        :mod:`nameserver.state.forked`), where the platform can fork."""
        self.store = store
        self.dump_file = dump_file
        self.cluster_id = cluster_id
        self.segments = segments
        self.archive_dir = archive_dir
        self.in_child = in_child and can_fork()

    def write(self, captured: Captured, raft_index: int, engine_meta: bytes) -> str:
        """Write the snapshot; its path. In a child process, when configured: then a child
        that fails or dies raises ChildFailedError after its temp file is removed, and the
        kept snapshots are as they were (the caller reports the snapshot failed; the engine
        asks again later); when no child can be forked, it is written on this thread."""
        meta = SnapshotMeta(
            cluster_id=self.cluster_id,
            last_offset=captured.last_offset,
            last_term=captured.last_term,
            raft_index=raft_index,
            engine_meta=engine_meta,
        )
        if not self.in_child:
            return self._save(meta, captured.records, one_pass=False)
        records = captured.records
        if isinstance(captured, CapturedImage):
            # nothing in the child competes for its GIL: no pauses between records
            image = captured.image
            records = lambda: image_records(image)  # noqa: E731
        # Before a fork, as Instagram does it: the objects alive now (the captured image
        # above all) leave the collector's generations. The parent's full collections then
        # neither scan them (a 1M-key image took 100-800 ms per full collection, each a
        # commit stall) nor write to their pages, which the kernel would copy for the child.
        # Young cyclic garbage is collected first (cheap: two small generations); what is
        # left of it in the old generation stays uncollected, a few objects per snapshot.
        gc.collect(1)
        gc.freeze()
        try:
            child = run_in_child(
                # the child's memory is its own: it holds the encoded file once rather than
                # encoding and hashing every record twice
                lambda: self._save(meta, records, one_pass=True),
                f"snapshot at offset {meta.last_offset}",
            )
        except ChildFailedError:
            self.store.remove_temp_files()
            raise
        except ForkError as exc:
            # e.g. no memory for the child's page tables: this snapshot on a thread instead
            # (commits stall while it encodes, but the log still gets compacted)
            log.warning("%s; writing it on a thread of this process", exc)
            return self._save(meta, captured.records, one_pass=False)
        log.info(
            "snapshot at offset %d: written by child %d (fork %.1f ms, %.2f s CPU)",
            meta.last_offset,
            child.pid,
            child.fork_ms,
            child.cpu_s,
        )
        return child.value

    def _save(self, meta: SnapshotMeta, records: RecordSource, *, one_pass: bool) -> str:
        info = self.store.save(meta, records, one_pass=one_pass)
        assert info.path is not None
        return str(info.path)

    def publish(self, path: str) -> None:
        link_dump(path, self.dump_file)

    def retention_offset(self) -> int:
        """Segments wholly below this offset are covered by every kept snapshot."""
        kept = self.store.list()
        return min(i.last_offset for i in kept) + 1 if kept else 0

    def read(self, path: str) -> tuple[int, int, bytes, Iterable[tuple[str, bytes, bytes]]]:
        snap = read_snapshot_columns(path)  # verifies everything before anything is used
        info = snap.info
        return info.last_offset, info.last_term, info.engine_meta, snap

    def verify(self, path: str) -> str | None:
        try:
            verify_snapshot(path)
        except SnapshotCorruptError as exc:
            return str(exc)
        return None

    def header(self, path: str) -> tuple[int, bytes]:
        info = inspect(path)
        return info.last_offset, info.engine_meta

    def adopt(self, path: str) -> str:
        info = inspect(path)
        kept = self.store.path_of(info.last_offset)
        if not (kept.exists() and os.path.samefile(kept, path)):
            tmp = kept.with_suffix(".adopt.tmp")
            shutil.copyfile(path, tmp)
            os.replace(tmp, kept)
        return str(kept)


def read_base_offset(dump_file: str) -> int:
    """The offset a restored data dir's fresh Raft log continues after (0 if not restored)."""
    path = os.path.join(os.path.dirname(dump_file), BASE_OFFSET_FILE)
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except FileNotFoundError:
        return 0


def seed_data_dir(snapshot_file: str, data_dir: str) -> int:
    """``metaledger snapshot restore``: seed an empty data dir with a snapshot so that a
    new cluster (every member seeded from the same file) starts from it. Returns its offset.

    The new cluster's Raft log starts empty; its offsets continue after the snapshot's.
    """
    info = verify_snapshot(snapshot_file)
    check_new_data_dir(data_dir)
    store = FileSnapshotStore(os.path.join(data_dir, "snap"))
    target = store.path_of(info.last_offset)
    tmp = target.with_suffix(".restore.tmp")
    shutil.copyfile(snapshot_file, tmp)
    os.replace(tmp, target)
    write_base_offset(data_dir, info.last_offset)
    verify_snapshot(target)
    return info.last_offset


def link_dump(snapshot: Path | str, dump_file: str) -> None:
    """Point PySyncObj's dump file at ``snapshot`` atomically (a hard link, then rename)."""
    tmp = dump_file + ".link.tmp"
    if os.path.exists(tmp):
        os.unlink(tmp)
    os.link(snapshot, tmp)
    os.replace(tmp, dump_file)
    fd = os.open(os.path.dirname(dump_file) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def restore(
    store: FileSnapshotStore,
    segments: SegmentLog,
    dump_file: str,
    cluster_id: str,
    registry: Registry,
) -> tuple[MetadataImage, int]:
    """Rebuild the image (of ``registry``'s kinds) at start: latest valid snapshot + the
    change log after it.

    Returns the image and the engine's base offset (the last offset inside PySyncObj's
    dump, 0 without one). A corrupt newest snapshot is skipped with a WARNING naming it
    (the store falls back to the previous one); if it was the engine's dump, the dump is
    rebuilt at the same offset from the previous snapshot and the change log, and must
    hold what the damaged one's header says it held: else SnapshotError naming the file.
    """
    latest: Path | None = None
    image = MetadataImage.empty(registry)
    for info in store.list():  # newest first; one read verifies and loads
        assert info.path is not None
        try:
            # the restored image is long-lived and immutable: frozen out of the collector
            with gc_paused(freeze=True):
                snap = read_snapshot_columns(info.path)
                image = image_from_records(
                    snap, snap.info.last_offset, snap.info.last_term, registry
                )
                del snap
        except SnapshotError as exc:
            log.warning("refusing snapshot %s: %s; falling back to an older one", info.path, exc)
            continue
        latest = info.path
        log.info("restored snapshot %s at offset %d", latest, image.provenance.last_offset)
        break
    engine_base = read_base_offset(dump_file)
    repaired = False
    if os.path.exists(dump_file):
        try:
            if latest is not None and os.path.samefile(latest, dump_file):
                engine_base = image.provenance.last_offset  # the same file, just verified
            else:
                engine_base = verify_snapshot(dump_file).last_offset
        except SnapshotError as exc:
            engine_base = _repair_dump(exc, image, segments, dump_file, cluster_id, store)
            repaired = True
    image = replay_segments(image, segments)
    if repaired and image.provenance.last_offset < engine_base:
        # the rebuilt dump holds this very image at engine_base (the offsets in between
        # changed nothing): say so, or the engine's load of the dump would look like a
        # snapshot from the leader
        image = image.replace(Provenance(engine_base, image.provenance.last_term))
    return image, engine_base


def drop_incomplete_last_offset(segments: SegmentLog) -> None:
    """A crash between the records of one offset leaves it incomplete (each record says how
    many its offset has): drop that offset; replay of the Raft log re-derives it."""
    last = segments.last_offset
    if last <= 0:
        return
    records = [r for r in segments.read_from(last) if r.offset == last]
    if not records:
        return
    declared = records_pb2.Effect.FromString(records[-1].payload).count
    if declared and len(records) == declared:
        return
    log.warning(
        "change log: offset %d has %d of %s records; dropping it to re-derive it",
        last,
        len(records),
        declared or "an unknown number of",
    )
    segments.truncate_after(last - 1)


def replay_segments(
    image: MetadataImage, segments: SegmentLog, upto: int | None = None
) -> MetadataImage:
    """Apply the change-log records after the image's offset (up to ``upto``)."""
    delta = MetadataDelta(image)
    last = image.provenance.last_offset
    count = 0
    for rec in segments.read_from(last + 1):
        if upto is not None and rec.offset > upto:
            break
        eff = Effect.decode(rec.payload)
        delta.replay(eff.type, eff.key, eff.value, eff.delete)
        last = rec.offset
        count += 1
    if count:
        delta.provenance = Provenance(last, image.provenance.last_term)
        log.info("replayed %d change-log records up to offset %d", count, last)
    return delta.build()


def _repair_dump(
    error: SnapshotError,
    base: MetadataImage,
    segments: SegmentLog,
    dump_file: str,
    cluster_id: str,
    store: FileSnapshotStore,
) -> int:
    log.warning("the engine's snapshot is corrupt (%s); rebuilding it", error)
    try:
        with open_snapshot(dump_file) as reader:
            header = reader.info
    except (SnapshotError, OSError) as exc:
        raise SnapshotError(
            f"{dump_file}: the engine's snapshot is unreadable ({exc}) and cannot be rebuilt; "
            "restore this node from another member's snapshot (metaledger snapshot restore)"
        ) from exc
    if base.provenance.last_offset > header.last_offset:
        raise SnapshotError(
            f"{dump_file}: corrupt, and no older snapshot to rebuild offset {header.last_offset} from"
        )
    image = replay_segments(base, segments, upto=header.last_offset)
    if segments.last_offset < header.last_offset:
        # offsets with no effects (read barriers, no-op txns) leave no records; effects
        # newer than the last fsync could be missing only after a power loss
        log.warning(
            "%s: the change log ends at %d, before the snapshot's offset %d: rebuilding "
            "from what it holds (the offsets after it changed nothing, or were lost with power)",
            dump_file,
            segments.last_offset,
            header.last_offset,
        )
    captured = CapturedImage(image)
    # the damaged file's header (its own CRC verified) says what it held: the rebuild must
    # hold the same records, or it is refused (an older snapshot whose change log after it
    # was deleted, or lost with power, would silently rebuild a smaller state)
    meta = SnapshotMeta(
        cluster_id=cluster_id,
        last_offset=header.last_offset,
        last_term=header.last_term,
        raft_index=header.raft_index,
        engine_meta=header.engine_meta,
        counts=dict(header.counts),
        hashes=dict(header.hashes),
    )
    try:
        info = store.save(meta, captured.records)  # replaces the damaged file atomically
    except SnapshotMismatchError as exc:
        raise SnapshotError(
            f"{error}; the snapshot at offset {base.provenance.last_offset} and "
            f"the change log after it do not rebuild it ({exc}); restore this node from "
            "another member's snapshot (metaledger snapshot restore), or wipe its data dir "
            "to have the leader send one"
        ) from exc
    assert info.path is not None
    link_dump(info.path, dump_file)
    log.warning("rebuilt the engine's snapshot at offset %d: %s", header.last_offset, info.path)
    return header.last_offset
