"""The consumer side, for the oracle: replay the messages of all queues into a redis-server.

Messages arrive per queue in the order the queue holds them; the queues themselves may be read
in any interleaving. :class:`Replayer` applies each event exactly once, in its db:

- **Dedupe** by :func:`event_key` ``(replid, start, snapshot, seq, part)``: an at-least-once
  redelivery of something already applied is dropped. ``REDIS_SNAPSHOT`` keeps two full
  syncs from the same replid and offset apart (their entries may come in another order). Pieces of a split command (``REDIS_PART "i/n"``)
  are different commands and are each applied; copies of one command (``"*/n"``) share a key.
- **PSYNC2 renames** (``+CONTINUE <newid>``: a failover, a restart after ``SHUTDOWN SAVE``)
  do not change ``REDIS_REPLID``: it names the *history* (the replid of the full sync it began
  with), whose offsets go on across renames, so what was in flight when the link broke and
  comes again is a redelivery by its key. A redelivery has the same body too: after a kill -9
  of a master, what the replicator got and the promoted replica did not is another history at
  the same offsets, and the new history's command at such an offset (another body) is
  applied, not dropped.
- **Per-queue order** is kept: a queue's messages are applied in the order offered.
- **Copies are a barrier.** A command sent whole to n queues (FLUSHALL, RENAME a b, SWAPDB,
  SNAPSHOT_BEGIN, …) is applied once all n copies are at the head of their queues, so every
  queue's earlier messages come before it and later ones after it (``SET k 1; FLUSHALL;
  SET k 2`` stays right whichever queue is read first). The oldest pending message is always
  either ready or a copy whose other copies are all at their heads (queues hold messages in
  stream order), so the barrier cannot deadlock.
- **db**: the target SELECTs ``REDIS_DB`` before a command when it differs.
- **Fragments** (``REDIS_FRAGMENT "i/n"``: a command longer than a message may be) are
  joined per queue before anything else; a fragment 1 starts over (a resend after a restart).
- **Snapshots**: SNAPSHOT_BEGIN empties the target (FLUSHALL and FUNCTION FLUSH: a full sync
  replaces data and functions), the entries are replayed as commands, SNAPSHOT_END is a no-op.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from replicator.redis.errors import ProtocolError
from replicator.redis.events import KIND_MARKER, SNAPSHOT_BEGIN, OutMessage


class Target(Protocol):
    def execute(self, db: int, argv: Sequence[bytes]) -> None:
        """Run one command in ``db``; raises on an error reply."""

    def flush_all(self) -> None:
        """Empty every db and the function library."""


EventKey = tuple[str, str, str, str, str]


def event_key(properties: Mapping[str, str]) -> EventKey:
    return (
        properties.get("REDIS_REPLID", ""),
        properties.get("REDIS_START", ""),
        properties.get("REDIS_SNAPSHOT", ""),
        properties.get("REDIS_SEQ", ""),
        properties.get("REDIS_PART", ""),
    )


def decode_command(body: bytes) -> list[bytes]:
    """The argv of a RESP array of bulk strings (what :func:`events.encode_command` makes)."""
    try:
        head, pos = _line(body, 0)
        if not head.startswith(b"*"):
            raise ValueError("not an array")
        argv: list[bytes] = []
        for _ in range(int(head[1:])):
            bulk, pos = _line(body, pos)
            if not bulk.startswith(b"$"):
                raise ValueError("not a bulk string")
            n = int(bulk[1:])
            if n < 0 or body[pos + n : pos + n + 2] != b"\r\n":
                raise ValueError("bad bulk length")
            argv.append(body[pos : pos + n])
            pos += n + 2
        if pos != len(body):
            raise ValueError("trailing bytes")
    except ValueError as exc:
        raise ProtocolError(f"message body is not a RESP command: {exc}") from None
    return argv


def _line(data: bytes, pos: int) -> tuple[bytes, int]:
    end = data.find(b"\r\n", pos)
    if end < 0:
        raise ValueError("truncated")
    return data[pos:end], end + 2


class Replayer:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.applied: dict[EventKey, int] = {}  # key → crc32 of the body
        self.duplicates = 0
        self._queues: dict[int, deque[tuple[bytes, Mapping[str, str]]]] = {}
        self._waiting: dict[EventKey, set[int]] = {}
        self._fragments: dict[int, list[bytes]] = {}

    def offer_message(self, msg: OutMessage) -> None:
        self.offer(msg.queue_id, msg.body, msg.properties)

    def offer(self, queue_id: int, body: bytes, properties: Mapping[str, str]) -> None:
        """The next message of ``queue_id``; applies whatever became ready."""
        fragment = properties.get("REDIS_FRAGMENT")
        if fragment:
            i, n = (int(x) for x in fragment.split("/"))
            parts = self._fragments.setdefault(queue_id, [])
            if i == 1:
                parts.clear()
            if i != len(parts) + 1:
                raise ProtocolError(f"queue {queue_id}: fragment {fragment} out of order")
            parts.append(bytes(body))
            if i < n:
                return
            body = b"".join(parts)
            parts.clear()
            properties = {k: v for k, v in properties.items() if k != "REDIS_FRAGMENT"}
        self._queues.setdefault(queue_id, deque()).append((body, properties))
        self._pump()

    @property
    def pending(self) -> int:
        """Messages held back (copies waiting for their other copies, and what follows them)."""
        return sum(len(q) for q in self._queues.values())

    def _pump(self) -> None:
        progress = True
        while progress:
            progress = False
            for queue_id, queue in self._queues.items():
                while queue:
                    body, props = queue[0]
                    key = event_key(props)
                    if self._seen(key, body):
                        queue.popleft()
                        self.duplicates += 1
                        progress = True
                        continue
                    part = props.get("REDIS_PART", "")
                    if part.startswith("*/"):
                        copies = int(part[2:])
                        here = self._waiting.setdefault(key, set())
                        here.add(queue_id)
                        if len(here) < copies:
                            break  # this queue waits at the barrier
                        self._apply(body, props)
                        self.applied[key] = zlib.crc32(body)
                        del self._waiting[key]
                        for q in here:
                            self._queues[q].popleft()
                        progress = True
                        continue
                    self._apply(body, props)
                    self.applied[key] = zlib.crc32(body)
                    queue.popleft()
                    progress = True

    def _seen(self, key: EventKey, body: bytes) -> bool:
        return self.applied.get(key) == zlib.crc32(body)

    def _apply(self, body: bytes, props: Mapping[str, str]) -> None:
        if props.get("REDIS_KIND") == KIND_MARKER:
            if decode_command(body)[0] == SNAPSHOT_BEGIN.encode():
                self.target.flush_all()
            return
        self.target.execute(int(props.get("REDIS_DB", "0")), decode_command(body))


class RedisTarget:
    """A :class:`Target` on one redis-py connection (raw replies: no response callbacks)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._conn = client.connection_pool.get_connection()
        self._db: int | None = None

    def _call(self, *argv: bytes | str) -> Any:
        self._conn.send_command(*argv)
        return self._conn.read_response()

    def execute(self, db: int, argv: Sequence[bytes]) -> None:
        if db != self._db:
            self._call("SELECT", str(db))
            self._db = db
        self._call(*argv)
        if argv and argv[0].lower() == b"select":
            self._db = int(argv[1])

    def flush_all(self) -> None:
        self._call("FLUSHALL")
        self._call("FUNCTION", "FLUSH")

    def close(self) -> None:
        self._client.connection_pool.release(self._conn)
