"""A filesystem for tests that loses every write not yet synced when the power is "cut".

The idea is Jepsen's LazyFS: a write is durable only after ``fsync``/``fdatasync`` of its
file, and a directory entry (create, unlink, rename, mkdir, rmdir) only after ``fsync`` of
its directory. :class:`LazyTree` keeps that model over a backing directory with no FUSE in
it (unit tests drive it directly); :class:`LazyOps` puts it behind FUSE (fusepy over
libfuse 2), and ``python -m tests.faults.lazyfs BACKING MOUNTPOINT`` serves it in the
foreground. Unmounting the mount point is the power cut: when the kernel lets go, the
process puts the backing directory back to what was synced and exits; a new process over
the same backing directory is the restart (:mod:`tests.faults.lazymount` drives both).

How: writes go through to the backing files at once (reads are plain reads), and each
file's node remembers its synced length and the synced bytes of every block an unsynced
write or truncation touched (an undo log, cleared by the file's fsync). Each directory
node keeps its current entries and the entries its last fsync saw. A file that leaves the
current tree (unlink, renamed over) moves to a side directory, ``STATE`` (``BACKING``'s
sibling ``.lazyfs`` by default), because a synced entry may still name it. At the cut every
file's undo log is applied and it is cut to its synced length, then the backing directory
is rebuilt from the synced entries, walking from the root.

Not modelled: hard links, symbolic links and special files (refused), file modes and
times across a cut (a restored directory gets 0o755).
"""

from __future__ import annotations

import argparse
import errno
import itertools
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 4096


@dataclass(eq=False)
class FileNode:
    id: int
    synced_size: int
    undo: dict[int, bytes] = field(default_factory=dict)  # block -> its synced bytes
    grave: str | None = None  # where it is when no current entry names it


@dataclass(eq=False)
class DirNode:
    entries: dict[str, FileNode | DirNode] = field(default_factory=dict)
    synced: dict[str, FileNode | DirNode] = field(default_factory=dict)


