"""The MessageStore facade: put, get by (topic, queue, offset), offsets, search by time.

Layout under ``root`` (research/broker.md §4): ``commitlog/``, ``consumequeue/<topic>/<qid>/``,
``checkpoint``. Opening a store always runs recovery from the checkpoint (a clean stop
writes a checkpoint at the end, so that scan is short). A put appends the record to the
commit log and its unit to the consume queue under one lock (queue offsets are dense and
in commit-log order); under SYNC_FLUSH it returns once the record is durable, and a get
shows only durable records. A background thread flushes (ASYNC_FLUSH), flushes the consume
queues and writes the checkpoint every ``flush_interval_ms``.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import threading
import time
from dataclasses import dataclass

from broker.store.commitlog import CommitLog
from broker.store.consume_queue import ConsumeQueue, Unit, tags_code
from broker.store.errors import ConsumeQueueBehindError, DiskFullError, StoreError
from broker.store.flush import AsyncFlusher, FlushMode
from broker.store.message import Host, StoredMessage, decode, encode
from broker.store.recovery import Checkpoint, recover
from broker.store.retention import RetentionPolicy, expired_segments

GIB = 1024 * 1024 * 1024


@dataclass(frozen=True)
class StoreConfig:
    segment_size: int = GIB
    cq_units_per_file: int = 300_000
    flush_mode: FlushMode = FlushMode.ASYNC_FLUSH
    # ASYNC_FLUSH: how often the commit log is synced; both modes: how often the consume
    # queues are flushed and the checkpoint written (bounds the scan after a crash)
    flush_interval_ms: int = 500
    store_host: Host = dataclasses.field(default_factory=lambda: Host("127.0.0.1", 10911))


@dataclass(frozen=True)
class PutResult:
    status: str  # PUT_OK, or the failing error's ``send_status``
    physical_offset: int = -1
    queue_offset: int = -1
    size: int = 0


@dataclass(frozen=True)
class GetResult:
    status: str  # FOUND, NO_MESSAGE_IN_QUEUE, NO_MATCHED_MESSAGE, OFFSET_TOO_SMALL, OFFSET_OVERFLOW_ONE, ...
    messages: list[bytes]
    next_offset: int
    min_offset: int
    max_offset: int


class MessageStore:
    def __init__(self, root: str, config: StoreConfig | None = None) -> None:
        self.root = root
        self.config = config or StoreConfig()
        os.makedirs(root, exist_ok=True)
        self._put_lock = threading.Lock()
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self.log = CommitLog(os.path.join(root, "commitlog"), self.config.segment_size)
        self._load_consume_queues()
        self._checkpoint_path = os.path.join(root, "checkpoint")
        cp = Checkpoint.load(self._checkpoint_path)
        self._full_dispatch = False
        try:
            self.recovered_end = recover(self.log, cp, self._dispatch)
        except ConsumeQueueBehindError:  # a queue lost units before the checkpoint: dispatch all
            self._full_dispatch = True
            self.recovered_end = recover(self.log, Checkpoint(physic=cp.physic), self._dispatch)
        self._last_checkpoint = cp
        for cq in self._cqs.values():
            cq.truncate_physical(self.recovered_end)
            cq.delete_below(self.log.min_offset)
        self._flusher = AsyncFlusher(self.checkpoint, self.config.flush_interval_ms)
        self._flusher.start()

    # -- consume queues ---------------------------------------------------------
    def _cq_dir(self, topic: str, queue_id: int) -> str:
        return os.path.join(self.root, "consumequeue", topic, str(queue_id))

    def _load_consume_queues(self) -> None:
        base = os.path.join(self.root, "consumequeue")
        if not os.path.isdir(base):
            return
        for topic in os.listdir(base):
            for qid in os.listdir(os.path.join(base, topic)):
                if qid.isdigit():
                    self._cq(topic, int(qid))

    def _cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._cqs.get(key)
        if cq is None:
            cq = ConsumeQueue(self._cq_dir(topic, queue_id), self.config.cq_units_per_file)
            self._cqs[key] = cq
        return cq

    def _dispatch(self, physical: int, m: StoredMessage) -> None:
        size = len(encode(m))
        unit = Unit(physical, size, tags_code(m.tags))
        self._cq(m.topic, m.queue_id).append(
            m.queue_offset, unit, may_start_later=self._full_dispatch
        )

    # -- writes -----------------------------------------------------------------
    def put(self, message: StoredMessage) -> PutResult:
        """Store one message (topic, queue id, body, properties, born fields from the caller)."""
        with self._put_lock:
            cq = self._cq(message.topic, message.queue_id)
            m = dataclasses.replace(
                message,
                queue_offset=cq.max_offset,
                store_timestamp=message.store_timestamp or int(time.time() * 1000),
                store_host=self.config.store_host,
            )
            try:
                offset, size = self.log.append(
                    lambda at: encode(dataclasses.replace(m, physical_offset=at))
                )
            except StoreError as e:  # disk full, too large: refused, nothing written
                return PutResult(e.send_status)
            try:
                cq.append(m.queue_offset, Unit(offset, size, tags_code(m.tags)))
            except OSError as e:
                self.log.truncate(
                    offset
                )  # the record without its unit would take the next one's offset
                return PutResult(
                    DiskFullError.send_status if e.errno == errno.ENOSPC else StoreError.send_status
                )
        if self.config.flush_mode is FlushMode.SYNC_FLUSH:
            self.log.wait_durable(offset + size)
        return PutResult("PUT_OK", offset, m.queue_offset, size)

    # -- reads ------------------------------------------------------------------
    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return cq.max_offset if cq else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._cqs.get((topic, queue_id))
        return cq.min_offset if cq else 0

    def get(
        self, topic: str, queue_id: int, offset: int, max_msgs: int, tags: set[str] | None = None
    ) -> GetResult:
        """Up to ``max_msgs`` raw records from ``offset`` (filtered by tag when ``tags`` is given)."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return GetResult("NO_MATCHED_LOGIC_QUEUE", [], 0, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        if hi == 0:
            return GetResult("NO_MESSAGE_IN_QUEUE", [], 0, lo, hi)
        if offset < lo:
            return GetResult("OFFSET_TOO_SMALL", [], lo, lo, hi)
        if offset == hi:
            return GetResult("OFFSET_OVERFLOW_ONE", [], offset, lo, hi)
        if offset > hi:
            return GetResult("OFFSET_OVERFLOW_BADLY", [], hi, lo, hi)
        codes = {tags_code(t) for t in tags} if tags else None
        visible = (
            self.log.durable_offset if self.config.flush_mode is FlushMode.SYNC_FLUSH else None
        )
        out: list[bytes] = []
        nxt = offset
        while len(out) < max_msgs and nxt < hi:
            units = cq.get_range(nxt, max_msgs - len(out))
            if not units:
                break
            for u in units:
                if visible is not None and u.offset + u.size > visible:
                    break
                nxt += 1
                if codes is None or u.tags_code in codes:
                    out.append(self.log.read(u.offset, u.size))
            else:
                continue
            break
        status = "FOUND" if out else "NO_MATCHED_MESSAGE"
        return GetResult(status, out, nxt, lo, hi)

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose store timestamp is ≥ ``timestamp_ms`` (max offset if none)."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return 0
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            u = cq.get(mid)
            assert u is not None
            if (
                decode(self.log.read(u.offset, u.size), check_crc=False).store_timestamp
                < timestamp_ms
            ):
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- upkeep -----------------------------------------------------------------
    def checkpoint(self) -> None:
        """Flush the commit log and consume queues, then record how far both are durable."""
        with self._put_lock:
            logics = self.log.end_offset
            cqs = list(self._cqs.values())
        for cq in cqs:
            cq.flush()
        physic = self.log.flush()
        cp = Checkpoint(physic=physic, logics=logics)
        if cp != self._last_checkpoint:
            cp.save(self._checkpoint_path)
            self._last_checkpoint = cp

    def delete_expired(self, policy: RetentionPolicy, now: float | None = None) -> int:
        n = expired_segments(self.log, policy, now)
        if n:
            for cq in list(self._cqs.values()):
                cq.delete_below(self.log.min_offset)
        return n

    def close(self) -> None:
        self._flusher.stop()  # and a last checkpoint
        for cq in self._cqs.values():
            cq.close()
        self.log.close()
