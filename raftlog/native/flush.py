"""One pass of the native engine's loop: feed the core, persist, send, deliver.

Whatever arrived in one loop pass (peer messages, proposals, the tick) becomes one flush:
append messages to the followers first, then one write + fdatasync of the WAL, then the
acknowledgements that promise what is now on disk, then the committed entries to the sink
and the answers to the callers waiting for them. The tick drives elections and
heartbeats, expires what waited too long and keeps a connection open to every member.
"""

from __future__ import annotations

import logging
import time

from raftlog.errors import NotLeaderError, ProposalDroppedError, ProposeError, UnknownOutcomeError
from raftlog.native.base import EngineBase
from raftlog.native.core import RaftCore, Role
from raftlog.native.messages import KIND_NORMAL, Message, MsgType

log = logging.getLogger(__name__)

#: acks of new entries and votes held while the WAL cannot sync (the oldest beyond are
#: dropped); heartbeats are answered meanwhile, with the last index on disk
_MAX_HELD_ACKS = 4096


class Flush(EngineBase):
    """The loop pass: messages in, WAL synced, messages out, entries delivered."""

    def _on_message(self, m: Message) -> None:
        core = self.core
        try:
            if m.type == MsgType.PROPOSE:
                self._on_propose(m)
            elif m.type == MsgType.PROPOSE_RESP:
                self._on_propose_resp(m)
            else:
                core.step(m, time.monotonic())
                if m.type == MsgType.SNAPSHOT:
                    try:
                        self._on_snapshot_chunk(m)
                    except Exception:
                        log.exception("installing the leader's snapshot failed")
                        self._incoming = None
        except Exception:  # a bug: keep it visible, keep the connection
            log.exception("handling a %s message from %s failed", MsgType(m.type).name, m.src)
        self._kick()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._stopping:
            return  # shared mode: a flush scheduled before stop() closed the log
        self._in_flush = True
        core = self.core
        now = time.monotonic()
        try:
            if core.replicate_pending:
                core.replicate(now)
            if core.read_pending:
                core.start_reads(now)
            self._drain(core.outbox)
            self._write_out()  # appends leave before this node's own fsync (in parallel)
            if self._sync_wal(core, now):
                if core.replicate_pending:
                    core.replicate(now)
                if core.read_pending:
                    core.start_reads(now)
                self._drain(core.after_persist)
            elif len(core.after_persist) > _MAX_HELD_ACKS:
                # degraded: acks of new entries and votes wait for the disk (heartbeats
                # are answered at once with what is on disk: the leader keeps its quorum);
                # the oldest are as good as lost messages (the leader resends, the
                # candidate retries)
                del core.after_persist[:-_MAX_HELD_ACKS]
            self._drain(core.outbox)
            self._deliver()
            self._events()
            if core.read_pending:  # reads queued for a leader, asked again by _events
                core.start_reads(now)
            self._drain(core.outbox)
            if core.read_states or self._reads_ready:
                self._answer_reads()
            for peer in list(core.need_snapshot):
                core.need_snapshot.discard(peer)
                self._start_snapshot_send(peer)
        except Exception:
            log.exception("raft flush failed")
        finally:
            self._in_flush = False
        self._write_out()

    def _sync_wal(self, core: RaftCore, now: float) -> bool:
        """Persist what the core holds unstable (one write + fdatasync); False while the
        WAL cannot: nothing is then reported persisted (a leader does not count itself for
        the new entries) and no ack that promises it leaves (the core answers heartbeats
        at once, with its last index on disk, so the leader keeps its quorum).

        A failed sync (ENOSPC, EIO...) leaves the file as before the batch: the node is
        degraded (:attr:`health`) and the flushes the tick drives retry with backoff (0.1 s
        doubling to 1 s). The core still
        holds everything the failed batch had as unstable, so the batch is dropped from the
        WAL and the retry appends the core's unstable state once (not the batch twice); the
        first sync that succeeds clears the fault.
        """
        wal = self._wal
        assert wal is not None
        backoff = self._wal_backoff
        failing = backoff.failing
        if failing and not backoff.due(now):
            return False
        dirty = core.unstable_from is not None or core.hard_dirty
        if not dirty and not failing:
            return True
        if dirty:
            start = core.unstable_from
            entries = core.log[start - core.snap_index - 1 :] if start is not None else []
            wal.append(
                entries,
                truncate_from=start if core.truncated else None,
                hard=(core.term, core.vote) if core.hard_dirty else None,
                commit=core.commit,
            )
        try:
            wal.sync()  # a failed batch's cut back is retried first (RaftWal.needs_repair)
        except OSError as exc:
            # the core keeps all of it unstable and appends it again on the retry
            wal.drop_pending()
            self.health.fault("raft-log", exc)
            backoff.failed(now)
            return False
        if failing:
            backoff.reset()
            self.health.clear("raft-log")
        if dirty:
            core.persisted(core.last_index)
        return True

    def _drain(self, box: list[tuple[str, Message]]) -> None:
        if not box:
            return
        items = box[:]
        box.clear()
        for to, m in items:
            self._send(to, m)

    def _deliver(self) -> None:
        core = self.core
        entries = core.committed_entries()
        if not entries:
            return
        sink = self._sink
        for e in entries:
            if e.kind == KIND_NORMAL and sink is not None:
                sink(e.index, e.term, e.data)
            w = self._waiting.pop(e.index, None)
            if w is not None:
                term, callback = w
                if term == e.term:
                    callback(e.index, None)
                else:
                    callback(
                        None, ProposalDroppedError("the entry was replaced by a new leader's log")
                    )
        self._maybe_snapshot()

    def _events(self) -> None:
        core = self.core
        if not core.events:
            return
        events, core.events = core.events, []
        for ev in events:
            if ev == "leader-changed":
                # forwarded proposals the old leader never answered: the client retries
                # (requests carry (client id, seq), so a retry is applied at most once)
                forwards, self._forwards = self._forwards, {}
                for callback, _ in forwards.values():
                    callback(None, NotLeaderError("the leader changed", self._name(core.leader)))
                # reads asked of the old leader may never be answered (the core refuses
                # its own when it steps down): they ask again
                reads, self._reads = self._reads, {}
                for callback, _ in reads.values():
                    callback(None, NotLeaderError("the leader changed", self._name(core.leader)))
                if core.leader:
                    queued, self._queued = self._queued, []
                    for data, kind, callback, _ in queued:
                        self._propose(data, kind, callback)
                    waiting, self._reads_queued = self._reads_queued, []
                    for callback, deadline in waiting:
                        self._read_index(callback, deadline)
                if core.role == Role.LEADER:
                    log.info("leader of term %d (%d members)", core.term, len(core.voters))
            elif ev == "transfer-sent" and self._transfer_cb is not None:
                cb, self._transfer_cb = self._transfer_cb, None
                cb(0, None)
            elif ev == "transfer-failed" and self._transfer_cb is not None:
                cb, self._transfer_cb = self._transfer_cb, None
                cb(None, ProposeError("leadership transfer refused: the target is not caught up"))
            elif ev == "stepped-down" and self._transfer_cb is not None:
                cb, self._transfer_cb = self._transfer_cb, None
                cb(0, None)
        if core.role == Role.LEADER and self._queued:
            queued, self._queued = self._queued, []
            for data, kind, callback, _ in queued:
                self._propose_local(data, kind, callback)

    def _tick(self) -> None:
        if self._stopping:
            return
        loop = self._loop
        assert loop is not None
        loop.call_later(self._config.tick_ms / 1000, self._tick)
        core = self.core
        now = time.monotonic()
        try:
            core.tick(now)
            self._expire(now)
            self._poll_snapshot()
            for address in core.peers:
                self._peer(address)  # keep connections to every member open
        except Exception:
            log.exception("raft tick failed")
        self._kick()

    def _expire(self, now: float) -> None:
        if self._queued and self._queued[0][3] <= now:
            keep = []
            for item in self._queued:
                if item[3] <= now:
                    item[2](None, NotLeaderError("no leader elected in time"))
                else:
                    keep.append(item)
            self._queued = keep
        if self._forwards:
            for rid, (callback, deadline) in list(self._forwards.items()):
                if deadline <= now:
                    del self._forwards[rid]
                    callback(None, UnknownOutcomeError("the leader did not answer in time"))
        if self._reads or self._reads_queued or self._reads_ready:
            self._expire_reads(now)
