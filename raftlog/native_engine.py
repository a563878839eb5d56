"""The native consensus engine: :mod:`raftlog.raft` driven over TCP, with an fsynced log.

What it does differently from the PySyncObj engine, and why (``research/python-ceiling.md``):

* **Durable**: every group of entries is fdatasynced before a follower acknowledges it or
  the leader counts itself (:mod:`raftlog.raft_wal`); PySyncObj never syncs its journal.
* **Cheap per item**: one asyncio loop owns the core: the server's own gRPC loop
  (``shared_loop``, the server's default: no thread hand-off per item; the log applies
  the committed entries right there) or a thread and uvloop of the engine's own. Whatever
  arrived in one loop pass becomes one flush: append messages to the followers first,
  then one write + fdatasync, then acknowledgements, then the committed entries to the
  sink. Peer messages are struct-packed frames over one long-lived TCP connection per
  direction, never pickled.
* **Authenticated peers**: a connection starts with a mutual challenge-response on
  HMAC-SHA256 of the cluster password (:mod:`raftlog.peer_auth`; there is no mode without
  a password). Nothing on the wire is unpickled, so the password is about who may join,
  not code execution; the frames are not encrypted: run the Raft port on a private
  network (README). Inbound connections are bounded (:mod:`raftlog.peer_conns`): a cap,
  and deadlines for the handshake, between frames and within a frame; the dialer sends
  a keepalive (an empty frame) when idle.

Members are named by peer address; snapshots use the same hooks, dump file and engine-meta
slot as the PySyncObj engine (:class:`raftlog.consensus.EngineSnapshots`), so the server's
snapshot store, restore and ``metaledger snapshot`` work unchanged. A follower that is
behind the leader's compacted log gets the dump file streamed in 1 MiB chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from raftlog.consensus import (
    CommitSink,
    EngineConfig,
    EngineSnapshots,
    EngineStatus,
    ProposeCallback,
    claim_journal_dir,
)
from raftlog.errors import (
    ConfigError,
    NotLeaderError,
    ProposalDroppedError,
    ProposeError,
    RaftLogError,
    UnknownOutcomeError,
    UnsafeReconfigurationError,
)
from raftlog.health import Backoff, Health
from raftlog.peer_auth import PeerAuthError, PeerKey, accept, dial
from raftlog.peer_conns import FRAME, IDLE, InboundConnections, RateLimitedLog
from raftlog.raft import (
    KIND_CONFIG,
    KIND_NORMAL,
    ChangeRefused,
    Message,
    MsgType,
    NotLeader,
    RaftCore,
    Role,
    Timing,
    UnsafeChange,
    decode_message,
    encode_message,
    standalone_config,
)
from raftlog.raft_wal import RaftWal, WalState
from raftlog.wait import running_loop

log = logging.getLogger(__name__)

_LEN = struct.Struct("<I")
_MAX_FRAME = 64 * 1024 * 1024
_CHUNK = 1024 * 1024
_KEEPALIVE = _LEN.pack(0)  # an empty frame: keeps an idle authenticated connection open
_REJECT_NOT_LEADER = 1
_REJECT_REFUSED = 2
_REJECT_UNSAFE = 3  # the strict reconfiguration check refused a membership change
#: acks of new entries and votes held while the WAL cannot sync (the oldest beyond are
#: dropped); heartbeats are answered meanwhile, with the last index on disk
_MAX_HELD_ACKS = 4096


@dataclass(frozen=True)
class NativeConfig(EngineConfig):
    password_reason: ClassVar[str] = "a cluster password is required so that only members join"

    heartbeat_ms: int = 100
    tick_ms: int = 20
    #: entries kept in the log behind a snapshot, so that a follower a little behind
    #: catches up from the log rather than by a whole snapshot transfer
    snapshot_margin_items: int = 1000
    #: a proposal made while no leader is known waits this long for one
    wait_leader_ms: int = 5000
    #: run on the event loop that calls :meth:`NativeEngine.start` (the server's gRPC loop)
    #: instead of a thread and loop of its own: no hand-off between threads (and no GIL
    #: ping-pong) per consensus item, at the price of the log's fdatasync running on that
    #: loop. Without a running loop at start the engine takes its own thread anyway.
    shared_loop: bool = False
    #: etcd's ``--force-new-cluster``: at start, make this member the only voter (keeping
    #: its log, snapshot and applied data); others join again with member add
    force_new_cluster: bool = False
    #: an inbound peer connection that has not authenticated by then is closed
    peer_handshake_timeout_ms: int = 5000
    #: an authenticated inbound connection with no frame for this long is closed (members
    #: send heartbeats every heartbeat_ms, and a keepalive every quarter of this)
    peer_idle_timeout_ms: int = 30_000
    #: a frame that started must complete within this (a 1 MiB snapshot chunk included)
    peer_frame_timeout_ms: int = 30_000
    #: inbound peer connections at once (handshakes included); more are closed at once
    peer_max_connections: int = 64

    def validate(self) -> None:
        if not self.password:
            raise ConfigError(
                "password",
                "the Raft peer port always authenticates: a cluster password is required "
                "(loopback included)",
            )
        super().validate()
        for name in (
            "peer_handshake_timeout_ms",
            "peer_idle_timeout_ms",
            "peer_frame_timeout_ms",
            "peer_max_connections",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(name, f"must be > 0, not {getattr(self, name)}")
        if self.peer_idle_timeout_ms <= 2 * self.heartbeat_ms:
            raise ConfigError(
                "peer_idle_timeout_ms",
                f"must be more than twice heartbeat_ms ({self.heartbeat_ms}), "
                "or live connections are closed",
            )


def _peername(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"


class _Keepalive:
    """Writes an empty frame on an outbound peer connection every ``every_s`` (so the
    listener's idle timeout never closes a live connection that has nothing to say)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, writer: asyncio.StreamWriter, every_s: float
    ) -> None:
        self._loop, self._writer, self._every_s = loop, writer, every_s
        self._handle = loop.call_later(every_s, self._beat)

    def _beat(self) -> None:
        if self._writer.is_closing():
            return
        self._writer.write(_KEEPALIVE)
        self._handle = self._loop.call_later(self._every_s, self._beat)

    def cancel(self) -> None:
        self._handle.cancel()


