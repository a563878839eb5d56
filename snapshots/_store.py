"""Snapshot stores: where a node keeps its snapshots (an interface, and an in-memory
implementation beside it, as hashicorp/raft's ``snapshot.go``).

:class:`SnapshotStore` is the interface; :class:`FileSnapshotStore` keeps one file per
snapshot in a directory, :class:`InMemorySnapshotStore` keeps the same bytes in a dict for
unit tests. Both identify a snapshot by a path named ``<last_offset:020d>.snap`` (the
in-memory store's paths are bare names that never touch the disk) and keep the newest
`keep` snapshots.

Errors: :class:`~snapshots.SnapshotCorruptError` from ``open`` and the readers it returns;
``save`` has :func:`~snapshots.write_snapshot`'s contract; ValueError for a bad `keep`;
OSError from the file system. ``list`` and ``latest`` never raise for a damaged snapshot:
they log a WARNING and pass over it.
"""

from __future__ import annotations

import builtins
import dataclasses
import io
import logging
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from snapshots._format import (
    RecordSource,
    SnapshotCorruptError,
    SnapshotInfo,
    SnapshotMeta,
    snapshot_name,
)
from snapshots._reader import SnapshotReader, open_snapshot
from snapshots._writer import encode_snapshot, makedirs_durable, write_snapshot

__all__ = ["FileSnapshotStore", "InMemorySnapshotStore", "SnapshotStore", "snapshot_name"]

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{20})\.snap$")
_TEMP = re.compile(r"^\.\d{20}\.snap\..*\.tmp$")

Progress = Callable[[int], None] | None


class SnapshotStore(Protocol):
    """Keeps snapshots, newest by last offset first."""

    def save(
        self,
        meta: SnapshotMeta,
        records: RecordSource,
        progress: Progress = None,
        *,
        one_pass: bool = False,
    ) -> SnapshotInfo:
        """Write a snapshot atomically (see write_snapshot for `records`, `progress` and
        `one_pass`), then keep only the newest snapshots. On any error nothing new is
        visible."""
        ...

    def list(self) -> builtins.list[SnapshotInfo]:
        """Infos of the stored snapshots, newest first, from their headers only; a snapshot
        whose header is damaged is left out (WARNING)."""
        ...

    def latest(self) -> Path | None:
        """The newest snapshot that verifies completely, or None. A damaged one is passed
        over with a WARNING. Raises only OSError."""
        ...

    def open(self, path: Path) -> SnapshotReader:
        """A reader of a stored snapshot (header verified). Raises SnapshotCorruptError,
        FileNotFoundError when there is none at `path`."""
        ...

    def delete_older_than(self, offset: int) -> int:
        """Delete every snapshot whose last offset is below `offset`; how many went."""
        ...


def _check_keep(keep: int) -> int:
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
        raise ValueError(f"keep must be an int >= 1, got {keep!r}")
    return keep


def _check_name(info: SnapshotInfo, offset: int) -> None:
    if info.last_offset != offset:
        raise SnapshotCorruptError(
            None if info.path is None else str(info.path),
            f"the file name says offset {offset}, the header {info.last_offset}",
            None,
        )


class _Listing(ABC):
    """``list`` and ``latest`` of a store, over its :meth:`_newest_first` paths and
    :meth:`open`: the same for both stores."""

    @abstractmethod
    def _newest_first(self) -> builtins.list[Path]:
        """The paths of the stored snapshots, newest first."""

    @abstractmethod
    def open(self, path: Path) -> SnapshotReader: ...

    def list(self) -> builtins.list[SnapshotInfo]:
        result = []
        for path in self._newest_first():
            try:
                with self.open(path) as reader:
                    result.append(reader.info)
            except SnapshotCorruptError as e:
                log.warning("skipping snapshot: %s", e)
            except FileNotFoundError:
                pass  # deleted meanwhile
        return result

    def latest(self) -> Path | None:
        for path in self._newest_first():
            try:
                with self.open(path) as reader:
                    reader.verify()
                return path
            except SnapshotCorruptError as e:
                log.warning("falling back to an older snapshot: %s", e)
            except FileNotFoundError:
                pass  # deleted meanwhile
        return None


