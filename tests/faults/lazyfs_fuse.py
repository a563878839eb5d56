""":class:`tests.faults.lazyfs.LazyTree` behind FUSE (fusepy, Debian's libfuse2).

One thread serves every request, so the tree needs no lock. Each open file is a
read-write descriptor on the backing file (the undo log reads the synced bytes through
it), whatever the caller asked for: the kernel checks permissions before it asks here.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from fuse import FUSE, FuseOSError, Operations  # type: ignore[import-untyped]

from tests.faults.lazyfs import FileNode, LazyTree

#: print each namespace call (LAZYFS_TRACE=1), to see what a program syncs
TRACE = os.environ.get("LAZYFS_TRACE") == "1"


def _stat(st: os.stat_result) -> dict[str, Any]:
    keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size")
    out: dict[str, Any] = {k: getattr(st, k) for k in keys}
    out.update(st_atime=st.st_atime, st_mtime=st.st_mtime, st_ctime=st.st_ctime)
    return out


class LazyOps(Operations):  # type: ignore[misc]
    def __init__(self, tree: LazyTree) -> None:
        self.tree = tree
        self.handles: dict[int, FileNode] = {}

    def __call__(self, op: str, *args: Any) -> Any:
        if TRACE and op not in ("getattr", "read", "write", "access", "statfs"):
            print("lazyfs op:", op, *args[:2], flush=True)
        try:
            return super().__call__(op, *args)
        except FuseOSError:
            raise
        except OSError as exc:
            raise FuseOSError(exc.errno or errno.EIO) from exc

    # ------------------------------------------------------------------ metadata
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        return _stat(os.lstat(self.tree.real(path)))

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *self.tree.dir(path).entries]

    def access(self, path: str, amode: int) -> int:
        os.lstat(self.tree.real(path))
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self.tree.backing)
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files")
        out = {k: getattr(st, k) for k in keys}
        out.update(f_flag=st.f_flag, f_frsize=st.f_frsize, f_namemax=st.f_namemax)
        return out

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self.tree.real(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self.tree.real(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[float, float] | None = None) -> int:
        os.utime(self.tree.real(path), times)
        return 0

    # ------------------------------------------------------------------ names
    def mkdir(self, path: str, mode: int) -> int:
        self.tree.mkdir(path, mode)
        return 0

    def rmdir(self, path: str) -> int:
        self.tree.rmdir(path)
        return 0

    def unlink(self, path: str) -> int:
        self.tree.unlink(path)
        return 0

    def rename(self, old: str, new: str) -> int:
        self.tree.rename(old, new)
        return 0

    def link(self, target: str, source: str) -> int:
        raise FuseOSError(errno.EPERM)

    def symlink(self, target: str, source: str) -> int:
        raise FuseOSError(errno.EPERM)

    def mknod(self, path: str, mode: int, dev: int) -> int:
        raise FuseOSError(errno.EPERM)

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        self.tree.fsyncdir(path)
        return 0

    # ------------------------------------------------------------------ data
    def create(self, path: str, mode: int, fi: Any = None) -> int:
        fd, node = self.tree.create(path, mode)
        self.handles[fd] = node
        return fd

    def open(self, path: str, flags: int) -> int:
        fd, node = self.tree.open(path)
        self.handles[fd] = node
        if flags & os.O_TRUNC:
            self.tree.truncate(node, fd, 0)
        return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        return self.tree.write(self.handles[fh], fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if fh is not None and fh in self.handles:
            self.tree.truncate(self.handles[fh], fh, length)
            return 0
        fd, node = self.tree.open(path)
        try:
            self.tree.truncate(node, fd, length)
        finally:
            os.close(fd)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self.tree.fsync(self.handles[fh], fh)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        self.handles.pop(fh, None)
        os.close(fh)
        return 0


def mount(tree: LazyTree, mountpoint: Path) -> None:
    """Serve ``tree`` at ``mountpoint`` until it is unmounted."""
    FUSE(LazyOps(tree), str(mountpoint), foreground=True, nothreads=True, fsname="lazyfs")
