"""The native engine's write-ahead log: Raft entries, term and vote, on disk and fsynced.

One directory with one live file ``wal-<seq>.log`` of length-prefixed records with a CRC32C::

    u32 length | u32 crc32c(payload) | payload
    payload = b"E" u64 index, u64 term, u8 kind, data       an entry (a lower index than
                                                             the last one replaces the tail)
            | b"H" u64 term, vote (utf-8)                    the hard state
            | b"T" u64 index                                 entries from index on are gone
            | b"C" u64 index                                 a commit hint (not synced alone)

Appends go to the file; :meth:`RaftWal.sync` writes them and makes one ``fdatasync`` for
everything written since (group commit, like etcd's WAL). After a snapshot the engine
:meth:`RaftWal.rewrite` s the log: a new file (the next ``seq``) with the hard state and the
entries after the snapshot, fsynced and renamed into place, then the older files are deleted.
Each file holds the whole state, so on open only the newest is read; older ones (and a
``.tmp``) are what a crash in the middle of a rewrite left, and are removed.

Writes never leave a hole. The log tracks the length of the file up to its last synced record;
when a write or ``fdatasync`` fails (ENOSPC, EIO, ...), :meth:`RaftWal.sync` cuts the file back
to that length and keeps the batch pending, so the next ``sync()`` writes the same bytes again
(after a failed ``fdatasync`` Linux may have dropped the dirty pages and cleared the error, so
the bytes are written again rather than synced again). Until the cut succeeds nothing more is
written. A failed rewrite leaves the old file active and no temporary file behind.

On open, a bad record in the newest file (a header cut short, a length of zero or past the end
of the file, a checksum mismatch) is a **torn tail** only when no valid record starts anywhere
after it: a crash in the middle of the last write, or a run of zeros to the end of the file
(space the file system extended but never filled). A torn tail is cut off: it was never
acknowledged (a checksum mismatch in the very last record could also be a synced record gone
bad; it cannot be told from a torn write, and is cut off like one, as etcd does). A bad record with a valid record after it is **corruption**: a byte changed in a
record that was synced, and cutting there would drop acknowledged entries, so opening raises
:class:`WalCorruptError` naming the file and byte and how to recover. A record whose checksum
matches but whose contents do not make sense (an unknown type, an entry out of order) is
corruption wherever it is. "Valid" means: a length of at least the smallest payload of its
type, wholly inside the file, a matching checksum and a known type byte; the search for one
looks at every position whose byte could be a type byte, so it costs one pass over the tail.

A torn write whose pages reached the disk out of order (a power cut, not a process crash: a
killed process loses nothing the kernel accepted) can leave a zeroed page with a valid record
of the same unacknowledged write after it; by this rule that is reported as corruption. That is
the safe side: the member stops instead of guessing, and rejoins from the others. So is a
torn record whose entry data happens to hold a whole valid record of this format.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import crc32c

from raftlog.errors import RaftLogError
from raftlog.native.messages import LogEntry
from snapshots import fsync_dir as _fsync_dir
from snapshots import makedirs_durable

log = logging.getLogger(__name__)

_REC = struct.Struct("<II")
_ENTRY = struct.Struct("<QQB")
_U64 = struct.Struct("<Q")
_NAME = re.compile(r"^wal-(\d{16})\.log$")
_TMP = re.compile(r"^wal-(\d{16})\.tmp$")
# the smallest payload of each record type; T and C have exactly this length
_MIN_PAYLOAD = {
    b"E": 1 + _ENTRY.size,
    b"H": 1 + _U64.size,
    b"T": 1 + _U64.size,
    b"C": 1 + _U64.size,
}
_EXACT = (b"T", b"C")

# module-level so that tests can make them fail; a global lookup is also the cheapest call
_fdatasync = os.fdatasync
_ftruncate = os.ftruncate


class WalCorruptError(RaftLogError):
    """A record of the newest WAL file is bad and valid records follow it (not a torn tail)."""

    recovery: ClassVar[str] = (
        "this member cannot start from its Raft log: stop it, wipe its data directory and "
        'let it rejoin from the other members (README, "Recovering a member")'
    )

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt Raft log at byte {position}: {reason}; {self.recovery}")
        self.path = path
        self.position = position
        self.reason = reason


@dataclass
class WalState:
    term: int = 0
    vote: str = ""
    commit: int = 0
    entries: list[LogEntry] = field(default_factory=list)

    @property
    def first_index(self) -> int:
        return self.entries[0].index if self.entries else 0


def _frame(payload: bytes) -> bytes:
    return _REC.pack(len(payload), crc32c.crc32c(payload)) + payload


def entry_record(e: LogEntry) -> bytes:
    return _frame(b"E" + _ENTRY.pack(e.index, e.term, e.kind) + e.data)


def hard_record(term: int, vote: str) -> bytes:
    return _frame(b"H" + _U64.pack(term) + vote.encode())


def truncate_record(index: int) -> bytes:
    return _frame(b"T" + _U64.pack(index))


def commit_record(index: int) -> bytes:
    return _frame(b"C" + _U64.pack(index))


class RaftWal:
    def __init__(self, directory: Path, seq: int) -> None:
        self._dir = directory
        self._seq = seq
        self._file = open(self._path(seq), "ab", buffering=0)
        # the file's length up to its last synced record: where a failed batch is cut back to
        self._size = os.fstat(self._file.fileno()).st_size
        self._pending: list[bytes] = []
        self._tail_dirty = False  # a failed batch is in the file past _size, not cut off yet
        self._dir_dirty = False  # a rewrite's rename is not known to be durable yet

    def _path(self, seq: int) -> Path:
        return self._dir / f"wal-{seq:016d}.log"

    @classmethod
    def open(cls, directory: str | os.PathLike[str]) -> tuple[RaftWal, WalState]:
        """Open (creating) the log in ``directory``; its state as found on disk.

        Raises :class:`WalCorruptError` for a bad record that is not a torn tail (see the
        module docstring); a torn tail is cut off and logged.
        """
        d = Path(directory)
        makedirs_durable(d)
        names = os.listdir(d)
        seqs = sorted(int(m.group(1)) for n in names if (m := _NAME.match(n)))
        state = WalState()
        if seqs:
            _load(d / f"wal-{seqs[-1]:016d}.log", state)
        stale = [d / n for n in names if _TMP.match(n)]
        stale += [d / f"wal-{seq:016d}.log" for seq in seqs[:-1]]
        for path in stale:
            if _unlink_quietly(path):
                log.info("%s: left by an interrupted rewrite of the Raft log; removed", path)
        wal = cls(d, seqs[-1] if seqs else 1)
        if stale or not seqs:
            _fsync_dir(d)
        return wal, state

    # ------------------------------------------------------------------ writes
    @property
    def needs_repair(self) -> bool:
        """True while a failed :meth:`sync` or :meth:`rewrite` left work the next sync() retries.

        That is: a failed batch still in the file past the last synced record (the cut back
        failed too), or a rewritten file whose directory entry is not yet synced. Nothing new
        is written before that work succeeds.
        """
        return self._tail_dirty or self._dir_dirty

    def append(
        self,
        entries: Sequence[LogEntry],
        truncate_from: int | None = None,
        hard: tuple[int, str] | None = None,
        commit: int | None = None,
    ) -> None:
        """Buffer records (after any still pending from a failed sync); nothing is durable
        before :meth:`sync` returns."""
        pending = self._pending
        if hard is not None:
            pending.append(hard_record(*hard))
        if truncate_from is not None:
            pending.append(truncate_record(truncate_from))
        pending.extend(entry_record(e) for e in entries)
        if commit is not None:
            pending.append(commit_record(commit))

    def drop_pending(self) -> None:
        """Forget the records buffered since the last successful :meth:`sync` (a failed
        batch included), for a caller that keeps them itself and appends them again; a
        failed batch's cut back is still retried by the next sync()."""
        self._pending = []

    def sync(self) -> None:
        """Write what is buffered and fdatasync it (one sync for the whole group).

        When it returns, every record appended so far is durable. Failure contract: after an
        OSError the log on disk is exactly as before the call (the file is cut back to its last
        synced record), and the batch is still pending: call sync() again, which writes the
        same bytes (and any appended since) again. If even the cut back fails, the file keeps
        the failed bytes past the last good record (a torn tail, should the process stop now),
        :attr:`needs_repair` is true, and the next sync() retries the cut first, raising
        its OSError and writing nothing while it fails.
        """
        if self._tail_dirty or self._dir_dirty:
            self._repair()
        pending = self._pending
        if not pending:
            _fdatasync(self._file.fileno())
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        try:
            view = memoryview(data)
            while view:
                view = view[self._file.write(view) :]
            _fdatasync(self._file.fileno())
        except OSError:
            self._pending = [data]
            self._tail_dirty = True
            try:
                self._repair()
            except OSError as exc:
                log.warning(
                    "%s: cannot cut a failed write back to byte %d (%s); "
                    "the next sync retries before writing",
                    self._path(self._seq),
                    self._size,
                    exc,
                )
            raise
        self._pending = []
        self._size += len(data)

    def _repair(self) -> None:
        """Cut a failed batch off the file, sync a rewrite's rename; raises OSError if not."""
        if self._tail_dirty:
            _ftruncate(self._file.fileno(), self._size)
            self._tail_dirty = False
        if self._dir_dirty:
            _fsync_dir(self._dir)
            self._dir_dirty = False

    def rewrite(self, term: int, vote: str, commit: int, entries: Sequence[LogEntry]) -> None:
        """Start a new file holding exactly this state (after a snapshot); drop the old ones.

        Failure contract: an OSError is raised only before the new file is in place, and then
        nothing changed: the old file is still the log, pending records are kept, no temporary
        file is left. Once the new file is renamed into place it is the log: a failed sync of
        the directory is retried by the next :meth:`sync` (which acknowledges nothing before it
        succeeds), and old files that could not be removed are removed on the next open.
        """
        seq = self._seq + 1
        path = self._path(seq)
        tmp = path.with_suffix(".tmp")
        data = b"".join(
            [hard_record(term, vote), *(entry_record(e) for e in entries), commit_record(commit)]
        )
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            new = open(fd, "ab", buffering=0)
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        try:
            view = memoryview(data)
            while view:
                view = view[new.write(view) :]
            os.fsync(new.fileno())
            os.replace(tmp, path)
        except BaseException:
            new.close()
            _unlink_quietly(tmp)
            raise
        # the new file is the log from here on: nothing below raises
        old_file, old_seq = self._file, self._seq
        self._file, self._seq, self._size = new, seq, len(data)
        self._pending = []
        self._tail_dirty = False
        self._dir_dirty = True
        try:
            old_file.close()
        except OSError as exc:
            log.warning("%s: closing the replaced Raft log failed: %s", self._path(old_seq), exc)
        try:
            _fsync_dir(self._dir)
        except OSError as exc:
            # the old files stay until the rename is durable: removing them first could lose both
            log.warning("%s: directory sync failed (%s); the next sync retries", self._dir, exc)
            return
        self._dir_dirty = False
        removed = False
        for n in os.listdir(self._dir):
            m = _NAME.match(n)
            if m and int(m.group(1)) <= old_seq:
                removed = _unlink_quietly(self._dir / n) or removed
        if removed:
            with contextlib.suppress(OSError):  # a leftover old file is ignored on open
                _fsync_dir(self._dir)

    def close(self) -> None:
        self._file.close()


