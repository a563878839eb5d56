"""Ending transactions, and the index of ended ones (RocketMQ's
``TransactionalMessageServiceImpl`` + ``EndTransactionProcessor``, transport-neutral: the
remoting END_TRANSACTION handler and the gRPC EndTransaction both call :meth:`end`).

The prepare itself is a send: the send path turns a half message into its half-topic record
(:func:`broker.transactions.half.to_half`) and puts it like any other, so it is quorum-replicated.

:meth:`TransactionService.end` finds the half by its commit-log offset, checks it is the one
named (half topic, queue offset, producer group: ``checkPrepareMessage``,
EndTransactionProcessor.java:220-248), then

- COMMIT: the real message and the op record in one append (one admission, one quorum wait),
  so a crash cannot leave the message without its op, which a later check would commit again;
- ROLLBACK: the op record only;
- a half already ended the same way: SUCCESS, nothing written (a second commit, a late check
  answer); the other way: :class:`AlreadyEnded`;
- a producer's own end (not a check's answer) of a half whose ``CHECK_IMMUNITY_TIME_IN_SECONDS``
  has passed: :class:`LateEnd`, ILLEGAL_OPERATION (``rejectCommitOrRollback``,
  EndTransactionProcessor.java:199-213).

Ends of one root are serialised (a second waits for the first, then answers from the index).
The index (:class:`~broker.transactions.half.Ended`) holds every op from the op queue's check
progress on, read at load and after each write; an end for a root older than the loaded half
progress reads the rest of the op queue once (an op below the progress can only end such a
root). The progress (half and op queue offsets of ``CID_RMQ_SYS_TRANS``) lives in the broker's
offset store, so in metaledger when the replica has a client: a new master resumes from it.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass

from broker.core import BrokerCore, now_ms
from broker.remoting.errors import ServiceNotAvailable
from broker.replication import RESPONSE, PutStatus
from broker.store import StoreError
from broker.transactions.errors import (
    AlreadyEnded,
    HalfMismatch,
    HalfNotFound,
    LateEnd,
    TransactionError,
)
from broker.transactions.half import (
    CHECK_GROUP,
    CHECK_IMMUNITY,
    HALF_TOPIC,
    OP_TOPIC,
    PRODUCER_GROUP,
    Ended,
    Resolution,
    immunity_ms,
    op_offsets,
    op_record,
    root_offset,
    to_real,
)
from rmq.message import Host, MessageError, StoredMessage, decode

log = logging.getLogger(__name__)
READ_BATCH = 256
PAST = {Resolution.COMMIT: "committed", Resolution.ROLLBACK: "rolled back"}
#: what counts as stored (RocketMQ's ``sendFinalMessage``: a flush or slave timeout is SUCCESS)
STORED = frozenset(
    {
        PutStatus.PUT_OK,
        PutStatus.FLUSH_DISK_TIMEOUT,
        PutStatus.FLUSH_SLAVE_TIMEOUT,
        PutStatus.SLAVE_NOT_AVAILABLE,
    }
)


@dataclass(frozen=True)
class EndRequest:
    """One END_TRANSACTION, whichever front it came through. ``producer_group`` and
    ``queue_offset`` None: not checked (the gRPC front names the half by its offset id)."""

    commit_log_offset: int
    resolution: Resolution
    producer_group: str | None = None
    queue_offset: int | None = None
    from_check: bool = False


@dataclass(frozen=True)
class EndResult:
    half: StoredMessage
    resolution: Resolution
    written: bool  # False: it was ended before, nothing written now


class TransactionService:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.ended = Ended()
        #: half / op queue progress of the check (CID_RMQ_SYS_TRANS), as loaded then advanced
        self.half_progress = 0
        self.op_progress = 0
        #: ops read into ``ended``: [op_from, op_read)
        self.op_from = 0
        self.op_read = 0
        #: (op queue offset, highest half offset it ends), from op_progress on, in order
        self.pending_ops: list[tuple[int, int]] = []
        self._loaded_half_progress = 0
        self._loaded = False
        self._provisional = False
        self._ending: dict[int, asyncio.Future[None]] = {}

    # ------------------------------------------------------------------ the op index
    def reset(self) -> None:
        """Forget the index (after a role change): the next use loads it again."""
        self._loaded = False

    async def load(self) -> None:
        """The progress from the offset store, then the ops from the op progress on."""
        if self._loaded:
            return
        offsets = self.core.offsets
        store = self.core.store
        half = offsets.load(CHECK_GROUP, HALF_TOPIC, 0)
        op = offsets.load(CHECK_GROUP, OP_TOPIC, 0)
        self.half_progress = max(half or 0, store.min_offset(HALF_TOPIC, 0))
        self.op_progress = max(op or 0, store.min_offset(OP_TOPIC, 0))
        self._loaded_half_progress = self.half_progress
        #: loaded before the offset store was (metaledger unreachable): loaded again once it is
        self._provisional = not offsets.loaded
        self.ended = Ended()
        self.pending_ops = []
        self.op_from = self.op_read = self.op_progress
        self._loaded = True
        await self.refresh()

    async def refresh(self) -> None:
        """Read the ops written since the last read into the index."""
        if self._loaded and self._provisional and self.core.offsets.loaded:
            self._loaded = False
        await self.load()
        ops, self.op_read = await self.read_on(OP_TOPIC, self.op_read, None)
        for op in ops:
            self.ended.replay(op)
            self.pending_ops.append((op.queue_offset, max(op_offsets(op), default=-1)))

    async def _read_older(self) -> None:
        """The ops below ``op_from`` (once, when an old root is asked about)."""
        start = self.core.store.min_offset(OP_TOPIC, 0)
        if start >= self.op_from:
            return
        for op in await self.read(OP_TOPIC, start, self.op_from):
            self.ended.replay(op)
        self.op_from = start

    async def ended_as(self, half: StoredMessage) -> Resolution | None:
        """How ``half`` (or its root) was ended; None while it is open."""
        await self.refresh()
        got = self.ended.of(half)
        if got is None and root_offset(half) < self._loaded_half_progress:
            await self._read_older()
            got = self.ended.of(half)
        return got

    async def read(self, topic: str, start: int, stop: int | None) -> list[StoredMessage]:
        """The records of ``topic`` queue 0 in [start, stop) (stop None: to the end), decoded;
        a record that does not decode is skipped with a warning."""
        return (await self.read_on(topic, start, stop))[0]

    async def read_on(
        self, topic: str, start: int, stop: int | None
    ) -> tuple[list[StoredMessage], int]:
        """:meth:`read`, and the queue offset to go on from (past a record skipped too)."""
        store = self.core.store
        out: list[StoredMessage] = []
        offset = max(start, store.min_offset(topic, 0))
        end = store.max_offset(topic, 0) if stop is None else stop
        while offset < end:
            got = await self.core.run(store.get, topic, 0, offset, min(READ_BATCH, end - offset))
            if not got.messages:
                break
            for raw in got.messages:
                try:
                    out.append(decode(raw))
                except MessageError as exc:
                    log.warning(
                        "transactions: %s offset %d does not decode: %s", topic, offset, exc
                    )
                offset += 1
            offset = max(offset, got.next_offset)
        return out, max(offset, start)

    def advance(self, half_progress: int) -> None:
        """The check passed every half below ``half_progress``: the op progress moves past the
        ops that end only halves below it; both are committed to the offset store."""
        self.half_progress = max(self.half_progress, half_progress)
        keep = 0
        while keep < len(self.pending_ops) and self.pending_ops[keep][1] < self.half_progress:
            self.op_progress = self.pending_ops[keep][0] + 1
            keep += 1
        del self.pending_ops[:keep]
        offsets = self.core.offsets
        offsets.commit(CHECK_GROUP, HALF_TOPIC, 0, self.half_progress)
        offsets.commit(CHECK_GROUP, OP_TOPIC, 0, self.op_progress)

    # ------------------------------------------------------------------ ending
    async def half_at(self, commit_log_offset: int) -> StoredMessage:
        """The half message stored at ``commit_log_offset``; HalfNotFound otherwise."""
        log_end = self.core.store.log.end_offset
        if not 0 <= commit_log_offset < log_end:
            raise HalfNotFound(
                f"Find prepared transaction message failed: no message at commit log offset "
                f"{commit_log_offset} (the log ends at {log_end})"
            )
        try:
            raw = await self.core.run(self.core.store.read_record, commit_log_offset)
            half = decode(raw)
        except (StoreError, MessageError, OSError, ValueError, struct.error) as exc:
            raise HalfNotFound(
                f"Find prepared transaction message failed: no message at commit log offset "
                f"{commit_log_offset} ({exc})"
            ) from None
        if half.physical_offset != commit_log_offset or half.topic != HALF_TOPIC:
            raise HalfNotFound(
                f"Find prepared transaction message failed: commit log offset "
                f"{commit_log_offset} holds no half message"
            )
        return half

    async def end(self, request: EndRequest) -> EndResult:
        """Commit or roll back one half (see the module docstring); refusals raise
        TransactionError (nothing written) or ServiceNotAvailable (not the master)."""
        if request.resolution not in (Resolution.COMMIT, Resolution.ROLLBACK):
            raise TransactionError(f"commitOrRollback {request.resolution}: not an end")
        why = self.core.replication.writable()
        if why is not None:
            raise ServiceNotAvailable(f"end transaction is forbidden here: {why}")
        half = await self.half_at(request.commit_log_offset)
        group = half.properties.get(PRODUCER_GROUP, "")
        if request.producer_group is not None and group != request.producer_group:
            raise HalfMismatch(
                f"The producer group wrong: the half at {request.commit_log_offset} is "
                f"{group!r}'s, not {request.producer_group!r}'s"
            )
        if request.queue_offset is not None and half.queue_offset != request.queue_offset:
            raise HalfMismatch(
                f"The transaction state table offset wrong: the half at "
                f"{request.commit_log_offset} has queue offset {half.queue_offset}, not "
                f"{request.queue_offset}"
            )
        root = root_offset(half)
        while (busy := self._ending.get(root)) is not None:
            await asyncio.shield(busy)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ending[root] = done
        try:
            return await self._end(half, request.resolution, request.from_check)
        finally:
            del self._ending[root]
            done.set_result(None)

    async def _end(
        self, half: StoredMessage, resolution: Resolution, from_check: bool
    ) -> EndResult:
        before = await self.ended_as(half)
        if before is resolution:
            return EndResult(half, resolution, written=False)
        if before is not None:
            raise AlreadyEnded(
                f"the transaction of the half at {half.physical_offset} was already {PAST[before]}"
            )
        if not from_check and CHECK_IMMUNITY in half.properties:
            immunity = immunity_ms(half, self.core.config.transaction_timeout_ms)
            if now_ms() - half.born_timestamp > immunity:
                raise LateEnd(
                    f"the producer's end comes after its check immunity ({immunity} ms since "
                    f"the message was born): only the answer to a check may end it now"
                )
        c = self.core.config
        op = op_record(half, resolution, Host(c.advertised_host, c.listen_port), now_ms())
        if resolution is Resolution.COMMIT:
            status, results = await self.core.put_batch([to_real(half), op])
            stored = len(results) == 2
        else:
            status, result = await self.core.put(op)
            stored = result is not None and result.status == "PUT_OK"
        if stored:
            self.ended.add(op_offsets(op), resolution)
        if status not in STORED or not stored:
            code, remark = RESPONSE[status]
            raise TransactionError(
                f"end transaction failed: {remark or status.value}", response_code=code
            )
        return EndResult(half, resolution, written=True)
