"""The native consensus engine: :mod:`raftlog.native.core` driven over TCP, with an fsynced log.

What it does differently from the PySyncObj engine, and why (measured in docs/performance.md):

* **Durable**: every group of entries is fdatasynced before a follower acknowledges it or
  the leader counts itself (:mod:`raftlog.native.wal`); PySyncObj never syncs its journal.
* **Cheap per item**: one asyncio loop owns the core: the server's own gRPC loop
  (``shared_loop``, the server's default: no thread hand-off per item; the log applies
  the committed entries right there) or a thread and uvloop of the engine's own. Whatever
  arrived in one loop pass becomes one flush: append messages to the followers first,
  then one write + fdatasync, then acknowledgements, then the committed entries to the
  sink. Peer messages are struct-packed frames over one long-lived TCP connection per
  direction, never pickled.
* **Authenticated peers**: a connection starts with a mutual challenge-response on
  HMAC-SHA256 of the cluster password (:mod:`raftlog.native.auth`; there is no mode without
  a password). Nothing on the wire is unpickled, so the password is about who may join,
  not code execution; the frames are not encrypted: run the Raft port on a private
  network (README). Inbound connections are bounded (:mod:`raftlog.native.conns`): a cap,
  and deadlines for the handshake, between frames and within a frame; the dialer sends
  a keepalive (an empty frame) when idle.

Members are named by peer address; snapshots use the same hooks, dump file and engine-meta
slot as the PySyncObj engine (:class:`raftlog.consensus.EngineSnapshots`), so the server's
snapshot store, restore and ``metaledger snapshot`` work unchanged. A follower that is
behind the leader's compacted log gets the dump file streamed in 1 MiB chunks.

This module holds the lifecycle (start, stop, the loop: shared or a thread of its own) and
the public API. At start the engine builds the loop pass (:class:`raftlog.native.flush.Flush`),
which builds and drives the engine's other parts, one object each: forwarding
(:mod:`raftlog.native.forwarding`), snapshots (:mod:`raftlog.native.snapshot_stream`) and
the peer transport (:mod:`raftlog.native.transport`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from raftlog.consensus import (
    REMOVED_QUIET_ELECTIONS,
    CommitSink,
    EngineSnapshots,
    EngineStatus,
    Member,
    ProposeCallback,
    claim_journal_dir,
)
from raftlog.errors import ProposeError, RaftLogError
from raftlog.health import Health
from raftlog.native.config import NativeConfig
from raftlog.native.core import RaftCore, Role, Timing
from raftlog.native.flush import Flush
from raftlog.native.messages import KIND_CONFIG, KIND_NORMAL, standalone_config
from raftlog.native.wal import RaftWal, WalState
from raftlog.wait import running_loop

log = logging.getLogger(__name__)


class NativeEngine:
    """The native Raft engine (:class:`raftlog.consensus.ConsensusEngine`). Thread-safe:
    the public methods hand their work to the engine's loop."""

    def __init__(self, config: NativeConfig) -> None:
        config.validate()
        self._config = config
        self._me = config.self_address
        self._by_address = {addr: nid for nid, addr in config.peers.items()}
        #: transient WAL faults (ENOSPC, EIO...): reported here, retried by the loop pass
        self.health = Health()
        self._core: RaftCore | None = None
        self._core_started = 0.0  # monotonic: when start() made the core
        self._wal: RaftWal | None = None
        self._sink: CommitSink | None = None
        self._snapshots: EngineSnapshots | None = None
        self._pass: Flush | None = None  # built on the loop, once the core is
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._loop_thread: int | None = None  # shared mode: the thread running our loop
        self._serve_task: asyncio.Task[None] | None = None

    @property
    def dump_file(self) -> str:
        """The current snapshot (a link the snapshot sink keeps); what lagging followers get."""
        return os.path.join(self._config.journal_dir, "dump.snap")

    def start(self, sink: CommitSink, snapshots: EngineSnapshots | None = None) -> None:
        cfg = self._config
        claim_journal_dir(cfg.journal_dir, "journal", "a PySyncObj journal", "pysyncobj")
        self._sink = sink
        self._snapshots = snapshots if cfg.snapshot_every_items > 0 else None
        wal, state = RaftWal.open(os.path.join(cfg.journal_dir, "wal"))
        self._wal = wal
        snap_index, snap_term = 0, 0
        voters = tuple(cfg.peers.values())
        learners: tuple[str, ...] = ()
        if self._snapshots is not None and os.path.exists(self.dump_file):
            meta = json.loads(self._snapshots.load(self.dump_file))
            snap_index, snap_term, voters = meta["index"], meta["term"], tuple(meta["voters"])
            learners = tuple(meta.get("learners", ()))
        if cfg.force_new_cluster:
            self._force_new_cluster(wal, state, snap_index, snap_term, voters)
        t = Timing(
            election_min_s=cfg.election_timeout_min_ms / 1000,
            election_max_s=cfg.election_timeout_max_ms / 1000,
            heartbeat_s=cfg.heartbeat_ms / 1000,
            step_down_s=cfg.leader_step_down_ms / 1000,
        )
        try:
            self._core = RaftCore(
                self._me,
                voters,
                term=state.term,
                vote=state.vote,
                entries=state.entries,
                snap_index=snap_index,
                snap_term=snap_term,
                commit=state.commit,
                timing=t,
                now=time.monotonic(),
                rng=random.Random(),
                learners=learners,
            )
            self._core_started = time.monotonic()
        except ValueError as exc:
            raise RaftLogError(
                f"{cfg.journal_dir}: the Raft log does not continue the snapshot "
                f"{self.dump_file} (index {snap_index}): {exc}"
            ) from None
        running = running_loop() if cfg.shared_loop else None
        if running is not None:
            try:
                self._start_on(running)
            except BaseException:
                wal.close()
                raise
            return
        self._thread = threading.Thread(target=self._run, name="raft", daemon=True)
        self._thread.start()
        self._started.wait(30)
        if self._start_error is not None:
            raise self._start_error

    def _force_new_cluster(
        self,
        wal: RaftWal,
        state: WalState,
        snap_index: int,
        snap_term: int,
        voters: tuple[str, ...],
    ) -> None:
        """Rewrite the log so that this member is the only voter (``state`` is updated)."""
        forced = standalone_config(
            self._me, voters, state.entries, snap_index, snap_term, state.term
        )
        if forced is None:
            log.warning("--force-new-cluster: already the only member; nothing to change")
            return
        kept = [e for e in state.entries if e.index > snap_index]
        wal.rewrite(state.term, state.vote, state.commit, [*kept, forced])
        state.entries = [*kept, forced]
        log.warning(
            "--force-new-cluster: this member is now the only voter (configuration entry %d; "
            "%d log entries after the snapshot at %d kept). Add the others back with member "
            "add, each from an empty data dir; restart without the flag",
            forced.index,
            len(kept),
            snap_index,
        )

    def _start_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Shared mode: listen now (so a taken port fails ``start``), serve on ``loop``."""
        host, _, port = self._me.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, int(port)), family=family)
        sock.setblocking(False)
        self._loop = loop
        self._loop_thread = threading.get_ident()
        loop_pass = self._build(loop)
        self._serve_task = loop.create_task(loop_pass.transport.listen(sock))
        loop.call_soon(loop_pass.deliver)  # what the log says was committed before a restart
        loop.call_soon(loop_pass.tick)
        self._started.set()

    def _build(self, loop: asyncio.AbstractEventLoop) -> Flush:
        """The loop pass and the parts it drives, on ``loop`` (the core and WAL are open)."""
        assert self._core is not None and self._wal is not None and self._sink is not None
        self._pass = Flush(
            self._config,
            loop,
            self._core,
            self._wal,
            self.health,
            self._sink,
            self._snapshots,
            self.dump_file,
            self._name,
        )
        return self._pass

    def _run(self) -> None:
        try:
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover
            loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        loop_pass = self._build(loop)
        try:
            loop.run_until_complete(loop_pass.transport.listen(None))
        except BaseException as exc:
            self._start_error = exc
            self._started.set()
            loop.close()
            return
        loop.call_soon(loop_pass.deliver)  # what the log says was committed before a restart
        loop.call_soon(loop_pass.tick)
        self._started.set()
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop_pass.shutdown())
            loop.close()

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or self._stopping:
            return
        self._stopping = True
        if self._pass is not None:
            self._pass.stop()
        if thread is None:  # shared mode
            if self._loop_thread == threading.get_ident() or not loop.is_running():
                self._stop_shared()
            else:  # from another thread: close on the loop, then the log
                done = threading.Event()

                def stop_there() -> None:
                    self._stop_shared()
                    done.set()

                loop.call_soon_threadsafe(stop_there)
                done.wait(10)
            self._closed()
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._closed()

    def _closed(self) -> None:
        """The loop no longer runs for this engine: close the log, forget the sink."""
        if self._wal is not None:
            self._wal.close()
        self._sink = None
        if self._pass is not None:
            self._pass.detach_sink()

    def _stop_shared(self) -> None:
        """Close what is ours at once; the cancelled tasks finish on the loop's next turns."""
        if self._serve_task is not None:
            self._serve_task.cancel()
        if self._pass is not None:
            self._pass.close()

    def _call(self, fn: Callable[..., None], *args: Any) -> bool:
        """``fn(*args)`` on the engine's loop, soon; False if it is not running."""
        loop = self._loop
        if loop is None or self._stopping:
            return False
        if self._loop_thread == threading.get_ident():
            loop.call_soon(fn, *args)  # shared mode, from the loop itself: no wake-up write
            return True
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            return False
        return True

    def _name(self, address: str) -> str:
        """The member's name (its node id) when this engine knows it (its peers at start,
        :meth:`name_member` since), else its address."""
        return self._by_address.get(address, address)

    def propose(self, data: bytes, callback: ProposeCallback) -> None:
        p = self._pass
        if p is None or not self._call(p.forwarding.propose, data, KIND_NORMAL, callback):
            callback(None, ProposeError("engine not started"))

    def add_member(self, address: str, callback: ProposeCallback) -> None:
        """Add a voting member (one change at a time; the new node must already run with
        the existing members as its peers)."""
        self._change(f"add {address}", callback)

    def remove_member(self, address: str, callback: ProposeCallback) -> None:
        self._change(f"remove {address}", callback)

    def add_learner(self, address: str, callback: ProposeCallback) -> None:
        self._change(f"learner {address}", callback)

    def promote_member(self, address: str, callback: ProposeCallback) -> None:
        self._change(f"promote {address}", callback)

    def _change(self, change: str, callback: ProposeCallback) -> None:
        p = self._pass
        if p is None or not self._call(
            p.forwarding.propose, change.encode(), KIND_CONFIG, callback
        ):
            callback(None, ProposeError("engine not started"))

    def transfer_leadership(self, address: str | None, callback: ProposeCallback) -> None:
        """Ask the leader to hand over to ``address`` (or the most caught-up follower)."""
        p = self._pass
        if p is None or not self._call(p.forwarding.transfer, address, callback):
            callback(None, ProposeError("engine not started"))

    def force_snapshot(self) -> None:
        if self._pass is not None:
            self._call(self._pass.snapshots.force)

    def read_index(self, callback: ProposeCallback) -> None:
        """A linearizable read index (ReadIndex, §6.4): ``callback(index, None)`` on the
        engine's thread once the leader confirmed ``index`` and this node has handed every
        entry up to it to the sink (so the sink's numbering at that moment covers every
        write acknowledged before the call); ``callback(None, err)`` with NotLeaderError
        (no leader, or it changed) or UnknownOutcomeError (no answer within
        ``wait_leader_ms``). Writes nothing to the log: works while the disks are full."""
        p = self._pass
        if p is None or not self._call(p.forwarding.read_index, callback, None):
            callback(None, ProposeError("engine not started"))

    def status(self) -> EngineStatus:
        core, cfg = self._core, self._config
        if core is None:
            return EngineStatus(cfg.node_id, "follower", 0, "", 0, 0, False, dict(cfg.peers))
        leader = core.leader
        has_quorum = core.role == Role.LEADER or bool(leader)
        return EngineStatus(
            node_id=cfg.node_id,
            role=core.status_role(),
            term=core.term,
            leader_id=self._name(leader) if leader else "",
            end_offset=core.last_index,
            commit_offset=core.commit,
            has_quorum=has_quorum,
            members={self._name(a): a for a in core.voters},
            removed=self._removed(core),
        )

    def _removed(self, core: RaftCore) -> bool:
        """:attr:`EngineStatus.removed`: quiet counted from this start at the earliest (a
        member restarted halfway through catching up hears from the leader again soon)."""
        now = time.monotonic()
        quiet_s = REMOVED_QUIET_ELECTIONS * core.timing.election_max_s
        return now - self._core_started >= quiet_s and core.removed(now, quiet_s)

    def term(self) -> int:
        core = self._core
        return core.term if core is not None else 0

    def members(self) -> list[Member]:
        core = self._core
        voters = core.voters if core is not None else self._config.peers.values()
        learners = core.learners if core is not None else ()
        names = self._by_address
        return [Member(a, names.get(a, "")) for a in sorted(voters)] + [
            Member(a, names.get(a, ""), is_learner=True) for a in learners
        ]

    def uncommitted(self) -> list[bytes]:
        core = self._core
        if core is None:
            return []
        try:
            start = core.delivered - core.snap_index
            return [e.data for e in core.log[start:] if e.kind == KIND_NORMAL]
        except Exception:  # read from another thread: best effort
            return []

    def name_member(self, node_id: str, address: str) -> None:
        self._by_address = {**self._by_address, address: node_id}

    def leader_address(self) -> str:
        core = self._core
        return core.leader if core is not None else ""

    def is_leader(self) -> bool:
        core = self._core
        return core is not None and core.role == Role.LEADER

    def is_learner(self) -> bool:
        core = self._core
        return core is not None and bool(core.learners) and core.me in core.learners