def _unlink_quietly(path: Path) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("%s: cannot remove (%s); it is removed on the next open", path, exc)
        return False
    return True


def _bad_record(data: bytes, pos: int) -> tuple[str, int]:
    """Why the record at ``pos`` is bad ("" if it is not), and where it ends."""
    n = len(data)
    if pos + _REC.size > n:
        return "truncated record header", n
    length, crc = _REC.unpack_from(data, pos)
    end = pos + _REC.size + length
    if length == 0:
        return "zero length", end
    if end > n:
        return f"length {length} runs past the end of the file", end
    if crc32c.crc32c(data[pos + _REC.size : end]) != crc:
        return "checksum mismatch", end
    return "", end


def _valid_record_at(data: bytes, pos: int) -> bool:
    if pos + _REC.size >= len(data):
        return False
    length, _ = _REC.unpack_from(data, pos)
    tag = data[pos + _REC.size : pos + _REC.size + 1]
    least = _MIN_PAYLOAD.get(tag)
    if least is None or length < least or (tag in _EXACT and length != least):
        return False
    return not _bad_record(data, pos)[0]


def _next_valid_record(data: bytes, after: int) -> int:
    """Where the first valid record starting after byte ``after`` is; -1 if none is."""
    start = after + 1 + _REC.size  # the type byte of a record starting at after + 1
    hits = {tag: data.find(tag, start) for tag in _MIN_PAYLOAD}
    while True:
        found = [i for i in hits.values() if i >= 0]
        if not found:
            return -1
        i = min(found)
        if _valid_record_at(data, i - _REC.size):
            return i - _REC.size
        tag = data[i : i + 1]
        hits[tag] = data.find(tag, i + 1)