class _Peer:
    """The outbound connection to one peer (messages to it go here; its replies come back
    on its own outbound connection to us)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None
        self.snapshot_task: asyncio.Task[None] | None = None


class NativeEngine:
    def __init__(self, config: NativeConfig) -> None:
        config.validate()
        self._config = config
        self._me = config.self_address
        self._by_address = {addr: nid for nid, addr in config.peers.items()}
        self._resolver: Callable[[str], str | None] | None = None
        self._core: RaftCore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._wal: RaftWal | None = None
        self._sink: CommitSink | None = None
        self._snapshots: EngineSnapshots | None = None
        self._server: asyncio.base_events.Server | None = None
        self._peers: dict[str, _Peer] = {}
        self._outbuf: dict[str, list[bytes]] = {}  # frames per peer, written once per flush
        self._inbound: set[asyncio.StreamWriter] = set()
        self._key = PeerKey(config.password or "")  # validate() refused an empty one
        self._inbound_conns = InboundConnections(
            config.peer_max_connections,
            config.peer_handshake_timeout_ms / 1000,
            config.peer_idle_timeout_ms / 1000,
            config.peer_frame_timeout_ms / 1000,
        )
        self._sweeper: asyncio.TimerHandle | None = None
        self._sweep_due = 0.0  # when the sweeper was meant to run (its lateness: a stall)
        self._dial_warn = RateLimitedLog(60.0)  # our dials that the other end refused
        self._flush_scheduled = False
        self._in_flush = False
        #: transient WAL faults (ENOSPC, EIO...): reported here, retried by _flush
        self.health = Health()
        self._wal_backoff = Backoff()
        self._waiting: dict[int, tuple[int, ProposeCallback]] = {}
        self._forwards: dict[int, tuple[ProposeCallback, float]] = {}
        self._forwarding: dict[str, list[int]] = {}  # forwards queued per leader, this flush
        self._queued: list[tuple[bytes, int, ProposeCallback, float]] = []
        # linearizable reads (ReadIndex, §6.4): asked of the core (read id -> callback,
        # deadline), waiting for a leader, and answered but not yet delivered up to
        self._reads: dict[int, tuple[ProposeCallback, float]] = {}
        self._reads_queued: list[tuple[ProposeCallback, float]] = []
        self._reads_ready: list[tuple[int, ProposeCallback, float]] = []
        self._rids = itertools.count(1)
        self._transfer_cb: ProposeCallback | None = None
        self._snap_pending: int | None = None
        self._snap_forced = False
        self._incoming: tuple[str, Any, int] | None = None  # (leader, file, next offset)
        self._stopping = False
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._loop_thread: int | None = None  # shared mode: the thread running our loop
        self._serve_task: asyncio.Task[None] | None = None

    @property
    def dump_file(self) -> str:
        """The current snapshot (a link the snapshot sink keeps); what lagging followers get."""
        return os.path.join(self._config.journal_dir, "dump.snap")

    # ------------------------------------------------------------------ lifecycle
    def start(self, sink: CommitSink, snapshots: EngineSnapshots | None = None) -> None:
        cfg = self._config
        claim_journal_dir(cfg.journal_dir, "journal", "a PySyncObj journal", "pysyncobj")
        self._sink = sink
        self._snapshots = snapshots if cfg.snapshot_every_items > 0 else None
        wal, state = RaftWal.open(os.path.join(cfg.journal_dir, "wal"))
        self._wal = wal
        snap_index, snap_term = 0, 0
        voters = tuple(cfg.peers.values())
        if self._snapshots is not None and os.path.exists(self.dump_file):
            meta = json.loads(self._snapshots.load(self.dump_file))
            snap_index, snap_term, voters = meta["index"], meta["term"], tuple(meta["voters"])
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
            )
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

        async def serve() -> None:
            self._server = await asyncio.start_server(self._on_inbound, sock=sock)

        self._serve_task = loop.create_task(serve())
        loop.call_soon(self._deliver)  # what the log says was committed before a restart
        loop.call_soon(self._tick)
        self._started.set()

    def _run(self) -> None:
        try:
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover
            loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            host, _, port = self._me.rpartition(":")
            self._server = loop.run_until_complete(
                asyncio.start_server(self._on_inbound, host, int(port), reuse_address=True)
            )
        except BaseException as exc:
            self._start_error = exc
            self._started.set()
            loop.close()
            return
        loop.call_soon(self._deliver)  # what the log says was committed before a restart
        loop.call_soon(self._tick)
        self._started.set()
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(self._shutdown())
            loop.close()

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or self._stopping:
            return
        if thread is None:  # shared mode
            self._stopping = True
            if self._loop_thread == threading.get_ident() or not loop.is_running():
                self._stop_shared()
            else:  # from another thread: close on the loop, then the log
                done = threading.Event()

                def stop_there() -> None:
                    self._stop_shared()
                    done.set()

                loop.call_soon_threadsafe(stop_there)
                done.wait(10)
            if self._wal is not None:
                self._wal.close()
            self._sink = None
            return
        self._stopping = True
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if self._wal is not None:
            self._wal.close()
        self._sink = None

    def _stop_shared(self) -> None:
        """Close what is ours at once; the cancelled tasks finish on the loop's next turns."""
        if self._serve_task is not None:
            self._serve_task.cancel()
        self._close()

    def _close(self) -> list[asyncio.Task[None]]:
        """Close the listener and every connection, cancel the peer tasks; return them."""
        if self._server is not None:
            self._server.close()
        tasks = []
        for peer in self._peers.values():
            for task in (peer.task, peer.snapshot_task):
                if task is not None:
                    task.cancel()
                    tasks.append(task)
            if peer.writer is not None:
                peer.writer.close()
        for w in list(self._inbound):
            w.close()
        return tasks

    async def _shutdown(self) -> None:
        await asyncio.gather(*self._close(), return_exceptions=True)

    # ------------------------------------------------------------------ public API
    def _call(self, fn: Callable[..., None], *args: Any) -> bool:
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

    def propose(self, data: bytes, callback: ProposeCallback) -> None:
        if not self._call(self._propose, data, KIND_NORMAL, callback):
            callback(None, ProposeError("engine not started"))

    def add_member(self, address: str, callback: ProposeCallback) -> None:
        """Add a voting member (one change at a time; the new node must already run with
        the existing members as its peers)."""
        if not self._call(self._propose, f"add {address}".encode(), KIND_CONFIG, callback):
            callback(None, ProposeError("engine not started"))

    def remove_member(self, address: str, callback: ProposeCallback) -> None:
        if not self._call(self._propose, f"remove {address}".encode(), KIND_CONFIG, callback):
            callback(None, ProposeError("engine not started"))

    def transfer_leadership(self, address: str | None, callback: ProposeCallback) -> None:
        """Ask the leader to hand over to ``address`` (or the most caught-up follower)."""
        if not self._call(self._transfer, address, callback):
            callback(None, ProposeError("engine not started"))

    def force_snapshot(self) -> None:
        self._call(self._force_snapshot)

    def read_index(self, callback: ProposeCallback) -> None:
        """A linearizable read index (ReadIndex, §6.4): ``callback(index, None)`` on the
        engine's thread once the leader confirmed ``index`` and this node has handed every
        entry up to it to the sink (so the sink's numbering at that moment covers every
        write acknowledged before the call); ``callback(None, err)`` with NotLeaderError
        (no leader, or it changed) or UnknownOutcomeError (no answer within
        ``wait_leader_ms``). Writes nothing to the log: works while the disks are full."""
        if not self._call(self._read_index, callback, None):
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
        )

    def term(self) -> int:
        core = self._core
        return core.term if core is not None else 0

    def members(self) -> list[str]:
        core = self._core
        return sorted(core.voters) if core is not None else sorted(self._config.peers.values())

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

    def set_name_resolver(self, resolver: Callable[[str], str | None]) -> None:
        self._resolver = resolver

    def leader_address(self) -> str:
        core = self._core
        return core.leader if core is not None else ""

    def is_leader(self) -> bool:
        core = self._core
        return core is not None and core.role == Role.LEADER

    def _name(self, address: str) -> str:
        name = self._by_address.get(address)
        if name is None and self._resolver is not None:
            name = self._resolver(address)
        return name or address

    # ------------------------------------------------------------------ engine thread
    @property
    def core(self) -> RaftCore:
        assert self._core is not None
        return self._core

    def _kick(self) -> None:
        if self._stopping:
            return
        if not self._flush_scheduled and not self._in_flush and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _propose(self, data: bytes, kind: int, callback: ProposeCallback) -> None:
        core = self.core
        if core.role == Role.LEADER:
            self._propose_local(data, kind, callback)
        elif core.leader:
            self._forward(data, kind, callback)
        else:
            wait = self._config.wait_leader_ms / 1000
            self._queued.append((data, kind, callback, time.monotonic() + wait))

    def _propose_here(
        self, data: bytes, kind: int, callback: ProposeCallback | None
    ) -> tuple[int, int]:
        """Append on this leader; (index, term), or raises ProposeError. With ``callback``,
        it is answered when the entry commits (or is replaced)."""
        core = self.core
        try:
            if kind == KIND_CONFIG:
                op, _, address = data.decode().partition(" ")
                index, term = core.propose_change(op, address, time.monotonic())
            else:
                index, term = core.propose(data, kind)
        except NotLeader:
            raise NotLeaderError("no stable leader", self._name(core.leader)) from None
        except UnsafeChange as exc:
            raise UnsafeReconfigurationError(str(exc)) from None
        except ChangeRefused as exc:
            raise ProposeError(f"membership change refused: {exc}") from None
        if callback is not None:
            self._waiting[index] = (term, callback)
        self._kick()
        return index, term

    def _propose_local(self, data: bytes, kind: int, callback: ProposeCallback) -> None:
        try:
            self._propose_here(data, kind, callback)
        except ProposeError as err:
            callback(None, err)

    def _forward(self, data: bytes, kind: int, callback: ProposeCallback) -> None:
        rid = next(self._rids)
        self._forwards[rid] = (callback, time.monotonic() + self._config.wait_leader_ms / 1000)
        m = Message(MsgType.PROPOSE, self.core.term, offset=rid, kind=kind, data=data)
        self._send(self.core.leader, m)
        self._forwarding.setdefault(self.core.leader, []).append(rid)

    def _on_propose(self, m: Message) -> None:
        """Leader: a follower forwards a proposal; the follower waits for the commit."""
        core = self.core
        try:
            index, term = self._propose_here(m.data, m.kind, None)
        except ProposeError as err:
            code = _REJECT_NOT_LEADER if isinstance(err, NotLeaderError) else _REJECT_REFUSED
            if isinstance(err, UnsafeReconfigurationError):
                code = _REJECT_UNSAFE
            resp = Message(
                MsgType.PROPOSE_RESP,
                core.term,
                offset=m.offset,
                reject=True,
                hint=code,
                data=str(err).encode(),
            )
        else:
            resp = Message(
                MsgType.PROPOSE_RESP, core.term, offset=m.offset, index=index, log_term=term
            )
        self._send(m.src, resp)

    def _on_propose_resp(self, m: Message) -> None:
        entry = self._forwards.pop(m.offset, None)
        if entry is None:
            return
        callback = entry[0]
        if m.reject:
            reason = m.data.decode(errors="replace")
            if m.hint == _REJECT_NOT_LEADER:
                callback(None, NotLeaderError(reason, self._name(self.core.leader)))
            elif m.hint == _REJECT_UNSAFE:
                callback(None, UnsafeReconfigurationError(reason))
            else:
                callback(None, ProposeError(reason))
            return
        core = self.core
        if m.index <= core.delivered:
            term = core.term_at(m.index)
            if term is None:
                callback(None, UnknownOutcomeError("the entry is inside a newer snapshot"))
            elif term == m.log_term:
                callback(m.index, None)
            else:
                callback(None, ProposalDroppedError("the entry was replaced by a new leader's log"))
            return
        self._waiting[m.index] = (m.log_term, callback)

    def _transfer(self, address: str | None, callback: ProposeCallback) -> None:
        core = self.core
        try:
            core.transfer(address, time.monotonic())
        except NotLeader:
            callback(None, NotLeaderError("only the leader can transfer leadership"))
            return
        except ChangeRefused as exc:
            callback(None, ProposeError(f"leadership transfer refused: {exc}"))
            return
        self._transfer_cb = callback
        self._kick()

    def _read_index(self, callback: ProposeCallback, deadline: float | None) -> None:
        now = time.monotonic()
        if deadline is None:
            deadline = now + self._config.wait_leader_ms / 1000
        rid = next(self._rids)
        try:
            self.core.read_index(rid)
        except NotLeader:
            self._reads_queued.append((callback, deadline))  # until a leader is known
            return
        self._reads[rid] = (callback, deadline)
        self._kick()

    def _answer_reads(self) -> None:
        """Hand out the read indexes the core answered, once delivered up to them."""
        core = self.core
        if core.read_states:
            states, core.read_states = core.read_states, []
            for rid, index in states:
                entry = self._reads.pop(rid, None)
                if entry is None:
                    continue
                if index == 0:
                    leader = self._name(core.leader)
                    entry[0](None, NotLeaderError("the leader changed under the read", leader))
                else:
                    self._reads_ready.append((index, *entry))
        if self._reads_ready:
            ready = [r for r in self._reads_ready if r[0] <= core.delivered]
            if ready:
                self._reads_ready = [r for r in self._reads_ready if r[0] > core.delivered]
                for index, callback, _ in ready:
                    callback(index, None)

    def _force_snapshot(self) -> None:
        self._snap_forced = True
        self._maybe_snapshot()

    # ------------------------------------------------------------------ the flush
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

    def _expire_reads(self, now: float) -> None:
        for rid, (callback, deadline) in list(self._reads.items()):
            if deadline <= now:
                del self._reads[rid]
                callback(None, UnknownOutcomeError("the read index was not confirmed in time"))
        for callback, _ in [r for r in self._reads_queued if r[1] <= now]:
            callback(None, NotLeaderError("no leader elected in time"))
        self._reads_queued = [r for r in self._reads_queued if r[1] > now]
        for _, callback, _ in [r for r in self._reads_ready if r[2] <= now]:
            callback(None, UnknownOutcomeError("this node did not catch up with the read index"))
        self._reads_ready = [r for r in self._reads_ready if r[2] > now]

    # ------------------------------------------------------------------ snapshots
    def _maybe_snapshot(self) -> None:
        core, snapshots = self.core, self._snapshots
        if snapshots is None or self._snap_pending is not None:
            return
        since = core.delivered - core.snap_index
        every = self._config.snapshot_every_items
        if since <= 0 or not (self._snap_forced or since >= every + self._margin()):
            return
        self._snap_forced = False
        index = core.delivered
        meta = {"index": index, "term": core.term_at(index), "voters": list(core.config_at(index))}
        self._snap_pending = index
        snapshots.take(index, json.dumps(meta).encode())

    def _margin(self) -> int:
        return min(self._config.snapshot_margin_items, self._config.snapshot_every_items)

    def _poll_snapshot(self) -> None:
        snapshots, index = self._snapshots, self._snap_pending
        if snapshots is None or index is None:
            return
        state = snapshots.state()
        if state == "done":
            self._snap_pending = None
            core = self.core
            keep_from = max(core.snap_index, index - self._margin())
            core.compact(keep_from)
            assert self._wal is not None
            try:
                self._wal.rewrite(core.term, core.vote, core.commit, core.log)
            except OSError as exc:  # the old file stays the log (a superset): next time
                log.warning("raft log not compacted behind the snapshot at %d: %s", index, exc)
                return
            log.info("raft log compacted behind the snapshot at index %d", index)
        elif state == "failed":
            self._snap_pending = None

    def _start_snapshot_send(self, address: str) -> None:
        peer = self._peer(address)
        if peer.snapshot_task is not None and not peer.snapshot_task.done():
            return
        assert self._loop is not None
        peer.snapshot_task = self._loop.create_task(self._send_snapshot(peer))

    async def _send_snapshot(self, peer: _Peer) -> None:
        core, snapshots = self.core, self._snapshots
        ok = False
        link = os.path.join(self._config.journal_dir, f"sending-{os.getpid()}-{id(peer)}.snap")
        try:
            if snapshots is None or not os.path.exists(self.dump_file):
                log.error("%s needs a snapshot, but this node has none", peer.address)
                return
            with contextlib.suppress(FileNotFoundError):
                os.unlink(link)
            os.link(self.dump_file, link)  # a later snapshot may replace the dump meanwhile
            meta = json.loads(snapshots.engine_meta(link))
            size = os.path.getsize(link)
            log.info(
                "sending the snapshot at index %d (%.1f MB) to %s",
                meta["index"],
                size / 1e6,
                peer.address,
            )
            started = time.monotonic()
            reported = 0.0
            with open(link, "rb") as f:
                offset = 0
                while True:
                    chunk = f.read(_CHUNK)
                    last = f.tell() >= size
                    writer = peer.writer
                    if writer is None or core.role != Role.LEADER:
                        return
                    m = Message(
                        MsgType.SNAPSHOT,
                        core.term,
                        index=meta["index"],
                        log_term=meta["term"],
                        offset=offset,
                        flag=last,
                        data=chunk,
                    )
                    payload = encode_message(m)
                    writer.write(_LEN.pack(len(payload)) + payload)
                    await writer.drain()
                    offset += len(chunk)
                    if size and offset / size - reported >= 0.25:
                        reported = offset / size
                        log.info("snapshot to %s: %.0f%%", peer.address, 100 * reported)
                    if last:
                        break
            ok = True
            log.info("snapshot sent to %s in %.1fs", peer.address, time.monotonic() - started)
        except (OSError, ConnectionError, ValueError) as exc:
            log.warning("sending the snapshot to %s failed: %s", peer.address, exc)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(link)
            if not ok:
                core.snapshot_sent(peer.address, False, time.monotonic())

    def _on_snapshot_chunk(self, m: Message) -> None:
        core, snapshots = self.core, self._snapshots
        if m.term != core.term or core.role != Role.FOLLOWER:
            return
        tmp = self.dump_file + ".incoming"
        incoming = self._incoming
        if m.offset == 0:
            if incoming is not None:
                incoming[1].close()
            if snapshots is None:
                log.error("the leader sent a snapshot, but snapshots are off here")
                self._send(m.src, Message(MsgType.SNAPSHOT_RESP, core.term, reject=True))
                return
            self._incoming = incoming = (m.src, open(tmp, "wb"), 0)
            log.info("receiving the leader's snapshot at index %d", m.index)
        if incoming is None or incoming[0] != m.src or incoming[2] != m.offset:
            return  # a chunk of a transfer that was restarted or abandoned
        f = incoming[1]
        f.write(m.data)
        self._incoming = (m.src, f, m.offset + len(m.data))
        if not m.flag:
            return
        self._incoming = None
        f.flush()
        os.fsync(f.fileno())
        f.close()
        if m.index <= core.commit:
            os.unlink(tmp)
            self._send(m.src, Message(MsgType.SNAPSHOT_RESP, core.term, index=core.commit))
            return
        assert snapshots is not None
        os.replace(tmp, self.dump_file)
        meta = json.loads(snapshots.load(self.dump_file))
        for index in [i for i in self._waiting if i <= meta["index"]]:
            _, callback = self._waiting.pop(index)
            callback(None, UnknownOutcomeError("the entry is inside the leader's snapshot"))
        core.restore(meta["index"], meta["term"], meta["voters"])
        assert self._wal is not None
        self._wal.rewrite(core.term, core.vote, core.commit, core.log)
        log.info("installed the leader's snapshot at index %d", meta["index"])
        self._send(m.src, Message(MsgType.SNAPSHOT_RESP, core.term, index=meta["index"]))

    # ------------------------------------------------------------------ transport
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

    async def _on_inbound(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns = self._inbound_conns
        slot = conns.open(writer.transport.abort, _peername(writer))
        if slot is None:  # peer_max_connections reached (warned, rate-limited)
            writer.transport.abort()
            return
        self._inbound.add(writer)
        self._ensure_sweeper()
        address = "?"
        try:
            try:
                address = await accept(reader, writer, self._key)
            except PeerAuthError as exc:
                if exc.address:
                    conns.warn.warning(
                        "bad-password",
                        "refused a Raft connection claiming to be %s: bad password",
                        exc.address,
                    )
                else:
                    conns.warn.warning(
                        "bad-handshake",
                        "refused a Raft connection from %s: %s",
                        _peername(writer),
                        exc,
                    )
                return
            clock, idle_s, frame_s = conns.clock, conns.idle_s, conns.frame_s
            slot.waiting_for = IDLE
            slot.deadline = clock() + idle_s
            while True:
                n = _LEN.unpack(await reader.readexactly(4))[0]
                if n > _MAX_FRAME:
                    log.warning("%s sent a %d-byte frame; closing", address, n)
                    return
                if n:  # 0: a keepalive
                    slot.waiting_for = FRAME
                    slot.deadline = clock() + frame_s
                    m = decode_message(await reader.readexactly(n))
                    m.src = address
                    self._on_message(m)
                    slot.waiting_for = IDLE
                slot.deadline = clock() + idle_s
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except ValueError as exc:
            log.warning("bad message from %s on a Raft connection: %s", address, exc)
        finally:
            conns.close(slot)
            self._inbound.discard(writer)
            writer.close()

    def _ensure_sweeper(self) -> None:
        """While inbound connections are open, close those past their deadline."""
        if self._sweeper is None and self._loop is not None and not self._stopping:
            conns = self._inbound_conns
            interval = conns.sweep_interval_s
            self._sweep_due = conns.clock() + interval
            self._sweeper = self._loop.call_later(interval, self._sweep_inbound)

    def _sweep_inbound(self) -> None:
        self._sweeper = None
        if self._stopping:
            return
        conns = self._inbound_conns
        # late (this process was stopped, or its loop blocked): that time is not the
        # peers' silence, their frames wait unread in the socket buffers
        conns.sweep(late_s=max(0.0, conns.clock() - self._sweep_due))
        if len(self._inbound_conns):
            self._ensure_sweeper()

    def _peer(self, address: str) -> _Peer:
        peer = self._peers.get(address)
        if peer is None:
            peer = self._peers[address] = _Peer(address)
        if (peer.task is None or peer.task.done()) and not self._stopping:
            assert self._loop is not None
            peer.task = self._loop.create_task(self._connect(peer))
        return peer

    async def _connect(self, peer: _Peer) -> None:
        host, _, port = peer.address.rpartition(":")
        delay = 0.05
        handshake_s = self._config.peer_handshake_timeout_ms / 1000
        keepalive_s = self._config.peer_idle_timeout_ms / 4000
        loop = asyncio.get_running_loop()
        while not self._stopping:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, int(port)), 2.0
                )
            except (OSError, TimeoutError):
                await asyncio.sleep(delay)
                delay = min(1.0, delay * 2)
                continue
            try:
                await asyncio.wait_for(dial(reader, writer, self._key, self._me), handshake_s)
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                peer.writer = writer
                delay = 0.05
                beat = _Keepalive(loop, writer, keepalive_s)
                try:
                    await reader.read(1)  # the listener never writes after its proof: EOF
                finally:
                    beat.cancel()
            except PeerAuthError as exc:
                self._dial_warn.warning(
                    peer.address, "the Raft port of %s failed the handshake: %s", peer.address, exc
                )
                delay = 1.0
            except asyncio.IncompleteReadError:
                self._dial_warn.warning(
                    peer.address,
                    "%s closed the Raft connection during the handshake (a different cluster "
                    "password, or its peer_max_connections reached?)",
                    peer.address,
                )
                delay = 1.0
            except (OSError, TimeoutError):
                pass
            finally:
                peer.writer = None
                writer.close()
            if self._stopping or (
                self._core is not None
                and peer.address not in self._core.voters
                and peer.address != self._core.leader
            ):
                return  # no longer a member: stop redialling
            await asyncio.sleep(delay)

    def _send(self, to: str, m: Message) -> None:
        """Queue a message; the flush writes each peer's messages with one write (one
        send(2) per peer per flush, not per message)."""
        if to == self._me or not to:
            return
        payload = encode_message(m)
        frames = self._outbuf.get(to)
        if frames is None:
            self._outbuf[to] = [_LEN.pack(len(payload)), payload]
            self._kick()
        else:
            frames += (_LEN.pack(len(payload)), payload)

    def _fail_forwards(self, leader: str, rids: Iterable[int]) -> None:
        """Proposals forwarded to ``leader`` while this node has no connection to it (it
        is reconnecting: the leader was just elected, restarted or thawed) are lost with
        the frame: answer them now with "not leader" (the client retries) rather than at
        the forward deadline, past the client's own."""
        for rid in rids:
            entry = self._forwards.pop(rid, None)
            if entry is not None:
                name = self._name(leader)
                entry[0](None, NotLeaderError(f"no connection to the leader {name} yet", name))

    def _write_out(self) -> None:
        if not self._outbuf:
            return
        out, self._outbuf = self._outbuf, {}
        forwarded, self._forwarding = self._forwarding, {}
        for to, frames in out.items():
            writer = self._peer(to).writer
            if writer is None:  # not connected: Raft retries (heartbeats, resends)
                self._fail_forwards(to, forwarded.get(to, ()))
                continue
            writer.write(b"".join(frames))
            transport = writer.transport
            if transport.get_write_buffer_size() > _MAX_FRAME:
                log.warning("%s does not read its Raft messages; reconnecting", to)
                transport.abort()
