"""Writing snapshot files (:mod:`snapshots._format`): atomically (temp file in the same
directory, synced in steps, renamed, directory synced), from records in one or two passes,
or from frames encoded elsewhere (:func:`encode_frames`, e.g. on Spark's executors).
"""

from __future__ import annotations

import errno
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final, cast

from protos.records_pb2 import Effect
from protos.snapshot_pb2 import SnapshotFooter, SnapshotHeader, TypeDigest
from snapshots._digest import HASH_ALGORITHM, RecordDigest, type_hasher
from snapshots._format import (
    CHUNK_BYTES,
    MAX_RECORDS,
    SNAPSHOT_FORMAT_VERSION,
    RecordSource,
    SnapshotInfo,
    SnapshotMeta,
    SnapshotMismatchError,
    SnapshotRecord,
    crc32c,
    info_from_header,
)
from snapshots._framewire import SMALL, VARINTS, frame_records
from snapshots._recordstream import StreamKind, encode_header, encode_record

__all__ = [
    "encode_frames",
    "encode_snapshot",
    "etcd_trailer",
    "write_snapshot",
    "write_snapshot_frames",
]

_SYNC_EVERY_BYTES: Final = 8 * 1024 * 1024  # see _SyncingWriter


def write_snapshot(
    path: str | os.PathLike[str],
    meta: SnapshotMeta,
    records: RecordSource,
    progress: Callable[[int], None] | None = None,
    *,
    one_pass: bool = False,
    background_writeback: bool = False,
) -> SnapshotInfo:
    """Write a snapshot atomically: temp file in the same directory, fsync, rename, fsync dir.

    `records` yields each ``(type, key, value)`` of the image once (order does not matter;
    the same (type, key) twice is the caller's bug and is not checked). It is read once
    when `meta` carries counts and hashes, which are then checked against the records
    while writing. When they are None, a first pass computes them and a second pass writes,
    so `records` must be re-iterable: a collection (list, tuple, dict view, ...) or a
    callable returning a fresh iterable each call; a one-shot iterator raises TypeError
    before anything is written. The second pass is checked against the first.

    ``one_pass=True`` (when `meta` has no counts and hashes) reads the records once and
    holds their encoded frames in memory, about the size of the file, until the header can
    be written: about a third less CPU than two passes (each record is encoded and hashed
    once), for a writer that can spare the memory (a forked child).

    `progress` is called with the number of records written so far, after each ~1 MiB
    chunk and at the end. ``background_writeback``: see :class:`_SyncingWriter`.

    Failure contract: on any exception (SnapshotMismatchError when the records disagree with
    the meta or between passes, ValueError/TypeError for a bad meta or record, OSError,
    or whatever `records` or `progress` raise) the temp file is removed and nothing exists
    at `path` that was not there before. A crash (kill, power loss) may leave a temp file
    named ``.<name>.*.tmp`` behind, never a partial file at `path`.
    """
    return _write_file(
        path,
        meta,
        lambda write, target: _plan_and_encode(write, target, meta, records, progress, one_pass),
        background_writeback,
    )


def write_snapshot_frames(
    path: str | os.PathLike[str],
    meta: SnapshotMeta,
    frames: Iterable[tuple[bytes, int]],
    actual: RecordDigest,
    progress: Callable[[int], None] | None = None,
    *,
    background_writeback: bool = False,
) -> SnapshotInfo:
    """:func:`write_snapshot` of records whose frames were encoded elsewhere by
    :func:`encode_frames` (e.g. on Spark's executors, in parallel), so that writing is
    only copying.

    `meta` must carry the counts and hashes (the header's). `frames` yields chunks of
    frames with the number of records up to the chunk's end, numbered 1, 2, ... across
    all chunks in order; `actual` must hold, once `frames` is exhausted, the digest of
    what the chunks hold (the encoders' own), and the write fails with
    SnapshotMismatchError when it is not the meta's. ``background_writeback`` and the
    failure contract as :func:`write_snapshot`'s.
    """
    if meta.counts is None or meta.hashes is None:
        raise ValueError("meta: frames encoded elsewhere need the counts and hashes up front")
    expected = RecordDigest.from_summary(meta.counts, meta.hashes)
    return _write_file(
        path,
        meta,
        lambda write, target: _assemble(
            write, target, meta, expected, iter(frames), actual, progress
        ),
        background_writeback,
    )


