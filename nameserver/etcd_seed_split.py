"""Seeding from an etcd 3.4 snapshot in two processes: each reads a run of the ``key``
bucket's leaf pages and frames its keys' records, so that the two CPUs share the whole of
the work (:func:`seed`).

The file is read and its pages checked here first (:func:`etcdfmt.read_etcd_key_pages`:
nothing of the key bucket is decoded yet, and this process's heap is still small), then a
child is forked: it shares the file's bytes, and neither process touches the other's
objects (no page copied on write). This process (the first run of pages, in revision order)
and the child (the rest) each reduce their run to each key's newest record
(:class:`etcdfmt.LatestScan`), and this process looks at the child's run's keys too: a key
in both runs is this process's, at the place of its first record, with the child's (newer)
record (:meth:`~etcdfmt.LatestScan.newer`). This process then tells the child how many
records it frames (the child's are numbered after them) and which keys it took (the child
drops them), so the records, their order and their sub-indexes are those of the
one-process pass, and the file is the same, byte for byte. This process frames its records
in memory while the child frames the rest into an unnamed temp file, and then writes the
snapshot: its frames, the child's, the other records (leases, auth, ...).

Anything that the two runs do not take whole (a fault in a page, a record that does not
parse, a child that fails) ends the attempt before anything is written, and the caller reads
the file in one process, which names the fault as it always has.
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import tempfile
from collections.abc import Callable
from typing import NoReturn

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
from nameserver.state.forked import error_message, exit_child
from nameserver.state.seeding import seed_data_dir_from_frames
from snapshots import RecordDigest, SnapshotMeta, encode_frames, etcdfmt

#: the share of the key bucket's records the child reads and frames. This process also
#: looks at the child's run's keys and computes the file's SHA-256 (on a thread), the child
#: writes its frames to a file: at 1M keys on an idle 2-CPU machine this process waited
#: 0.12-0.15 s for the child at 0.55, 0.01-0.02 s at half
CHILD_SHARE = 0.50

Slow = Callable[[bytes, bytes], "tuple[bytes, bytes | None, int]"]
Pages = list[tuple[memoryview, int]]


class NotTaken(Exception):
    """The two runs did not take the file whole: read it in one process."""


def seed(
    data: bytes,
    data_dir: str,
    say: Callable[[str], None],
    min_records: int,
    offset_revisions: bool = False,
) -> Seeded | None:
    """Seed ``data_dir`` from the etcd snapshot ``data`` in two processes (see the module
    doc), or return None, having written nothing, where the file has fewer than
    ``min_records`` key records or the two runs do not take it whole. Errors while writing
    pass as ``seed_data_dir_from_frames`` raises them; SnapshotHashError for a trailer that
    does not match."""
    try:
        etcd, pages, check_hash = etcdfmt.read_etcd_key_pages(data, hash_when_checked=True)
    except etcdfmt.SnapshotHashError:
        raise
    except Exception:
        return None  # read in one process: it names the fault
    counts = [count for _, count in pages]
    total = sum(counts)
    if total < min_records or len(pages) < 2:
        check_hash()
        return None
    mid = _split_at(counts, total * (1 - CHILD_SHARE))
    slow = etcdfmt.key_record_slow(kv_record_encoder())
    probe = etcdfmt.LatestScan(slow)
    last_page, last_count = pages[-1]
    if not probe.after(last_page.tobytes(), last_count) or probe.last is None:
        check_hash()
        return None
    # the newest revision is the last record's (the runs check that revisions increase)
    newest = int.from_bytes(probe.last[:8], "big")
    revision = max(newest, etcd.revision)
    say(f"reading {total} key records in two processes")
    os.makedirs(data_dir, exist_ok=True)
    try:
        with _Child(pages, mid, slow, revision, data_dir, check_hash) as child:
            scan = etcdfmt.LatestScan(slow)
            for page, count in pages[:mid]:
                if not scan.leaf(page.tobytes(), count):
                    raise NotTaken(f"a key bucket page of {count} records")
            found: list[bytes] = []  # keys of both runs
            try:
                for page, count in pages[mid:]:
                    scan.newer(page.tobytes(), count, found)
            except (IndexError, ValueError) as exc:  # a fault the child's own scan names
                raise NotTaken(f"the child's run: {exc}") from None
            latest = scan.latest
            first = live_count(latest)
            child.start_at(first, found)
            digest = RecordDigest()
            head = list(encode_frames(revision, live_records(latest), digest))
            tail, tail_digest, rest, child_newest = child.result()
            if max(scan.newest, child_newest) != newest:
                raise NotTaken("the newest revision is not the last record's")
            # the file's SHA-256 matched (the child checked it before taking its run)
            digest.merge(tail_digest)
            keys = first + rest
            seeded = Seeded.of(etcd, revision, keys)
            say_counts(say, seeded)
            others = other_records(etcd, revision, None, offset_revisions)
            frames = [
                *head,
                (tail, keys),
                *encode_frames(revision, others, digest, keys + 1),
            ]
            meta = SnapshotMeta(cluster_id=SEEDED_CLUSTER_ID, last_offset=revision, last_term=0)
            progress = progress_of(say, keys + len(others))
            seed_data_dir_from_frames(data_dir, meta.with_digest(digest), frames, digest, progress)
            return seeded
    except NotTaken:
        check_hash()
        return None
    except etcdfmt.EtcdFormatError:
        check_hash()
        return None  # a record that does not parse: the one-process way names it


def _split_at(counts: list[int], records: float) -> int:
    """The index of the first page after about ``records`` records (at least 1, at most the
    last page)."""
    seen = 0
    for i, count in enumerate(counts):
        if seen >= records and i > 0:
            return i
        seen += count
    return len(counts) - 1


class _Child:
    """The forked child that reads ``pages[mid:]`` and frames their keys' records into an
    unnamed temp file in ``directory``; :meth:`start_at` tells it where its records' numbers
    start, :meth:`result` waits for it. Leaving the ``with`` kills a child still running (by
    its pid) and closes the file."""

    def __init__(
        self,
        pages: Pages,
        mid: int,
        slow: Slow,
        offset: int,
        directory: str,
        check_hash: Callable[[], None],
    ) -> None:
        self._file = tempfile.TemporaryFile(dir=directory)
        self._pid = 0
        self._done = False  # it said ok: it only ends now (close reaps it)
        self._fds: list[int] = []
        try:
            start_read, self._start_write = os.pipe()
            self._fds = [start_read, self._start_write]
            self._result_read, result_write = os.pipe()
            self._fds += [self._result_read, result_write]
            pid = os.fork()
        except BaseException:
            self.close()
            raise
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            os.close(self._start_write)
            os.close(self._result_read)
            out = self._file.fileno()
            _child(pages, mid, slow, offset, check_hash, start_read, out, result_write)
        self._pid = pid
        for fd in (start_read, result_write):
            os.close(fd)
            self._fds.remove(fd)

    def __enter__(self) -> _Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_at(self, records_before: int, keys: list[bytes]) -> None:
        """The child's records are numbered from ``records_before`` + 1, and ``keys`` are
        this process's (the child drops them)."""
        self._fds.remove(self._start_write)
        try:
            with open(self._start_write, "wb") as pipe:
                pipe.write(pickle.dumps((records_before, keys)))
        except BrokenPipeError:
            pass  # the child ended already (it did not take its run): result() says why

    def result(self) -> tuple[bytes, RecordDigest, int, int]:
        """The child's frames (a map of its file), their digest, how many records, and the
        newest revision it read; NotTaken if it failed (its error)."""
        with os.fdopen(self._result_read, "rb") as pipe:
            self._fds.remove(self._result_read)
            message = pipe.read()  # until the child closes it, as it ends
        if not message.startswith(b"ok:"):
            _, status = os.waitpid(self._pid, 0)
            self._pid = 0
            why = message.decode(errors="replace") or f"exit {os.waitstatus_to_exitcode(status)}"
            raise NotTaken(f"the child process: {why}")
        # its work is done (its file written and closed before it said ok): it frees its
        # memory while this process writes the snapshot, and close() reaps it
        self._done = True
        digest, count, newest = pickle.loads(message[3:])
        assert isinstance(digest, RecordDigest)
        size = os.fstat(self._file.fileno()).st_size
        if not size:
            return b"", digest, count, newest
        frames = mmap.mmap(self._file.fileno(), size, access=mmap.ACCESS_READ)
        return frames, digest, count, newest  # type: ignore[return-value]  # a buffer

    def close(self) -> None:
        if self._pid:
            if not self._done:
                os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
            self._pid = 0
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        self._file.close()