class FileSnapshotStore(_Listing):
    """Snapshots as files ``<dir>/<last_offset:020d>.snap``, the newest `keep` kept.

    The directory is created if missing and has one owner: on construction this store
    removes temp files (``.<name>.*.tmp``) left by a write that crashed. Files of other
    names are ignored.
    """

    def __init__(self, directory: str | os.PathLike[str], keep: int = 2) -> None:
        self.directory = Path(directory)
        self.keep = _check_keep(keep)
        makedirs_durable(self.directory)
        self.remove_temp_files()

    def remove_temp_files(self) -> None:
        """Remove the temp files of interrupted writes (a crash, a killed writer process).
        Only the store's one owner may call it: a write in progress would lose its file."""
        for entry in self.directory.iterdir():
            if _TEMP.match(entry.name):
                log.warning("removing %s, left by an interrupted snapshot write", entry)
                entry.unlink(missing_ok=True)

    def _offsets(self) -> builtins.list[int]:
        """Offsets of the snapshot files, newest first."""
        found = (_NAME.match(p.name) for p in self.directory.iterdir())
        return sorted((int(m.group(1)) for m in found if m), reverse=True)

    def path_of(self, last_offset: int) -> Path:
        return self.directory / snapshot_name(last_offset)

    def save(
        self,
        meta: SnapshotMeta,
        records: RecordSource,
        progress: Progress = None,
        *,
        one_pass: bool = False,
    ) -> SnapshotInfo:
        info = write_snapshot(
            self.path_of(meta.last_offset), meta, records, progress, one_pass=one_pass
        )
        for offset in self._offsets()[self.keep :]:
            self.path_of(offset).unlink(missing_ok=True)
        return info

    def _newest_first(self) -> builtins.list[Path]:
        return [self.path_of(offset) for offset in self._offsets()]

    def open(self, path: Path) -> SnapshotReader:
        reader = open_snapshot(path)
        match = _NAME.match(path.name)
        if match:
            try:
                _check_name(reader.info, int(match.group(1)))
            except BaseException:
                reader.close()
                raise
        return reader

    def delete_older_than(self, offset: int) -> int:
        doomed = [o for o in self._offsets() if o < offset]
        for o in doomed:
            self.path_of(o).unlink(missing_ok=True)
        return len(doomed)


class InMemorySnapshotStore(_Listing):
    """The same snapshot bytes in a dict, for unit tests; paths are bare file names.

    :meth:`raw` and :meth:`put_raw` read and replace a snapshot's bytes (to damage one).
    """

    def __init__(self, keep: int = 2) -> None:
        self.keep = _check_keep(keep)
        self._files: dict[int, bytes] = {}

    def save(
        self,
        meta: SnapshotMeta,
        records: RecordSource,
        progress: Progress = None,
        *,
        one_pass: bool = False,
    ) -> SnapshotInfo:
        meta.validate()
        data, info = encode_snapshot(meta, records, progress, one_pass=one_pass)
        self._files[meta.last_offset] = data
        for offset in sorted(self._files, reverse=True)[self.keep :]:
            del self._files[offset]
        return _with_path(info, Path(snapshot_name(meta.last_offset)))

    def _newest_first(self) -> builtins.list[Path]:
        return [Path(snapshot_name(offset)) for offset in sorted(self._files, reverse=True)]

    def open(self, path: Path) -> SnapshotReader:
        offset = self._offset_of(path)
        reader = SnapshotReader(io.BytesIO(self._files[offset]), path=path, owns_source=True)
        try:
            _check_name(reader.info, offset)
        except BaseException:
            reader.close()
            raise
        return reader

    def delete_older_than(self, offset: int) -> int:
        doomed = [o for o in self._files if o < offset]
        for o in doomed:
            del self._files[o]
        return len(doomed)

    def raw(self, path: Path) -> bytes:
        return self._files[self._offset_of(path)]

    def put_raw(self, path: Path, data: bytes) -> None:
        self._files[self._offset_of(path)] = data

    def _offset_of(self, path: Path) -> int:
        match = _NAME.match(path.name)
        if not match or int(match.group(1)) not in self._files:
            raise FileNotFoundError(f"no snapshot {path} in memory")
        return int(match.group(1))


def _with_path(info: SnapshotInfo, path: Path) -> SnapshotInfo:
    return dataclasses.replace(info, path=path)