class LazyTree:
    """The model. Paths are relative to the backing root, '/'-separated ('' is the root).

    Every method raises OSError with the errno a filesystem would give; the backing
    directory then is as it was before the call."""

    def __init__(self, backing: Path, state: Path) -> None:
        self.backing = backing
        self.state = state
        self._ids = itertools.count(1)
        self.buried: dict[int, FileNode] = {}
        #: what each cut dropped, a line a file (the FUSE process prints it)
        self.report: list[str] = []
        state.mkdir(parents=True, exist_ok=True)
        for leftover in state.iterdir():
            _remove(leftover)
        self.root = self._scan(backing)

    def _scan(self, directory: Path) -> DirNode:
        """What is there at start is all synced."""
        node = DirNode()
        with os.scandir(directory) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    node.entries[e.name] = self._scan(Path(e.path))
                elif e.is_file(follow_symlinks=False):
                    size = e.stat(follow_symlinks=False).st_size
                    node.entries[e.name] = FileNode(next(self._ids), size)
        node.synced = dict(node.entries)
        return node

    # ------------------------------------------------------------------ lookups
    def real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _split(self, path: str) -> tuple[DirNode, str]:
        parts = [p for p in path.split("/") if p]
        if not parts:
            raise OSError(errno.EBUSY, "the root has no parent", path)
        parent = self.dir(parts[:-1])
        return parent, parts[-1]

    def dir(self, path: str | list[str]) -> DirNode:
        parts = [p for p in path.split("/") if p] if isinstance(path, str) else path
        node: FileNode | DirNode = self.root
        for p in parts:
            if not isinstance(node, DirNode) or p not in node.entries:
                raise OSError(errno.ENOENT, "no such directory", "/".join(parts))
            node = node.entries[p]
        if not isinstance(node, DirNode):
            raise OSError(errno.ENOTDIR, "not a directory", "/".join(parts))
        return node

    def file(self, path: str) -> FileNode:
        parent, name = self._split(path)
        node = parent.entries.get(name)
        if node is None:
            raise OSError(errno.ENOENT, "no such file", path)
        if not isinstance(node, FileNode):
            raise OSError(errno.EISDIR, "is a directory", path)
        return node

    # ------------------------------------------------------------------ data
    def create(self, path: str, mode: int) -> tuple[int, FileNode]:
        """Create (or open, if it exists) a file; returns a read-write descriptor."""
        parent, name = self._split(path)
        existing = parent.entries.get(name)
        if isinstance(existing, DirNode):
            raise OSError(errno.EISDIR, "is a directory", path)
        fd = os.open(self.real(path), os.O_RDWR | os.O_CREAT, mode)
        if existing is None:
            existing = parent.entries[name] = FileNode(next(self._ids), 0)
        return fd, existing

    def open(self, path: str) -> tuple[int, FileNode]:
        node = self.file(path)
        return os.open(self.real(path), os.O_RDWR), node

    def _save(self, node: FileNode, fd: int, start: int, end: int) -> None:
        """Keep the synced bytes of the blocks [start, end) touches, once each."""
        end = min(end, node.synced_size)
        if start >= end:
            return
        for block in range(start // BLOCK, (end - 1) // BLOCK + 1):
            if block not in node.undo:
                node.undo[block] = os.pread(fd, BLOCK, block * BLOCK)

    def write(self, node: FileNode, fd: int, data: bytes, offset: int) -> int:
        self._save(node, fd, offset, offset + len(data))
        return os.pwrite(fd, data, offset)

    def truncate(self, node: FileNode, fd: int, length: int) -> None:
        self._save(node, fd, length, node.synced_size)
        os.ftruncate(fd, length)

    def fsync(self, node: FileNode, fd: int) -> None:
        node.undo.clear()
        node.synced_size = os.fstat(fd).st_size

    # ------------------------------------------------------------------ names
    def _bury(self, node: FileNode | DirNode, real: str) -> None:
        """``real`` leaves the current tree: a file moves aside, since a synced entry may
        still name it; a directory is empty (rmdir, or rename over an empty one)."""
        if isinstance(node, FileNode):
            node.grave = os.path.join(self.state, str(node.id))
            os.rename(real, node.grave)
            self.buried[node.id] = node
        else:
            os.rmdir(real)

    def unlink(self, path: str) -> None:
        parent, name = self._split(path)
        node = parent.entries.get(name)
        if node is None:
            raise OSError(errno.ENOENT, "no such file", path)
        if isinstance(node, DirNode):
            raise OSError(errno.EISDIR, "is a directory", path)
        self._bury(node, self.real(path))
        del parent.entries[name]

    def mkdir(self, path: str, mode: int) -> None:
        parent, name = self._split(path)
        if name in parent.entries:
            raise OSError(errno.EEXIST, "exists", path)
        os.mkdir(self.real(path), mode)
        parent.entries[name] = DirNode()

    def rmdir(self, path: str) -> None:
        parent, name = self._split(path)
        node = self.dir(path)
        if node.entries:
            raise OSError(errno.ENOTEMPTY, "not empty", path)
        os.rmdir(self.real(path))
        del parent.entries[name]

    def rename(self, old: str, new: str) -> None:
        old_parent, old_name = self._split(old)
        new_parent, new_name = self._split(new)
        node = old_parent.entries.get(old_name)
        if node is None:
            raise OSError(errno.ENOENT, "no such entry", old)
        target = new_parent.entries.get(new_name)
        if target is node:
            return
        if target is not None:
            if isinstance(node, DirNode) != isinstance(target, DirNode):
                raise OSError(errno.EISDIR if isinstance(target, DirNode) else errno.ENOTDIR, new)
            if isinstance(target, DirNode) and target.entries:
                raise OSError(errno.ENOTEMPTY, "not empty", new)
            if isinstance(node, DirNode) and _inside(node, target):
                raise OSError(errno.EINVAL, "into itself", new)
            self._bury(target, self.real(new))
            del new_parent.entries[new_name]
        elif isinstance(node, DirNode) and self._is_ancestor(node, new_parent):
            raise OSError(errno.EINVAL, "a directory into itself", new)
        os.rename(self.real(old), self.real(new))
        del old_parent.entries[old_name]
        new_parent.entries[new_name] = node

    def _is_ancestor(self, node: DirNode, of: DirNode) -> bool:
        return node is of or _inside(node, of)

    def fsyncdir(self, path: str) -> None:
        node = self.dir(path)
        node.synced = dict(node.entries)

    # ------------------------------------------------------------------ the cut
    def cut(self) -> None:
        """Put the backing directory back to what was synced (nothing may have it open)."""
        files = self._files(self.root, str(self.backing), synced=False)
        files += [(node, node.grave) for node in self.buried.values() if node.grave]
        synced = {n.id for n, _ in self._files(self.root, str(self.backing), synced=True)}
        parked: dict[int, str] = {}
        for node, real in files:
            if node.id not in synced:
                name = "a removed file" if node.grave else os.path.relpath(real, self.backing)
                self.report.append(f"dropped {name} (its entry was never synced)")
            else:
                size = os.path.getsize(real)
                if size != node.synced_size or node.undo:
                    self.report.append(
                        f"rolled back {os.path.relpath(real, self.backing)}: {size} -> "
                        f"{node.synced_size} bytes, {len(node.undo)} blocks restored"
                    )
            _roll_back(node, real)
            dest = os.path.join(self.state, str(node.id))
            if real != dest:
                os.rename(real, dest)
            parked[node.id] = dest
        for entry in os.listdir(self.backing):
            _remove(Path(self.backing, entry))  # only directories are left
        self._rebuild(self.root, str(self.backing), parked, {})
        for leftover in self.state.iterdir():
            _remove(leftover)
        self.buried.clear()
        self.root = self._scan(self.backing)

    def _files(self, node: DirNode, real: str, synced: bool) -> list[tuple[FileNode, str]]:
        """Every file below ``node`` by its current entries (or its synced ones)."""
        out: list[tuple[FileNode, str]] = []
        for name, child in (node.synced if synced else node.entries).items():
            path = os.path.join(real, name)
            if isinstance(child, FileNode):
                out.append((child, path))
            else:
                out.extend(self._files(child, path, synced))
        return out

    def _rebuild(
        self, node: DirNode, real: str, parked: dict[int, str], placed: dict[int, str]
    ) -> None:
        for name, child in node.synced.items():
            path = os.path.join(real, name)
            if isinstance(child, DirNode):
                os.mkdir(path, 0o755)
                self._rebuild(child, path, parked, placed)
            elif child.id in placed:  # synced under two names (a rename half synced)
                shutil.copyfile(placed[child.id], path)
            else:
                os.rename(parked[child.id], path)
                placed[child.id] = path


def _inside(node: DirNode, other: DirNode) -> bool:
    """Whether ``other`` is somewhere below ``node`` (current entries)."""
    for child in node.entries.values():
        if child is other or (isinstance(child, DirNode) and _inside(child, other)):
            return True
    return False


def _roll_back(node: FileNode, real: str) -> None:
    fd = os.open(real, os.O_RDWR)
    try:
        for block, data in node.undo.items():
            os.pwrite(fd, data, block * BLOCK)
        os.ftruncate(fd, node.synced_size)
    finally:
        os.close(fd)
    node.undo.clear()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def serve(backing: Path, mountpoint: Path, state: Path) -> int:
    """Serve until unmounted, then cut the power and return."""
    from tests.faults.lazyfs_fuse import mount

    tree = LazyTree(backing, state)
    mount(tree, mountpoint)
    tree.cut()
    print(f"lazyfs: power cut of {backing}", flush=True)
    for line in tree.report:
        print("lazyfs:", line, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.lazyfs", description=__doc__)
    parser.add_argument("backing", type=Path)
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("--state", type=Path, default=None)
    args = parser.parse_args(argv)
    backing = args.backing.resolve()
    state = args.state or backing.with_name(backing.name + ".lazyfs")
    return serve(backing, args.mountpoint.resolve(), state)


if __name__ == "__main__":
    sys.exit(main())
