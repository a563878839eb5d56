"""The MessageStore facade: put, get by (topic, queue, offset), offsets, search by time.

Layout under ``root`` (RocketMQ's ``store/``): ``commitlog/``, ``consumequeue/<topic>/<qid>/``,
``checkpoint``. Opening a store always runs recovery from the checkpoint (a clean stop
writes a checkpoint at the end, so that scan is short). A put appends the record to the
commit log and its unit to the consume queue under one lock (queue offsets are dense and
in commit-log order); under SYNC_FLUSH it returns once the record is durable, and a get
shows only durable records. A background thread flushes (ASYNC_FLUSH), flushes the consume
queues and writes the checkpoint every ``flush_interval_ms``.

HA hooks (:mod:`broker.ha`): a master streams raw commit-log bytes with
``read_log``; a slave writes them with ``append_replicated`` at its own end (the bytes may
split records; each record is dispatched to its consume queue once whole, and
``dispatched_offset`` says how far that got), and ``truncate`` cuts log and queues back to
a consistent point. A slave acknowledges bytes before they are fsynced, as RocketMQ does.

The message index (:mod:`broker.store.index`, ``<root>/index/``) is fed where the consume queues
are (put, replicated bytes, recovery from the checkpoint's ``index`` offset), cut with them
and trimmed with retention. About 500 lines: those three paths share one lock and one
dispatch state, so they stay in one class.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, NoReturn

from broker.store.commitlog import CommitLog
from broker.store.consume_queue import ConsumeQueue, Unit, tags_code
from broker.store.errors import ConsumeQueueBehindError, DecodeError, DiskFullError, StoreError
from broker.store.flush import AsyncFlusher, FlushMode
from broker.store.index import IndexConfig, IndexService, Record, index_record
from broker.store.recovery import Checkpoint, recover
from broker.store.replicated import Unit3, scan_replicated
from broker.store.retention import RetentionPolicy, expired_segments
from broker.store.segments import makedirs_durable
from broker.store.verify import ReadGuard
from rmq.message import (
    Host,
    MessageTooLarge,
    StoredMessage,
    at_physical_offset,
    decode,
    encode,
    encode_stored,
)

GIB = 1024 * 1024 * 1024
MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"  # the PutMessageStatus of a message the encoding refuses


@dataclass(frozen=True)
class StoreConfig:
    segment_size: int = GIB
    cq_units_per_file: int = 300_000
    flush_mode: FlushMode = FlushMode.ASYNC_FLUSH
    # ASYNC_FLUSH: how often the commit log is synced; both modes: how often the consume
    # queues are flushed and the checkpoint written (bounds the scan after a crash)
    flush_interval_ms: int = 500
    store_host: Host = dataclasses.field(default_factory=lambda: Host("127.0.0.1", 10911))
    index: IndexConfig | None = dataclasses.field(default_factory=IndexConfig)  # None: no index


class PutResult(NamedTuple):
    """One message's outcome (a named tuple: the store makes one a stored message, and a
    frozen dataclass's ``__init__`` costs twice as much)."""

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
        makedirs_durable(root)
        self._put_lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()  # orders checkpoint writes after a truncate
        self._cuts = 0  # truncations so far: a checkpoint taken across one is not written
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self.log = CommitLog(os.path.join(root, "commitlog"), self.config.segment_size)
        self.guard = ReadGuard(self.log, self.config.segment_size)  # checks what is handed out
        self._load_consume_queues()
        self._checkpoint_path = os.path.join(root, "checkpoint")
        cp = Checkpoint.load(self._checkpoint_path)
        self.index: IndexService | None = None
        start = cp
        if self.config.index is not None:  # the index is rebuilt from where it was flushed
            self.index = IndexService(os.path.join(root, "index"), self.config.index)
            start = dataclasses.replace(cp, logics=min(cp.logics, cp.index))
        self._full_dispatch = False
        try:
            self.recovered_end = recover(self.log, start, self._recovered)
        except ConsumeQueueBehindError:  # a queue lost units before the checkpoint: dispatch all
            self._full_dispatch = True
            self.recovered_end = recover(self.log, Checkpoint(physic=cp.physic), self._recovered)
        self._last_checkpoint = cp
        self._dispatched = self.recovered_end  # whole records up to here are in their queues
        self._pending_end = 0  # a replicated record cut by a frame: bytes it needs to be whole
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

    def _dispatch(self, physical: int, m: StoredMessage, size: int = 0) -> None:
        unit = Unit(physical, size or len(encode(m)), tags_code(m.tags))
        self._cq(m.topic, m.queue_id).append(
            m.queue_offset, unit, may_start_later=self._full_dispatch or size > 0
        )

    def _recovered(self, physical: int, m: StoredMessage) -> None:
        self._dispatch(physical, m)
        if self.index is not None:
            self.index.put_many([index_record(physical, m, m.store_timestamp)])

    # -- writes -----------------------------------------------------------------
    def put(self, message: StoredMessage) -> PutResult:
        """Store one message (topic, queue id, body, properties, born fields from the caller)."""
        return self.put_many([[message]])[0][0]

    def put_many(
        self, requests: Sequence[Sequence[StoredMessage]], wait_durable: bool = True
    ) -> list[list[PutResult]]:
        """Store several requests' messages, in order, under one lock hold and one write.

        Each inner sequence is one request's messages, stored in order up to the first one
        refused: that request's results end with the refusal (its later messages are not
        stored). Requests are independent of each other. Under SYNC_FLUSH this returns once
        the stored bytes are durable, unless ``wait_durable`` is False: the caller then
        calls :meth:`wait_durable` itself before answering.
        """
        ok: list[list[PutResult]] = [[] for _ in requests]
        refused: dict[int, PutResult] = {}
        end = 0
        with self._put_lock:
            now = int(time.time() * 1000)
            host = self.config.store_host
            log = self.log
            expect = log.end_offset  # where the next record lands unless a segment rolls
            next_qoff: dict[tuple[str, int], int] = {}
            records: list[tuple[int, ConsumeQueue, int, int]] = []  # request, cq, qoff, tags
            stamped: list[tuple[StoredMessage, int]] = []  # each record's message, store time
            datas: list[bytes] = []  # the records, encoded back to back from the log's end
            first_at = expect
            key: tuple[str, int] | None = None  # the queue of the message before (a batch: one)
            cq: ConsumeQueue | None = None
            qoff = 0
            for i, request in enumerate(requests):
                for message in request:
                    if key is None or message.queue_id != key[1] or message.topic != key[0]:
                        if key is not None:
                            next_qoff[key] = qoff
                        key = (message.topic, message.queue_id)
                        cq = self._cq(*key)
                        qoff = next_qoff.get(key, cq.max_offset)
                    assert cq is not None
                    stamp = message.store_timestamp or now
                    try:
                        data = encode_stored(message, qoff, expect, stamp, host)
                        if not log.fits(len(data)):
                            raise StoreError(f"record of {len(data)} bytes cannot fit a segment")
                    except StoreError as e:  # cannot fit a segment: refused, nothing written
                        refused[i] = PutResult(e.send_status)
                        break
                    except MessageTooLarge:  # past the encoding's limits: refused
                        refused[i] = PutResult(MESSAGE_ILLEGAL)
                        break
                    stamped.append((message, stamp))
                    records.append((i, cq, qoff, tags_code(message.tags)))
                    datas.append(data)
                    qoff += 1
                    expect += len(data)
            placed, error = (
                log.append_batch(datas, first_at, at_physical_offset) if datas else ([], None)
            )
            status = error.send_status if error is not None else ""
            stored = len(placed)
            cut = self._write_units(placed, records)
            if cut is not None:
                stored, status = cut
            for (offset, size), (i, _cq, qoff, _tags) in zip(
                placed[:stored], records, strict=False
            ):
                ok[i].append(PutResult("PUT_OK", offset, qoff, size))
            if stored:
                offset, size = placed[stored - 1]
                self._dispatched = end = offset + size
            if self.index is not None:
                at_and_stamp = zip(placed[:stored], stamped, strict=False)
                self.index.put_many([index_record(at, m, t) for (at, _), (m, t) in at_and_stamp])
            if status:  # a request's first record not stored ends it (its refusal comes first)
                for i, _cq, _qoff, _tags in records[stored:]:
                    refused[i] = PutResult(status)
        if wait_durable and end:
            self.wait_durable(end)
        for i, result in refused.items():
            ok[i].append(result)
        return ok

    def _write_units(
        self, placed: list[tuple[int, int]], records: list[tuple[int, ConsumeQueue, int, int]]
    ) -> tuple[int, str] | None:
        """The consume-queue units of the records just written, one write per queue; None,
        or (how many records stay stored, the refusal of the rest) when a write failed: the
        log and the queues are cut back to the first record whose unit was not written."""
        by_queue: dict[ConsumeQueue, tuple[int, list[tuple[int, int, int]], list[int]]] = {}
        for n, ((offset, size), (_i, cq, qoff, tags)) in enumerate(
            zip(placed, records, strict=False)
        ):
            batch = by_queue.get(cq)
            if batch is None:
                by_queue[cq] = batch = (qoff, [], [])
            batch[1].append((offset, size, tags))
            batch[2].append(n)
        failed: int | None = None  # the index of the first record without its unit
        status = ""
        for cq, (qoff, units, indexes) in by_queue.items():
            before = cq.max_offset
            try:
                cq.append_many(qoff, units)
            except OSError as e:
                n = indexes[cq.max_offset - before]
                if failed is None or n < failed:
                    failed = n
                enospc = e.errno == errno.ENOSPC
                status = (DiskFullError if enospc else StoreError).send_status
        if failed is None:
            return None
        cut = placed[failed][0]
        self.log.truncate(cut)  # a record without its unit would take the next one's offset
        for cq in by_queue:
            cq.truncate_physical(cut)
        return failed, status

    def wait_durable(self, end: int) -> None:
        """Under SYNC_FLUSH, return once the commit log is durable up to ``end``."""
        if self.config.flush_mode is FlushMode.SYNC_FLUSH:
            self.log.wait_durable(end)

    # -- HA hooks ---------------------------------------------------------------
    @property
    def dispatched_offset(self) -> int:
        """The end of the last whole record in the consume queues (a slave's safe restart point)."""
        return self._dispatched

    def read_log(self, offset: int, max_bytes: int) -> bytes:
        """Raw commit-log bytes from ``offset``, at most ``max_bytes``, within one segment;
        their records checked (DamagedRecordError: none are handed out)."""
        data = self.log.read_raw(offset, max_bytes)
        self.guard.chunk(offset, data)
        return data

    def read_record(self, offset: int) -> bytes:
        """The record starting at commit-log ``offset``, checked (a lookup by offset)."""
        return self.guard.record_at(offset)

    def append_replicated(self, offset: int, data: bytes) -> int:
        """Append a master's raw bytes at ``offset`` (must be the log's end); the new end.

        Records completed by these bytes go to their consume queues. A record that is not
        well formed (magic, size, physical offset, CRC) is cut from the log with everything
        after it, and DecodeError says where: the next copy starts again from there.
        """
        with self._put_lock:
            end = self.log.append_raw(offset, data)
            self._dispatched = max(self._dispatched, self.log.min_offset)
            if end >= self._pending_end:
                self._dispatch_replicated(end, offset, data)
            return end

    def _dispatch_replicated(self, end: int, data_at: int = 0, data: bytes = b"") -> None:
        seg_size = self.config.segment_size
        p = self._dispatched
        data_end = data_at + len(data)
        view = memoryview(data)

        def read(at: int, n: int) -> bytes | memoryview:  # the bytes just written, uncopied
            if data_at <= at and at + n <= data_end:
                return view[at - data_at : at - data_at + n]
            return self.log.read_raw(at, n)

        units: dict[tuple[str, int], tuple[int, list[Unit3]]] = {}
        indexed: list[Record] = []  # what the records completed here give the index
        p, need, reject = scan_replicated(
            read, p, end, seg_size, self.index is not None, units, indexed, self._write_queue
        )
        if reject is not None:
            self._reject_replicated(p, reject, units, indexed)
        self._append_units(units, indexed)
        self._dispatched, self._pending_end = p, need

    def _write_queue(self, topic: str, queue_id: int, first: int, units: list[Unit3]) -> None:
        self._cq(topic, queue_id).append_many(first, units, may_start_later=True)

    def _append_units(
        self, units: dict[tuple[str, int], tuple[int, list[Unit3]]], indexed: list[Record]
    ) -> None:
        """One consume-queue write per queue for the records one replicated frame completed
        (consecutive queue offsets per queue, as the master assigned them), and one index
        batch."""
        for (topic, queue_id), (first, batch) in units.items():
            self._cq(topic, queue_id).append_many(first, batch, may_start_later=True)
        units.clear()
        if self.index is not None and indexed:
            self.index.put_many(indexed)
        indexed.clear()

    def _reject_replicated(
        self,
        at: int,
        reason: str,
        units: dict[tuple[str, int], tuple[int, list[Unit3]]],
        indexed: list[Record],
    ) -> NoReturn:
        self._append_units(units, indexed)
        self._dispatched = at  # every record before it went to its queue
        self._truncate_locked(at)
        raise DecodeError(f"replicated record at commit-log offset {at}: {reason}")

    def truncate(self, end: int) -> None:
        """Cut the commit log and the consume queues back to ``end`` (a consistent point)."""
        with self._put_lock:
            self._truncate_locked(end)

    def _truncate_locked(self, end: int) -> None:
        if end < 0:
            raise StoreError(f"cannot truncate the commit log to {end}")
        if end < self.log.end_offset:
            self.log.truncate(end)
        for cq in self._cqs.values():
            cq.truncate_physical(end)
        self._dispatched = min(self._dispatched, self.log.end_offset)
        if self.index is not None:
            self.index.cut(self.log.end_offset)
        self._pending_end = 0
        self._cuts += 1
        with self._checkpoint_lock:
            cp = self._last_checkpoint
            if cp.physic > end or cp.logics > end:  # a crash must not look for cut bytes
                cp = Checkpoint(min(cp.physic, end), min(cp.logics, end), min(cp.index, end))
                cp.save(self._checkpoint_path)
                self._last_checkpoint = cp

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
        self.guard.check_healthy()
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
                if visible is not None and visible < u.offset + u.size <= self.log.end_offset:
                    break  # not durable yet (a unit past the log's end is checked: damage)
                nxt += 1
                if codes is None or u.tags_code in codes:
                    out.append(self.guard.record(u.offset, u.size))
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
            logics = self._dispatched  # a replicated record cut in two is not counted
            cqs = list(self._cqs.values())
            cuts = self._cuts
        for cq in cqs:
            cq.flush()
        if self.index is not None:
            self.index.flush()  # indexed as far as dispatched: the store feeds both at once
        physic = min(self.log.flush(), logics)
        cp = Checkpoint(physic=physic, logics=logics, index=logics)
        with self._checkpoint_lock:
            if cp != self._last_checkpoint and cuts == self._cuts:
                cp.save(self._checkpoint_path)
                self._last_checkpoint = cp

    def delete_expired(self, policy: RetentionPolicy, now: float | None = None) -> int:
        n = expired_segments(self.log, policy, now)
        if n:
            for cq in list(self._cqs.values()):
                cq.delete_below(self.log.min_offset)
            if self.index is not None:
                self.index.delete_below(self.log.min_offset)
        return n

    def close(self) -> None:
        self._flusher.stop()  # and a last checkpoint
        for cq in self._cqs.values():
            cq.close()
        if self.index is not None:
            self.index.close()
        self.log.close()
