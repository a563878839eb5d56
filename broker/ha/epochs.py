"""The epoch file: which master epoch wrote which stretch of the commit log.

``<root>/epochFileCheckpoint`` (RocketMQ 5 ``store/ha/autoswitch/EpochFileCache.java`` over
``common/utils/CheckpointFile.java``)::

    2              entry count
    773307083      masked CRC32 (``crc32 & 0x7FFFFFFF``) of the entry lines, "\\n" included;
                   0 = unchecked
    1-0            epoch-startOffset, one line per entry, epochs and starts strictly rising
    2-7000

A write goes to ``.tmp``, the previous content is copied to ``.bak``, then the ``.tmp`` is
renamed over the file (``MixAll.string2File``); a read falls back to the ``.bak`` when the
file is missing, empty or fails its count or CRC. Entry i covers the log from its start to
entry i+1's start; the last entry is open and ends at the store's max offset.

The consistent point of a slave's and a master's lists (``EpochFileCache.findConsistentPoint``):
from the slave's newest epoch down, the first epoch the master has with the same start
offset; the point is the lower of the two sides' ends of that epoch. No such epoch: none.
"""

from __future__ import annotations

import itertools
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from broker.ha.errors import EpochFileError

FILE_NAME = "epochFileCheckpoint"


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int


def _end(entries: Sequence[EpochEntry], i: int, max_offset: int) -> int:
    return entries[i + 1].start_offset if i + 1 < len(entries) else max_offset


def consistent_point(
    local: Sequence[EpochEntry],
    local_max: int,
    master: Sequence[EpochEntry],
    master_max: int,
) -> int | None:
    """Where a slave's log stops agreeing with the master's (None: no common epoch)."""
    by_epoch = {e.epoch: i for i, e in enumerate(master)}
    for i in range(len(local) - 1, -1, -1):
        j = by_epoch.get(local[i].epoch)
        if j is not None and master[j].start_offset == local[i].start_offset:
            return min(_end(local, i, local_max), _end(master, j, master_max))
    return None


def entry_for(entries: Sequence[EpochEntry], offset: int) -> tuple[EpochEntry, int | None] | None:
    """The entry whose stretch holds ``offset`` and where that stretch ends (None: open)."""
    for i in range(len(entries) - 1, -1, -1):
        if entries[i].start_offset <= offset:
            nxt = entries[i + 1].start_offset if i + 1 < len(entries) else None
            return entries[i], nxt
    return None


def render(entries: Sequence[EpochEntry]) -> str:
    lines = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries)
    crc = zlib.crc32(lines.encode()) & 0x7FFFFFFF
    return f"{len(entries)}\n{crc}\n{lines}"


def parse(text: str) -> list[EpochEntry]:
    """Entries of one epoch file's text; EpochFileError says what is wrong."""
    lines = text.split("\n")
    if len(lines) < 3 or lines[-1] != "":
        raise EpochFileError("an epoch file needs a count line, a CRC line and whole lines")
    try:
        count, crc = int(lines[0]), int(lines[1])
        body = lines[2:-1]
        entries = []
        for line in body:
            epoch, sep, start = line.partition("-")
            if not sep:
                raise ValueError(f"entry {line!r} is not epoch-startOffset")
            entries.append(EpochEntry(int(epoch), int(start)))
    except ValueError as e:
        raise EpochFileError(f"epoch file line does not parse: {e}") from e
    if count != len(entries):
        raise EpochFileError(f"epoch file says {count} entries but holds {len(entries)}")
    real = zlib.crc32("".join(line + "\n" for line in body).encode()) & 0x7FFFFFFF
    if crc != 0 and crc != real:
        raise EpochFileError(f"epoch file CRC {crc} != computed {real}")
    for a, b in itertools.pairwise(entries):
        if not (b.epoch > a.epoch and b.start_offset > a.start_offset):
            raise EpochFileError(f"epoch entries out of order: {a} then {b}")
    return entries


class EpochFile:
    """The epoch list of one replica, kept in ``path`` (and ``path.bak``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._entries = self._load()

    def _read(self, path: str) -> list[EpochEntry]:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as e:
            raise EpochFileError(f"{path}: {e}") from e
        return parse(text) if text else []

    def _load(self) -> list[EpochEntry]:
        try:
            entries = self._read(self.path)
            if entries:
                return entries
        except EpochFileError as e:
            try:
                return self._read(self.path + ".bak")
            except EpochFileError as bak:
                raise EpochFileError(f"{self.path} and its .bak are unreadable: {e}; {bak}") from e
        return self._read(self.path + ".bak")

    def _save(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(render(self._entries))
            f.flush()
            os.fsync(f.fileno())
        try:
            with open(self.path, "rb") as old:
                prev = old.read()
        except FileNotFoundError:
            prev = b""
        if prev:
            with open(self.path + ".bak", "wb") as bak:
                bak.write(prev)
                bak.flush()
                os.fsync(bak.fileno())
        os.replace(tmp, self.path)
        dfd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    # -- reads ----------------------------------------------------------------
    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def last_epoch(self) -> int:
        """The newest epoch, 0 when there is none."""
        return self._entries[-1].epoch if self._entries else 0

    def entry_for(self, offset: int) -> tuple[EpochEntry, int | None] | None:
        return entry_for(self._entries, offset)

    # -- changes (each one written through) -------------------------------------
    def append(self, epoch: int, start_offset: int) -> None:
        """Add an entry; its epoch and start must both be above the last entry's."""
        if self._entries:
            last = self._entries[-1]
            if epoch <= last.epoch or start_offset <= last.start_offset:
                raise EpochFileError(
                    f"entry ({epoch}, {start_offset}) is not after the last one "
                    f"({last.epoch}, {last.start_offset})"
                )
        self._entries.append(EpochEntry(epoch, start_offset))
        self._save()

    def truncate_suffix(self, offset: int) -> None:
        """Drop the entries starting at or after ``offset`` (the log was cut there)."""
        keep = [e for e in self._entries if e.start_offset < offset]
        if len(keep) != len(self._entries):
            self._entries = keep
            self._save()

    def begin(self, epoch: int, end_offset: int) -> None:
        """Promotion: the replica's log ends at ``end_offset`` (its tail already cut to whole
        records) and it masters ``epoch`` from there. An entry of that same epoch, and entries
        starting at or after ``end_offset`` (they hold no bytes), are replaced; an epoch below
        the last one is refused (``AutoSwitchHAService.changeToMaster``).
        """
        if epoch < self.last_epoch:
            raise EpochFileError(f"epoch {epoch} is below the last epoch {self.last_epoch}")
        self._entries = [
            e for e in self._entries if e.epoch < epoch and e.start_offset < end_offset
        ]
        self.append(epoch, end_offset)
