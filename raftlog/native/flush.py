"""One pass of the native engine's loop: feed the core, persist, send, deliver.

Whatever arrived in one loop pass (peer messages, proposals, the tick) becomes one flush:
append messages to the followers first, then one write + fdatasync of the WAL, then the
acknowledgements that promise what is now on disk, then the committed entries to the sink
and the answers to the callers waiting for them. The tick drives elections and
heartbeats, expires what waited too long and keeps a connection open to every member.

:class:`Flush` drives the engine's parts, and builds and wires them (one place): the peer
:class:`~raftlog.native.transport.Transport`, :class:`~raftlog.native.forwarding.Forwarding`
(proposals, reads, and the entries handed to the sink) and the
:class:`~raftlog.native.snapshot_stream.SnapshotStream`. Each owns its fields; they reach
each other only through the callables given here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from raftlog.consensus import CommitSink, EngineSnapshots
from raftlog.errors import ProposeError
from raftlog.health import Backoff, Health
from raftlog.native.config import NativeConfig
from raftlog.native.core import RaftCore, Role
from raftlog.native.forwarding import Forwarding
from raftlog.native.messages import Message, MsgType
from raftlog.native.snapshot_stream import SnapshotStream
from raftlog.native.stall import CommitWatch, describe_peers
from raftlog.native.transport import Transport
from raftlog.native.wal import RaftWal

log = logging.getLogger(__name__)

#: acks of new entries and votes held while the WAL cannot sync (the oldest beyond are
#: dropped); heartbeats are answered meanwhile, with the last index on disk
_MAX_HELD_ACKS = 4096
#: a WAL sync longer than this is logged (etcd warns past 1 s as well): the member's loop,
#: its heartbeats and every write it acknowledges waited for it
SLOW_SYNC_S = 1.0


class Flush:
    """The loop pass: messages in, WAL synced, messages out, entries delivered. Runs on
    the engine's loop; built when the engine starts (with its core and WAL)."""

    def __init__(
        self,
        config: NativeConfig,
        loop: asyncio.AbstractEventLoop,
        core: RaftCore,
        wal: RaftWal,
        health: Health,
        sink: CommitSink,
        snapshots: EngineSnapshots | None,
        dump_file: str,
        name: Callable[[str], str],
    ) -> None:
        """``health``: where WAL faults are reported; ``sink``: the committed entries;
        ``snapshots``: the snapshot hooks (None: off); ``name(address)``: a member's name."""
        self._config = config
        self._loop = loop
        self._core = core
        self._wal = wal
        #: transient WAL faults (ENOSPC, EIO...): reported here, retried by _flush
        self._health = health
        self._wal_backoff = Backoff()
        self._flush_scheduled = False
        self._in_flush = False
        self._name = name
        self._commit_watch = CommitWatch()  # a leader's stalled commits, logged
        self._stopping = False
        self.transport = Transport(
            config, loop, core, self._on_message, self.kick, self._on_unsent, self._on_lost
        )
        self.forwarding = Forwarding(
            config, core, sink, self.transport.send, self.transport.send_forward, self.kick, name
        )
        self.snapshots = SnapshotStream(
            config,
            loop,
            core,
            wal,
            snapshots,
            dump_file,
            self.transport,
            self.forwarding.snapshot_installed,
        )

    def stop(self) -> None:
        """No more passes, ticks or dials."""
        self._stopping = True
        self.transport.stop()

    def detach_sink(self) -> None:
        """Nothing more to the sink (the engine stopped)."""
        self.forwarding.detach_sink()

    def close(self) -> list[asyncio.Task[None]]:
        """Close the listener and every connection, cancel the peer tasks; return them."""
        return [*self.transport.close(), *self.snapshots.close()]

    async def shutdown(self) -> None:
        await asyncio.gather(*self.close(), return_exceptions=True)

    def kick(self) -> None:
        """A pass is needed: soon, once (not while one runs: it ends with a write-out)."""
        if self._stopping:
            return
        if not self._flush_scheduled and not self._in_flush:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _on_unsent(self, to: str, rids: list[int]) -> None:
        self.forwarding.fail_forwards(to, rids)

    def _on_lost(self, to: str) -> None:
        self.forwarding.connection_lost(to)

    def _on_message(self, m: Message) -> None:
        core = self._core
        try:
            if m.type == MsgType.PROPOSE:
                self.forwarding.on_propose(m)
            elif m.type == MsgType.PROPOSE_RESP:
                self.forwarding.on_propose_resp(m)
            else:
                core.step(m, time.monotonic())
                if m.type == MsgType.SNAPSHOT:
                    self.snapshots.on_chunk(m)
        except Exception:  # a bug: keep it visible, keep the connection
            log.exception("handling a %s message from %s failed", MsgType(m.type).name, m.src)
        self.kick()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._stopping:
            return  # shared mode: a flush scheduled before stop() closed the log
        self._in_flush = True
        core = self._core
        transport, forwarding = self.transport, self.forwarding
        now = time.monotonic()
        try:
            if core.replicate_pending:
                core.replicate(now)
            if core.read_pending:
                core.start_reads(now)
            self._drain(core.outbox)
            transport.write_out()  # appends leave before this node's own fsync (in parallel)
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
            if forwarding.deliver():  # (reads answered and delivered up to: answered there)
                self.snapshots.maybe_snapshot()
            self._events()
            if core.read_pending:  # reads queued for a leader, asked again by _events
                core.start_reads(now)
            self._drain(core.outbox)
            if core.read_states:
                forwarding.answer_reads()
            for peer in list(core.need_snapshot):
                core.need_snapshot.discard(peer)
                self.snapshots.start_send(peer)
        except Exception:
            log.exception("raft flush failed")
        finally:
            self._in_flush = False
        transport.write_out()

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
        started = time.monotonic()
        try:
            wal.sync()  # a failed batch's cut back is retried first (RaftWal.needs_repair)
        except OSError as exc:
            # the core keeps all of it unstable and appends it again on the retry
            wal.drop_pending()
            self._health.fault("raft-log", exc)
            backoff.failed(now)
            return False
        took = time.monotonic() - started
        if took > SLOW_SYNC_S:
            log.warning(
                "slow fdatasync of the Raft log: %.2f s (expected under %g s; the disk is "
                "shared or slow): this member's loop and heartbeats waited for it",
                took,
                SLOW_SYNC_S,
            )
        if failing:
            backoff.reset()
            self._health.clear("raft-log")
        if dirty:
            core.persisted(core.last_index)
        return True

    def _drain(self, box: list[tuple[str, Message]]) -> None:
        if not box:
            return
        items = box[:]
        box.clear()
        send = self.transport.send
        for to, m in items:
            send(to, m)

    def deliver(self) -> None:
        """Hand what the log says is committed to the sink (at start: before a restart)."""
        if self.forwarding.deliver():
            self.snapshots.maybe_snapshot()

    def _events(self) -> None:
        core = self._core
        if not core.events:
            return
        events, core.events = core.events, []
        forwarding = self.forwarding
        for ev in events:
            if ev == "leader-changed":
                if core.role == Role.LEADER and self._config.on_lead is not None:
                    self._config.on_lead(core.newest_normal_data())
                forwarding.leader_changed()
                if core.role == Role.LEADER:
                    log.info("leader of term %d (%d members)", core.term, len(core.voters))
            elif ev == "lost-quorum":
                log.warning(
                    "stepped down: a majority did not answer within %.1f s (%s)",
                    core.timing.step_down_s,
                    ", ".join(
                        f"{self._name(peer)} answered {silent_s:.1f} s ago"
                        for peer, silent_s in sorted(core.quorum_silence.items())
                    ),
                )
            elif ev in ("transfer-sent", "stepped-down"):
                forwarding.transfer_done(None)
            elif ev == "transfer-failed":
                forwarding.transfer_done(
                    ProposeError("leadership transfer refused: the target is not caught up")
                )
        if core.role == Role.LEADER:
            forwarding.propose_queued()

    def _watch_commits(self, now: float) -> None:
        """A leader whose commit index stood while entries waited says why it may have
        (:mod:`raftlog.native.stall`), once, and when commits resume."""
        core = self._core
        if core.role != Role.LEADER:
            self._commit_watch.reset()
            return
        said = self._commit_watch.check(now, core.commit, core.last_index)
        if said is None:
            return
        what, stood_s = said
        if what == "resumed":
            log.warning("committing again after %.1f s", stood_s)
            return
        log.warning(
            "no entry committed for %.1f s (%d waiting after index %d): %s",
            stood_s,
            core.last_index - core.commit,
            core.commit,
            describe_peers(core.progress, now, self.transport.tcp_state, self._name),
        )

    def tick(self) -> None:
        if self._stopping:
            return
        self._loop.call_later(self._config.tick_ms / 1000, self.tick)
        core = self._core
        now = time.monotonic()
        try:
            core.tick(now)
            self._watch_commits(now)
            self.forwarding.expire(now)
            self.snapshots.poll()
            if self._config.peer_paths > 1:
                self.transport.unstick()
            peer = self.transport.peer
            for address in core.peers:
                peer(address)  # keep connections to every member open
        except Exception:
            log.exception("raft tick failed")
        self.kick()