def encode_frames(
    offset: int,
    records: Iterable[SnapshotRecord],
    digest: RecordDigest,
    first_sub: int = 1,
) -> Iterator[tuple[bytes, int]]:
    """The frames of a snapshot at `offset` holding `records`, numbered from `first_sub`,
    in chunks of about 1 MiB with the number of records up to each chunk's end; adds every
    record to `digest`. For :func:`write_snapshot_frames`; a part starting at record n + 1
    of the whole numbers from n + 1."""
    return _record_chunks(offset, records, digest, first_sub)


def _write_file(
    path: str | os.PathLike[str],
    meta: SnapshotMeta,
    produce: Callable[[Callable[[bytes], object], str], tuple[int, SnapshotHeader]],
    background_writeback: bool = False,
) -> SnapshotInfo:
    """Temp file in the same directory, ``produce(write, path)``, fsync, rename, fsync dir;
    nothing left at `path` on error."""
    target = Path(path)
    meta.validate()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with open(fd, "wb") as f:
            writer = _SyncingWriter(f, background_writeback)
            size, header = produce(writer.write, str(target))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
    return info_from_header(target, size, header)


def encode_snapshot(
    meta: SnapshotMeta,
    records: RecordSource,
    progress: Callable[[int], None] | None = None,
    *,
    one_pass: bool = False,
) -> tuple[bytes, SnapshotInfo]:
    """The bytes of a snapshot file and its info (path None); same contract as
    :func:`write_snapshot`, without the file system. For in-memory stores and tests."""
    meta.validate()
    buf = io.BytesIO()
    size, header = _plan_and_encode(buf.write, None, meta, records, progress, one_pass)
    return buf.getvalue(), info_from_header(None, size, header)


def _plan_and_encode(
    write: Callable[[bytes], object],
    path: str | None,
    meta: SnapshotMeta,
    records: RecordSource,
    progress: Callable[[int], None] | None,
    one_pass: bool,
) -> tuple[int, SnapshotHeader]:
    if one_pass and meta.counts is None:
        source = records() if callable(records) else records
        return _encode_one_pass(write, path, meta, source, progress)
    expected, source = _plan(path, meta, records)
    return _encode(write, path, meta, expected, source, progress)


def _plan(
    path: str | None, meta: SnapshotMeta, records: RecordSource
) -> tuple[RecordDigest, Iterable[SnapshotRecord]]:
    """The digest the header will carry, and the records to write."""
    if meta.counts is not None and meta.hashes is not None:
        source = records() if callable(records) else records
        return RecordDigest.from_summary(meta.counts, meta.hashes), source
    if callable(records):
        first, second = records(), records()
    elif isinstance(records, Iterator):
        raise TypeError(
            "write_snapshot: without counts and hashes in the meta the records are read "
            "twice; pass a collection or a callable returning an iterable, not an iterator"
        )
    else:
        first = second = records
    digest = RecordDigest()
    add = digest.add
    for type_, key, value in first:
        add(type_, key, value)
    return digest, second


def _encode(
    write: Callable[[bytes], object],
    path: str | None,
    meta: SnapshotMeta,
    expected: RecordDigest,
    records: Iterable[SnapshotRecord],
    progress: Callable[[int], None] | None,
) -> tuple[int, SnapshotHeader]:
    """Write the whole stream through `write`; returns (bytes written, header)."""
    actual = RecordDigest()
    chunks = _record_chunks(meta.last_offset, records, actual)
    return _assemble(write, path, meta, expected, chunks, actual, progress)


def _encode_one_pass(
    write: Callable[[bytes], object],
    path: str | None,
    meta: SnapshotMeta,
    records: Iterable[SnapshotRecord],
    progress: Callable[[int], None] | None,
) -> tuple[int, SnapshotHeader]:
    """:func:`_encode` reading the records once: their frames are held in memory (about
    the size of the file) until the header, which carries their hashes, is written."""
    digest = RecordDigest()
    chunks = list(_record_chunks(meta.last_offset, records, digest))
    return _assemble(write, path, meta, digest, iter(chunks), digest, progress)


