"""The state the native engine's parts share, and the few helpers they all use.

:class:`raftlog.native.engine.NativeEngine` is one object on one asyncio loop; its jobs
live in mixins over :class:`EngineBase`, one module each: the loop pass
(:mod:`raftlog.native.flush`), forwarding proposals and reads to the leader
(:mod:`raftlog.native.forwarding`), snapshot taking and streaming
(:mod:`raftlog.native.snapshot_stream`) and the peer transport
(:mod:`raftlog.native.transport`). Every field is set here, in one place; the methods one
part calls on another are declared here for the type checker.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import struct
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from raftlog.consensus import CommitSink, EngineSnapshots, ProposeCallback
from raftlog.health import Backoff, Health
from raftlog.native.auth import PeerKey
from raftlog.native.config import NativeConfig
from raftlog.native.conns import InboundConnections, RateLimitedLog
from raftlog.native.core import RaftCore
from raftlog.native.messages import Message
from raftlog.native.wal import RaftWal

#: a frame's length prefix (every peer frame, a snapshot chunk's included)
LEN = struct.Struct("<I")


class Peer:
    """The outbound connection to one peer (messages to it go here; its replies come back
    on its own outbound connection to us)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None
        self.snapshot_task: asyncio.Task[None] | None = None


class EngineBase:
    """The fields of one native engine (see the module docstring)."""

    def __init__(self, config: NativeConfig) -> None:
        config.validate()
        self._config = config
        self._me = config.self_address
        self._by_address = {addr: nid for nid, addr in config.peers.items()}
        self._core: RaftCore | None = None
        self._core_started = 0.0  # monotonic: when start() made the core
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._wal: RaftWal | None = None
        self._sink: CommitSink | None = None
        self._snapshots: EngineSnapshots | None = None
        self._server: asyncio.base_events.Server | None = None
        self._peers: dict[str, Peer] = {}
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

    def _name(self, address: str) -> str:
        """The member's name (its node id) when this engine knows it (its peers at start,
        :meth:`name_member` since), else its address."""
        return self._by_address.get(address, address)

    if TYPE_CHECKING:  # implemented by the parts (see the module docstring)

        def _send(self, to: str, m: Message) -> None: ...
        def _peer(self, address: str) -> Peer: ...
        def _close(self) -> list[asyncio.Task[None]]: ...
        def _propose(self, data: bytes, kind: int, callback: ProposeCallback) -> None: ...
        def _propose_local(self, data: bytes, kind: int, callback: ProposeCallback) -> None: ...
        def _read_index(self, callback: ProposeCallback, deadline: float | None) -> None: ...
        def _answer_reads(self) -> None: ...
        def _expire_reads(self, now: float) -> None: ...
        def _fail_forwards(self, leader: str, rids: Iterable[int]) -> None: ...
        def _on_propose(self, m: Message) -> None: ...
        def _on_propose_resp(self, m: Message) -> None: ...
        def _transfer(self, address: str | None, callback: ProposeCallback) -> None: ...
        def _force_snapshot(self) -> None: ...
        def _maybe_snapshot(self) -> None: ...
        def _poll_snapshot(self) -> None: ...
        def _start_snapshot_send(self, address: str) -> None: ...
        def _on_snapshot_chunk(self, m: Message) -> None: ...
        def _on_message(self, m: Message) -> None: ...
        async def _on_inbound(
            self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None: ...
        def _flush(self) -> None: ...
        def _write_out(self) -> None: ...
        def _deliver(self) -> None: ...
        def _tick(self) -> None: ...