def _load(path: Path, state: WalState) -> None:
    data = path.read_bytes()
    pos = 0
    entries = state.entries
    while pos < len(data):
        reason, end = _bad_record(data, pos)
        if reason:
            following = _next_valid_record(data, pos)
            if following >= 0:
                raise WalCorruptError(
                    path, pos, f"{reason}, and a valid record follows at byte {following}"
                )
            log.warning("%s: torn tail at byte %d (%s): cut off", path, pos, reason)
            with open(path, "r+b") as f:
                f.truncate(pos)
                os.fsync(f.fileno())
            return
        payload = data[pos + _REC.size : end]
        tag = payload[:1]
        least = _MIN_PAYLOAD.get(tag)
        if least is None:
            raise WalCorruptError(path, pos, f"unknown record type {tag!r}")
        if len(payload) < least or (tag in _EXACT and len(payload) != least):
            raise WalCorruptError(path, pos, f"a {tag!r} record of the wrong size {len(payload)}")
        if tag == b"E":
            index, term, kind = _ENTRY.unpack_from(payload, 1)
            e = LogEntry(index, term, kind, payload[1 + _ENTRY.size :])
            if entries and index <= entries[-1].index:
                del entries[max(0, index - entries[0].index) :]
            if entries and index != entries[-1].index + 1:
                raise WalCorruptError(path, pos, f"entry {index} after {entries[-1].index}")
            entries.append(e)
        elif tag == b"H":
            state.term = _U64.unpack_from(payload, 1)[0]
            try:
                state.vote = payload[1 + _U64.size :].decode()
            except UnicodeDecodeError:
                raise WalCorruptError(path, pos, "a vote that is not UTF-8") from None
        elif tag == b"T":
            index = _U64.unpack_from(payload, 1)[0]
            if entries and index <= entries[-1].index:
                del entries[max(0, index - entries[0].index) :]
        else:
            state.commit = max(state.commit, _U64.unpack_from(payload, 1)[0])
        pos = end