def _new_type(type_: str) -> list[Any]:
    """A type's state for :func:`frame_records`: its Effect field 1, its hasher, 0, 0."""
    return [Effect(type=type_).SerializeToString(), type_hasher(type_), 0, 0]


def _slow_frame(offset: int, sub: int, state: list[Any], type_: str, key: Any, value: Any) -> bytes:
    """The frame of a record :func:`frame_records` does not frame itself: an empty key or
    value, a long one, or an offset, sub-index or body out of range (``encode_record``
    raises)."""
    nk = len(key)
    nv = len(value)
    if nk < SMALL and nv < SMALL:
        payload = b"".join(
            (
                state[0],
                b"\x12" + VARINTS[nk] + key if nk else b"",
                b"\x1a" + VARINTS[nv] + value if nv else b"",
            )
        )
    else:
        payload = Effect(type=type_, key=key, value=value).SerializeToString()
    return encode_record(offset, sub, payload)


def _record_chunks(
    offset: int, records: Iterable[SnapshotRecord], digest: RecordDigest, first_sub: int = 1
) -> Iterator[tuple[bytes, int]]:
    """The frames of `records` (sub-index `first_sub`, `first_sub` + 1, ...) joined into
    chunks of about 1 MiB, each with the sub-index of its last record; adds every record to
    `digest` (:mod:`snapshots._framewire` frames and hashes them)."""
    chunk: list[bytes] = []
    sub = first_sub - 1
    types: dict[str, list[Any]] = {}
    source = iter(records)
    try:
        while True:
            sub, full = frame_records(
                source, offset, sub, types, _new_type, _slow_frame, chunk, CHUNK_BYTES
            )
            if not full:
                break
            yield b"".join(chunk), sub
            chunk.clear()
    finally:
        digest.merge(
            RecordDigest.from_sums(
                {t: st[3] for t, st in types.items()}, {t: st[2] for t, st in types.items()}
            )
        )
    yield b"".join(chunk), sub


def _assemble(
    write: Callable[[bytes], object],
    path: str | None,
    meta: SnapshotMeta,
    expected: RecordDigest,
    chunks: Iterator[tuple[bytes, int]],
    actual: RecordDigest,
    progress: Callable[[int], None] | None,
) -> tuple[int, SnapshotHeader]:
    """Stream header, header frame (counts and hashes of `expected`), the record chunks,
    footer; raises SnapshotMismatchError if the records (`actual`, complete once `chunks`
    is exhausted) are not what `expected` says."""
    offset = meta.last_offset
    counts = expected.counts
    hashes = expected.hashes
    total = sum(counts.values())
    if total > MAX_RECORDS:
        raise ValueError(f"a snapshot holds at most {MAX_RECORDS} records, not {total}")
    header = SnapshotHeader(
        format_version=SNAPSHOT_FORMAT_VERSION,
        cluster_id=meta.cluster_id,
        last_offset=offset,
        last_term=meta.last_term,
        raft_index=meta.raft_index,
        created_ms=int(time.time() * 1000) if meta.created_ms is None else meta.created_ms,
        hash_algorithm=HASH_ALGORITHM,
        record_count=total,
        types=[TypeDigest(type=t, count=c, hash=hashes[t]) for t, c in counts.items()],
        engine_meta=meta.engine_meta,
    )
    data = encode_header(StreamKind.SNAPSHOT, offset) + encode_record(
        offset, 0, header.SerializeToString()
    )
    crc = 0
    size = 0
    sub = 0
    for chunk, sub in chunks:
        if len(chunk) >= _SYNC_EVERY_BYTES:  # a large one (another process's frames): no copy
            view = memoryview(chunk)
            step = _SYNC_EVERY_BYTES
            parts: list[bytes | memoryview] = [data]
            parts += (view[i : i + step] for i in range(0, len(view), step))
            for part in parts:
                crc = crc32c(part, crc)
                write(cast(bytes, part))  # (a view: write takes any buffer)
                size += len(part)
            data = b""
        else:
            data += chunk
            if len(data) < CHUNK_BYTES:
                continue  # the last (small) chunk goes out with the footer
            crc = crc32c(data, crc)
            write(data)
            size += len(data)
            data = b""
        if progress is not None:
            progress(sub)
    if actual != expected:
        raise SnapshotMismatchError(path, expected, actual)
    crc = crc32c(data, crc)
    footer = encode_record(
        offset, sub + 1, SnapshotFooter(record_count=sub, checksum_crc32c=crc).SerializeToString()
    )
    write(data + footer)
    size += len(data) + len(footer)
    if progress is not None:
        progress(sub)
    return size, header


