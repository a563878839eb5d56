"""The debugging sink: one JSON object per line to a file or stdout, confirmed on write+flush.

A line::

    {"topic": "T", "queue_id": 0, "offset": 123, "tags": "SET", "keys": "k",
     "properties": {"REDIS_DB": "0", ...}, "body_b64": "KjMNCiQzDQpTRVQNCg=="}

``body_b64`` (standard base64) or, with ``encoding="hex"``, ``body_hex``; ``uniq_key`` and
``flag`` when the message sets them. Writes are ordered, so every queue is confirmed in order;
a message's future resolves with its line's number in the file, counted from 0 like a queue
offset (one count for all topics and queues; lines already in the file count: the sink
counts them at start; stdout counts from 0). A write error (ENOSPC, EPIPE on a closed stdout) fails
that message with SinkUnavailable and every message after it in the same queue with QueueFailed;
the file stays usable for other queues once the error clears. ``fsync=True`` also syncs the
file before confirming (not for stdout).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from collections.abc import Sequence
from typing import IO, Literal

from replicator.sinks.base import OutMessage, QueueLedger, encode_properties, submit_each
from replicator.sinks.errors import MessageRejected, QueueFailed, SinkClosed, SinkUnavailable

__all__ = ["FileSink", "message_line"]


def message_line(msg: OutMessage, encoding: Literal["base64", "hex"] = "base64") -> str:
    doc: dict[str, object] = {
        "topic": msg.topic,
        "queue_id": msg.queue_id,
        "offset": msg.offset,
        "tags": msg.tags,
        "keys": msg.keys,
        "properties": msg.properties,
    }
    if msg.uniq_key:
        doc["uniq_key"] = msg.uniq_key
    if msg.flag:
        doc["flag"] = msg.flag
    if encoding == "hex":
        doc["body_hex"] = msg.body.hex()
    else:
        doc["body_b64"] = base64.b64encode(msg.body).decode("ascii")
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n"


class FileSink:
    """:class:`~replicator.sinks.base.Sink` writing JSON lines; ``path`` None or ``"-"``:
    stdout. ``queues``: each topic's queue count (routing needs one)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        queues: dict[str, int],
        encoding: Literal["base64", "hex"] = "base64",
        fsync: bool = False,
    ) -> None:
        if encoding not in ("base64", "hex"):
            raise ValueError(f"encoding: base64 or hex, got {encoding!r}")
        self.path = None if path is None or path == "-" else os.fspath(path)
        self.encoding: Literal["base64", "hex"] = encoding
        self.fsync = fsync and self.path is not None
        self._counts = dict(queues)
        self._ledgers = {
            (topic, i): QueueLedger(topic, i) for topic, n in queues.items() for i in range(n)
        }
        self._failed: dict[tuple[str, int], BaseException] = {}
        self._out: IO[str] | None = None
        self._closed = False
        self._lines = 0  # lines in the file: the next line's number

    async def start(self) -> None:
        if self.path is None:
            self._out = sys.stdout
        else:
            try:
                self._lines = await asyncio.to_thread(_count_lines, self.path)
                self._out = open(self.path, "a", encoding="utf-8")
            except OSError as exc:
                raise SinkUnavailable(f"cannot open {self.path}: {exc}") from None

    def queue_count(self, topic: str) -> int:
        return self._counts[topic]

    async def submit(self, msg: OutMessage) -> asyncio.Future[int]:
        if self._closed or self._out is None:
            raise SinkClosed("the sink is closed" if self._closed else "the sink is not started")
        ledger = self._ledgers.get((msg.topic, msg.queue_id))
        if ledger is None:
            raise MessageRejected(f"no queue {msg.queue_id} in topic {msg.topic} of this sink")
        failed = self._failed.get((msg.topic, msg.queue_id))
        if failed is not None:
            raise QueueFailed(msg.topic, msg.queue_id, failed)
        encode_properties(msg)  # the same checks as the RocketMQ sinks
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        slot = ledger.add(msg, future)
        try:
            self._out.write(message_line(msg, self.encoding))
            self._out.flush()
            if self.fsync:
                os.fsync(self._out.fileno())
        except (OSError, ValueError) as exc:
            error = SinkUnavailable(f"write to {self.path or 'stdout'} failed: {exc}")
            self._failed[(msg.topic, msg.queue_id)] = error
            future.set_exception(error)
            ledger.fail_all(QueueFailed(msg.topic, msg.queue_id, error))
            return future
        ledger.mark_done(slot, self._lines)
        self._lines += 1
        return future

    async def submit_many(self, msgs: Sequence[OutMessage]) -> asyncio.Future[int]:
        return await submit_each(self.submit, msgs)

    def confirmed(self, topic: str, queue_id: int) -> int:
        return self._ledgers[(topic, queue_id)].confirmed

    def confirmed_offset(self, topic: str, queue_id: int) -> int | None:
        return self._ledgers[(topic, queue_id)].confirmed_offset

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._out is not None and self.path is not None:
            self._out.close()
        self._out = None


def _count_lines(path: str) -> int:
    """Newlines in ``path`` (0 when it does not exist yet): the number of the next line."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return 0
    n = 0
    with f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
    return n