def _first_key_checked(slow: Slow) -> Slow:
    """``slow`` that also checks the record's first field is its key, or no key at all (the
    parent took that for its key: :meth:`etcdfmt.LatestScan.newer`); NotTaken if not."""

    def checked(raw_rev: bytes, raw: bytes) -> tuple[bytes, bytes | None, int]:
        got = slow(raw_rev, raw)
        first = etcdfmt.first_key(raw)
        if first is not None and first != got[0]:
            raise NotTaken("a key record whose first field is not its key")
        return got

    return checked


def _child(
    pages: Pages,
    mid: int,
    slow: Slow,
    offset: int,
    check_hash: Callable[[], None],
    start_fd: int,
    out_fd: int,
    result_fd: int,
) -> NoReturn:  # pragma: no cover - runs in the child
    """The child's whole life: read ``pages[mid:]``, check the file's SHA-256 (while the
    parent looks at this run's keys: no CPU of the two is taken from the reading), wait for
    the number of the parent's records and the keys it keeps, frame its own after them into
    ``out_fd``, then ``ok:`` and the pickled (digest, count, newest revision) to
    ``result_fd`` (or the error), and ``os._exit``."""
    status = 1
    try:
        scan = etcdfmt.LatestScan(_first_key_checked(slow))
        prev_page, prev_count = pages[mid - 1]
        if not scan.after(prev_page.tobytes(), prev_count):
            raise NotTaken("the page before the child's first")
        for page, count in pages[mid:]:
            if not scan.leaf(page.tobytes(), count):
                raise NotTaken(f"a key bucket page of {count} records")
        check_hash()  # SnapshotHashError: the parent checks it again, and raises it
        with open(start_fd, "rb") as start:
            text = start.read()
        if not text:
            raise NotTaken("the parent stopped")
        before, keys = pickle.loads(text)
        latest = scan.latest
        for key in keys:
            latest.pop(key, None)
        digest = RecordDigest()
        with open(out_fd, "wb", closefd=False) as out:
            for chunk, _ in encode_frames(offset, live_records(latest), digest, before + 1):
                out.write(chunk)
        message = b"ok:" + pickle.dumps((digest, live_count(latest), scan.newest))
        status = 0
    except BaseException as exc:
        message = error_message(exc)
    exit_child(result_fd, message, status)
