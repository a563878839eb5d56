"""The native engine's write-ahead log: Raft entries, term and vote, on disk and fsynced.

One directory of files ``wal-<seq>.log``; each holds length-prefixed records with a CRC32C::

    u32 length | u32 crc32c(payload) | payload
    payload = b"E" u64 index, u64 term, u8 kind, data       an entry (a lower index than
                                                             the last one replaces the tail)
            | b"H" u64 term, vote (utf-8)                    the hard state
            | b"T" u64 index                                 entries from index on are gone
            | b"C" u64 index                                 a commit hint (not synced alone)

Appends go to the newest file; :meth:`RaftWal.sync` is one ``fdatasync`` for everything
written since (group commit, like etcd's WAL). After a snapshot the engine
:meth:`RaftWal.rewrite` s the log: a new file with the hard state and the entries after the
snapshot, fsynced, then the older files are deleted. On open, a torn record at the end of
the newest file (a crash mid-write) is cut off; a bad record anywhere else is a
:class:`WalCorruptError` naming the file and byte position.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from raftlog.errors import RaftLogError
from raftlog.raft import LogEntry
from raftlog.segments import _fsync_dir

log = logging.getLogger(__name__)

_REC = struct.Struct("<II")
_ENTRY = struct.Struct("<QQB")
_U64 = struct.Struct("<Q")
_NAME = re.compile(r"^wal-(\d{16})\.log$")


class WalCorruptError(RaftLogError):
    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt Raft log at byte {position}: {reason}")
        self.path = path
        self.position = position


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
        self._pending: list[bytes] = []

    def _path(self, seq: int) -> Path:
        return self._dir / f"wal-{seq:016d}.log"

    @classmethod
    def open(cls, directory: str | os.PathLike[str]) -> tuple[RaftWal, WalState]:
        """Open (creating) the log in ``directory``; its state as found on disk."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        seqs = sorted(int(m.group(1)) for n in os.listdir(d) if (m := _NAME.match(n)))
        state = WalState()
        for i, seq in enumerate(seqs):
            _load(d / f"wal-{seq:016d}.log", state, last=i == len(seqs) - 1)
        wal = cls(d, seqs[-1] if seqs else 1)
        if not seqs:
            _fsync_dir(d)
        return wal, state

    # ------------------------------------------------------------------ writes
    def append(
        self,
        entries: Sequence[LogEntry],
        truncate_from: int | None = None,
        hard: tuple[int, str] | None = None,
        commit: int | None = None,
    ) -> None:
        """Buffer records; nothing is durable before :meth:`sync`."""
        pending = self._pending
        if hard is not None:
            pending.append(hard_record(*hard))
        if truncate_from is not None:
            pending.append(truncate_record(truncate_from))
        pending.extend(entry_record(e) for e in entries)
        if commit is not None:
            pending.append(commit_record(commit))

    def sync(self) -> None:
        """Write what is buffered and fdatasync it (one sync for the whole group)."""
        if self._pending:
            data = b"".join(self._pending)
            self._pending = []
            view = memoryview(data)
            while view:
                n = self._file.write(view)
                view = view[n:]
        os.fdatasync(self._file.fileno())

    def rewrite(self, term: int, vote: str, commit: int, entries: Sequence[LogEntry]) -> None:
        """Start a new file holding exactly this state (after a snapshot); drop the old ones."""
        self._pending = []
        seq = self._seq + 1
        path = self._path(seq)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(hard_record(term, vote))
            f.write(b"".join(entry_record(e) for e in entries))
            f.write(commit_record(commit))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(self._dir)
        self._file.close()
        old = self._seq
        self._seq = seq
        self._file = open(path, "ab", buffering=0)
        for n in os.listdir(self._dir):
            m = _NAME.match(n)
            if m and int(m.group(1)) <= old:
                os.unlink(self._dir / n)
        _fsync_dir(self._dir)

    def close(self) -> None:
        self._file.close()


def _load(path: Path, state: WalState, last: bool) -> None:
    data = path.read_bytes()
    pos = 0
    entries = state.entries
    while pos < len(data):
        reason = ""
        if pos + _REC.size > len(data):
            reason = "truncated record header"
        else:
            length, crc = _REC.unpack_from(data, pos)
            end = pos + _REC.size + length
            if end > len(data):
                reason = "truncated record"
            else:
                payload = data[pos + _REC.size : end]
                if crc32c.crc32c(payload) != crc:
                    reason = "checksum mismatch"
        if reason:
            if last:
                log.warning("%s: torn tail at byte %d (%s): cut off", path, pos, reason)
                with open(path, "r+b") as f:
                    f.truncate(pos)
                    os.fsync(f.fileno())
                return
            raise WalCorruptError(path, pos, reason)
        tag = payload[:1]
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
            state.vote = payload[1 + _U64.size :].decode()
        elif tag == b"T":
            index = _U64.unpack_from(payload, 1)[0]
            if entries and index <= entries[-1].index:
                del entries[max(0, index - entries[0].index) :]
        elif tag == b"C":
            state.commit = max(state.commit, _U64.unpack_from(payload, 1)[0])
        else:
            raise WalCorruptError(path, pos, f"unknown record type {tag!r}")
        pos = end