class _SyncingWriter:
    """Writes to a file and syncs it every _SYNC_EVERY_BYTES.

    Why: on ext4 (data=ordered) an fsync commits the journal, and a commit must first
    flush the data of every file in it. One fsync of a whole 170 MB snapshot at the end
    held the journal for hundreds of ms, and the node's change-log fdatasyncs (the commit
    path) waited behind it. Synced in steps, a step holds it for milliseconds.

    ``background_writeback`` (Linux; elsewhere as without it): each step's pages are only
    sent to the disk (``sync_file_range(SYNC_FILE_RANGE_WRITE)``: no journal commit, no
    wait), and the caller's fsync at the end finds little left to write. For a writer whose
    own time counts and that no node's commit path waits behind, such as seeding a new data
    dir: 16 steps of 8 MiB each waited for the disk (tens of ms to half a second at 130 MB on
    a busy 2-CPU VM).
    """

    def __init__(self, file: BinaryIO, background_writeback: bool = False) -> None:
        self._file = file
        self._unsynced = 0
        self._synced = 0  # bytes before the unsynced ones
        self._start_writeback = _writeback_starter() if background_writeback else None

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._unsynced += len(data)
        if self._unsynced >= _SYNC_EVERY_BYTES:
            self._file.flush()
            start = self._start_writeback
            if start is None or not start(self._file.fileno(), self._synced, self._unsynced):
                os.fdatasync(self._file.fileno())
            self._synced += self._unsynced
            self._unsynced = 0


def _writeback_starter() -> Callable[[int, int, int], bool] | None:
    """``start(fd, offset, nbytes)``: Linux's ``sync_file_range`` with
    ``SYNC_FILE_RANGE_WRITE`` (the range's dirty pages sent to the disk, not waited for),
    True if it did; None where there is none (not Linux, no C library to call)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    call.restype = ctypes.c_int
    write = 2  # SYNC_FILE_RANGE_WRITE

    def start(fd: int, offset: int, nbytes: int) -> bool:
        return bool(call(fd, offset, nbytes, write) == 0)

    return start


def fsync_dir(directory: Path) -> None:
    """Make a rename or create in ``directory`` durable (fsync of the directory itself;
    shared with raftlog's change-log segments and WAL)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs_durable(directory: str | os.PathLike[str]) -> None:
    """``mkdir -p`` whose new entries survive a power cut: each directory it makes is
    fsynced into its parent, top down (an fsync of a file in a directory that a crash can
    lose keeps nothing). Raises what :meth:`Path.mkdir` raises; exists already: no-op."""
    path = Path(directory)
    missing: list[Path] = []
    while not os.path.lexists(path) and path.parent != path:
        missing.append(path)
        path = path.parent
    if not missing and not path.is_dir():
        raise FileExistsError(errno.EEXIST, "exists and is not a directory", str(path))
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            if not d.is_dir():
                raise
        fsync_dir(d.parent)


def etcd_trailer(content_size: int, sha256: Any) -> bytes:
    """The bytes etcd's snapshot stream appends after ``content_size`` bytes whose running
    SHA-256 is ``sha256``: zero padding to a 512-byte boundary, then the digest (etcdctl
    refuses a stream whose size is not 32 more than a multiple of 512)."""
    padding = b"\x00" * (-content_size % 512)
    sha256.update(padding)
    return padding + bytes(sha256.digest())
