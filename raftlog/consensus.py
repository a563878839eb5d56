"""The consensus engine interface: what the replicated log needs from Raft.

An engine orders opaque proposals (bytes) into a log and hands every committed
item, in log order, to one sink. It never interprets the bytes and never runs
state-machine code: the sink only enqueues (STYLE.md 4). PySyncObj is the
first implementation (:mod:`raftlog.pysyncobj_engine`); :class:`InMemoryEngine`
is a single-node stand-in for unit tests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from raftlog.errors import ProposeError

#: Receives every committed item in log order: (offset, term, data). Runs on the
#: engine's thread; must only enqueue, and must not raise.
CommitSink = Callable[[int, int, bytes], None]

#: Called once per proposal, on the engine's thread: (offset, None) when the item
#: was committed and handed to the sink, (None, error) when it was not.
ProposeCallback = Callable[[int | None, ProposeError | None], None]


class EngineSnapshots(Protocol):
    """Snapshot hooks an engine calls on its own thread (the replicated log implements them)."""

    def take(self, raft_index: int, engine_meta: bytes) -> None:
        """Snapshot the state as of the last item handed to the sink. Must not block."""

    def state(self) -> str:
        """'idle' | 'writing' | 'done' | 'failed' for the snapshot last asked for ('done' and
        'failed' are reported once, then 'idle')."""

    def load(self, path: str) -> bytes:
        """A snapshot file to install (received, or present at start); return its engine meta."""

    def engine_meta(self, path: str) -> bytes:
        """The engine meta stored in a snapshot file (its header only)."""


@dataclass(frozen=True)
class EngineStatus:
    node_id: str
    role: str  # "leader" | "follower" | "candidate"
    term: int
    leader_id: str  # "" when unknown
    end_offset: int  # last index in this node's log, committed or not
    commit_offset: int  # highest index known committed
    has_quorum: bool
    members: dict[str, str] = field(default_factory=dict)  # node id -> peer address


class ConsensusEngine(Protocol):
    """A Raft engine. All methods are thread-safe."""

    def start(self, sink: CommitSink, snapshots: EngineSnapshots | None = None) -> None:
        """Begin consensus; committed items go to ``sink`` from now on; with ``snapshots``
        the engine compacts its log behind snapshots and ships them to lagging followers.

        Raises ``ConfigError`` on a bad configuration, ``OSError`` if the peer port
        cannot be bound.
        """

    def propose(self, data: bytes, callback: ProposeCallback) -> None:
        """Ask for ``data`` to be appended. Never raises; the outcome goes to ``callback``."""

    def status(self) -> EngineStatus:
        """A consistent-enough snapshot of role, term, leader and offsets."""

    def term(self) -> int:
        """The current term (cheap; called on every response)."""

    def force_snapshot(self) -> None:
        """Take a snapshot soon, whatever the engine's own trigger says (engine thread)."""

    def uncommitted(self) -> list[bytes]:
        """Payloads in this node's log after the last item handed to the sink, in order
        (for reporting the end offset; may be a moment stale)."""

    def stop(self) -> None:
        """Stop consensus and release ports and files. Idempotent."""


class InMemoryEngine:
    """A single-node engine: every proposal commits at once. For unit tests only."""

    def __init__(self, node_id: str = "n0") -> None:
        self._node_id = node_id
        self._lock = threading.Lock()
        self._log: list[tuple[int, bytes]] = []
        self._sink: CommitSink | None = None

    def start(self, sink: CommitSink, snapshots: EngineSnapshots | None = None) -> None:
        self._sink = sink

    def propose(self, data: bytes, callback: ProposeCallback) -> None:
        with self._lock:
            offset = len(self._log) + 1
            self._log.append((offset, data))
            sink = self._sink
        if sink is None:
            callback(None, ProposeError("engine not started"))
            return
        sink(offset, 1, data)
        callback(offset, None)

    def status(self) -> EngineStatus:
        with self._lock:
            end = len(self._log)
        return EngineStatus(
            node_id=self._node_id,
            role="leader",
            term=1,
            leader_id=self._node_id,
            end_offset=end,
            commit_offset=end,
            has_quorum=True,
            members={self._node_id: "inmem"},
        )

    def term(self) -> int:
        return 1

    def force_snapshot(self) -> None:
        return None

    def uncommitted(self) -> list[bytes]:
        return []

    def stop(self) -> None:
        self._sink = None
