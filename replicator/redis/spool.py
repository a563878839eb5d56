"""FIFOs between the socket reader and everything slower: memory first, then disk.

The master cuts a replica whose output buffer passes ``client-output-buffer-limit replica``
(256 MB hard, 64 MB for 60 s by default), and ``repl-timeout`` after silence. So the reader
never waits for the sink: it puts every chunk here and goes back to the socket, and the
pipeline takes from here at the sink's pace: a reader that keeps draining the socket,
spooling to disk when the sink is slow.

Up to ``memory_limit`` bytes stay in memory; past it, chunks are appended to one spill file
in ``directory`` and read back in order; once the reader of the spool has drained the file,
it is truncated and memory is used again. Order is always the order of ``put``. Single event
loop, no threads: ``put`` is synchronous and never blocks on the consumer (a disk write of one
chunk), ``get`` waits for data.

:class:`EventSpool` is what the driver uses: the reader parses (so it answers ``GETACK`` and
knows its offset however slow the sink is) and puts protocol events; past the memory limit
they go to disk as length-prefixed frames (:func:`encode_event`), read back in order.
"""

from __future__ import annotations

import asyncio
import os
import struct
import tempfile
from collections import deque
from pathlib import Path

from replicator.redis.protocol import (
    Continue,
    Event,
    FullSync,
    GetAck,
    RdbBegin,
    RdbChunk,
    RdbEnd,
    StreamCommand,
)

__all__ = ["EventSpool", "Spool", "decode_event", "encode_event"]


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


# --------------------------------------------------------------------------- events


def _size(event: Event) -> int:
    """About how many bytes an event holds (what the memory limit counts)."""
    if type(event) is StreamCommand:
        return 64 + sum(map(len, event.argv))
    if isinstance(event, RdbChunk):
        return 64 + len(event.data)
    return 64


_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_CMD = struct.Struct(">QQI")


def encode_event(event: Event) -> bytes:
    """One event as a length-prefixed frame (the spill file's format; this process only)."""
    if isinstance(event, StreamCommand):
        parts = [b"C", _CMD.pack(event.start, event.end, len(event.argv))]
        for a in event.argv:
            parts += (_U32.pack(len(a)), a)
        body = b"".join(parts)
    elif isinstance(event, RdbChunk):
        body = b"R" + event.data
    elif isinstance(event, FullSync):
        body = b"F" + _U64.pack(event.offset) + event.replid.encode()
    elif isinstance(event, Continue):
        body = b"N" + (event.replid.encode() if event.replid is not None else b"")
    elif isinstance(event, RdbBegin):
        body = b"B" + _I64.pack(-1 if event.size is None else event.size)
    elif isinstance(event, RdbEnd):
        body = b"E"
    else:
        body = b"G"
    return _U32.pack(len(body)) + body


def decode_event(body: memoryview) -> Event:
    tag = bytes(body[:1])
    if tag == b"C":
        start, end, argc = _CMD.unpack_from(body, 1)
        pos, argv = 1 + _CMD.size, []
        for _ in range(argc):
            (n,) = _U32.unpack_from(body, pos)
            argv.append(bytes(body[pos + 4 : pos + 4 + n]))
            pos += 4 + n
        return StreamCommand(argv, start, end)
    if tag == b"R":
        return RdbChunk(bytes(body[1:]))
    if tag == b"F":
        return FullSync(bytes(body[9:]).decode(), _U64.unpack_from(body, 1)[0])
    if tag == b"N":
        return Continue(bytes(body[1:]).decode() or None)
    if tag == b"B":
        (size,) = _I64.unpack_from(body, 1)
        return RdbBegin(None if size < 0 else size)
    if tag == b"E":
        return RdbEnd()
    return GetAck()


class EventSpool:
    """Protocol events between the socket reader and the consumer: objects in memory up to
    ``memory_limit`` bytes (as :func:`_size` counts them), then encoded frames in a
    :class:`Spool`'s spill file; ``get`` gives them back in order. ``put`` never waits."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        memory_limit: int = 64 * 1024 * 1024,
    ) -> None:
        self.memory_limit = memory_limit
        self._mem: deque[tuple[Event, int]] = deque()  # (event, its _size)
        self._mem_bytes = 0
        self._disk = Spool(directory, memory_limit=1)  # everything it holds is on disk
        self._disk_events = 0
        self._buf = bytearray()  # frames read back from disk, not yet decoded
        self._ready = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        return len(self._mem) + self._disk_events

    @property
    def memory_bytes(self) -> int:
        return self._mem_bytes

    @property
    def disk_bytes(self) -> int:
        return self._disk.buffered + len(self._buf)

    @property
    def spilled_bytes(self) -> int:
        return self._disk.spilled_bytes

    def put(self, event: Event) -> None:
        size = _size(event)
        if self._disk_events == 0 and self._mem_bytes + size <= self.memory_limit:
            self._mem.append((event, size))
            self._mem_bytes += size
        else:
            self._disk.put(encode_event(event))
            self._disk_events += 1
        self._ready.set()

    def get_nowait(self) -> Event | None:
        if self._mem:
            event, size = self._mem.popleft()
            self._mem_bytes -= size
            return event
        if not self._disk_events:
            return None
        while True:
            if len(self._buf) >= 4:
                (n,) = _U32.unpack_from(self._buf, 0)
                if len(self._buf) >= 4 + n:
                    event = decode_event(memoryview(self._buf)[4 : 4 + n])
                    del self._buf[: 4 + n]
                    self._disk_events -= 1
                    return event
            self._buf += self._disk.get_nowait(1024 * 1024)

    def close(self) -> None:
        """No more events: ``get`` returns None once every event put was taken."""
        self._closed = True
        self._ready.set()

    async def get(self) -> Event | None:
        while True:
            event = self.get_nowait()
            if event is not None or self._closed:
                return event
            self._ready.clear()
            await self._ready.wait()

    def discard(self) -> None:
        self._mem.clear()
        self._mem_bytes = 0
        self._disk.discard()
        self._disk_events = 0
        self._buf.clear()
