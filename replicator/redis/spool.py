"""A FIFO of bytes between the socket reader and everything slower: memory first, then disk.

The master cuts a replica whose output buffer passes ``client-output-buffer-limit replica``
(256 MB hard, 64 MB for 60 s by default), and ``repl-timeout`` after silence. So the reader
never waits for the sink: it puts every chunk here and goes back to the socket, and the
pipeline takes from here at the sink's pace (issue 18 item 4, "a reader that keeps draining
the socket, spooling to disk when the sink is slow").

Up to ``memory_limit`` bytes stay in memory; past it, chunks are appended to one spill file
in ``directory`` and read back in order; once the reader of the spool has drained the file,
it is truncated and memory is used again. Order is always the order of ``put``. Single event
loop, no threads: ``put`` is synchronous and never blocks on the consumer (a disk write of one
chunk), ``get`` waits for data.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections import deque
from pathlib import Path

__all__ = ["Spool"]


class Spool:
    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        memory_limit: int = 64 * 1024 * 1024,
    ) -> None:
        if memory_limit <= 0:
            raise ValueError(f"memory_limit {memory_limit} must be positive")
        self._dir = Path(directory) if directory is not None else None
        self.memory_limit = memory_limit
        self._mem: deque[bytes] = deque()
        self._mem_bytes = 0
        self._fd = -1
        self._write_pos = 0
        self._read_pos = 0
        self._closed = False
        self._ready = asyncio.Event()
        #: totals, for metrics
        self.put_bytes = 0
        self.spilled_bytes = 0

    # ---- producer side
    def put(self, data: bytes) -> None:
        if self._closed:
            raise ValueError("put on a closed spool")
        if not data:
            return
        self.put_bytes += len(data)
        if self._fd < 0 and self._mem_bytes + len(data) <= self.memory_limit:
            self._mem.append(bytes(data))
            self._mem_bytes += len(data)
        else:
            self._spill(data)
        self._ready.set()

    def _spill(self, data: bytes) -> None:
        if self._fd < 0:
            fd, path = tempfile.mkstemp(prefix="redis-spool-", dir=self._dir)
            os.unlink(path)  # nothing to clean up after a crash: the space goes with the fd
            self._fd, self._write_pos, self._read_pos = fd, 0, 0
        view = memoryview(data)
        while view:
            n = os.pwrite(self._fd, view, self._write_pos)
            self._write_pos += n
            view = view[n:]
        self.spilled_bytes += len(data)

    def close(self) -> None:
        """No more data: ``get`` returns b"" once everything put was taken."""
        self._closed = True
        self._ready.set()

    # ---- consumer side
    @property
    def buffered(self) -> int:
        """Bytes put and not yet taken (memory and disk)."""
        return self._mem_bytes + (self._write_pos - self._read_pos if self._fd >= 0 else 0)

    @property
    def on_disk(self) -> int:
        return self._write_pos - self._read_pos if self._fd >= 0 else 0

    async def get(self, max_bytes: int = 1024 * 1024) -> bytes:
        """The next bytes in order (at most ``max_bytes``); b"" at the end of a closed spool."""
        while True:
            data = self.get_nowait(max_bytes)
            if data or self._closed:
                return data
            self._ready.clear()
            await self._ready.wait()

    def get_nowait(self, max_bytes: int = 1024 * 1024) -> bytes:
        if self._mem:
            chunk = self._mem[0]
            if len(chunk) <= max_bytes:
                self._mem.popleft()
            else:
                self._mem[0] = chunk[max_bytes:]
                chunk = chunk[:max_bytes]
            self._mem_bytes -= len(chunk)
            return chunk
        if self._fd >= 0:
            n = min(max_bytes, self._write_pos - self._read_pos)
            data = os.pread(self._fd, n, self._read_pos)
            self._read_pos += len(data)
            if self._read_pos == self._write_pos:  # drained: back to memory
                os.close(self._fd)
                self._fd = -1
            return data
        return b""

    def discard(self) -> None:
        """Drop everything (a new connection starts a new stream) and release the file."""
        self._mem.clear()
        self._mem_bytes = 0
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
