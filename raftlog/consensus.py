"""The consensus engine interface: what the replicated log needs from Raft.

An engine orders opaque proposals (bytes) into a log and hands every committed
item, in log order, to one sink. It never interprets the bytes and never runs
state-machine code: the sink only enqueues (consensus apart from apply, as etcd-io/raft's
``Ready`` hands committed entries to the application). PySyncObj is the
first implementation (:mod:`raftlog.pysyncobj_engine`), the native engine
(:mod:`raftlog.native`) the default; :class:`InMemoryEngine`, beside the interface, is a
single-node stand-in for unit tests.

Membership is part of the interface: members are named by their Raft peer address
("host:port"); an engine knows its peers' names (node ids) from its configuration and
learns others' through :meth:`ConsensusEngine.name_member` (the caller owns the names:
the engine never asks it).
"""

from __future__ import annotations

import ipaddress
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from raftlog.errors import ConfigError, ProposeError
from snapshots import makedirs_durable

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

    def verify(self, path: str) -> str | None:
        """Check a whole snapshot file as a follower's install does (CRCs, checksums);
        None when it verifies, else what is wrong (naming the file and the byte). Blocks
        (reads the file): call it off the event loop."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def claim_journal_dir(journal_dir: str, foreign: str, what: str, engine: str) -> None:
    """Create ``journal_dir``; refuse it when it holds ``foreign`` (another engine's log):
    the two engines' logs are not interchangeable."""
    makedirs_durable(journal_dir)
    if os.path.exists(os.path.join(journal_dir, foreign)):
        raise ConfigError(
            "consensus",
            f"{journal_dir} holds {what}: this data dir was written by the {engine} engine "
            f"(start it with --consensus {engine})",
        )


@dataclass(frozen=True)
class EngineConfig:
    """What every engine needs: who this node is, its peers' Raft ports, where its log
    lives, the cluster password and the election timing."""

    #: why a non-loopback Raft port needs a password (each engine says it its way)
    password_reason: ClassVar[str] = "a cluster password is required"

    node_id: str
    peers: dict[str, str]  # node id -> "host:port" of its Raft port, including this node
    journal_dir: str
    password: str | None = None
    election_timeout_min_ms: int = 1000
    election_timeout_max_ms: int = 2000
    leader_step_down_ms: int = 2000
    snapshot_every_items: int = 0  # 0 = never: the engine's log is then never compacted

    @property
    def self_address(self) -> str:
        return self.peers[self.node_id]

    def validate(self) -> None:
        if not self.node_id:
            raise ConfigError("node_id", "must not be empty")
        if self.node_id not in self.peers:
            raise ConfigError("peers", f"must include this node {self.node_id!r}")
        for nid, addr in self.peers.items():
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError("peers", f"{nid}={addr!r} is not host:port")
        if len(set(self.peers.values())) != len(self.peers):
            raise ConfigError("peers", "two members share one address")
        host = self.self_address.rpartition(":")[0]
        if not self.password and not is_loopback(host):
            raise ConfigError(
                "password",
                f"the Raft port {self.self_address} is not loopback: {self.password_reason}",
            )
        if not 0 < self.election_timeout_min_ms < self.election_timeout_max_ms:
            raise ConfigError(
                "election_timeout_min_ms", "must be > 0 and < election_timeout_max_ms"
            )
        if self.leader_step_down_ms <= 0:
            raise ConfigError("leader_step_down_ms", "must be > 0")


#: How many maximum election timeouts a removed member waits without a word from a leader
#: before it says it was removed (a new leader, elected meanwhile, would have written to a
#: member still catching up).
REMOVED_QUIET_ELECTIONS = 2


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
    #: this member was removed from the cluster (etcd's ErrMemberRemoved): the newest
    #: configuration it holds is committed and leaves it out, and no leader has written to
    #: it for :data:`REMOVED_QUIET_ELECTIONS` election timeouts (the native engine only)
    removed: bool = False


@dataclass(frozen=True, slots=True)
class Member:
    """One member: its Raft peer address, and its name (node id) when the engine knows it
    (its peers at start, :meth:`ConsensusEngine.name_member` since), else ""; a learner
    (etcd 3.4's non-voting member) gets the log but does not vote."""

    address: str
    name: str = ""
    is_learner: bool = False


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

    # ------------------------------------------------------------------ membership
    def members(self) -> list[Member]:
        """The members of the current configuration (this node included), by address:
        the voters, then the learners."""

    def add_member(self, address: str, callback: ProposeCallback) -> None:
        """Add a voting member (one change at a time; the new node must already run with
        the existing members as its peers). Never raises; the outcome goes to ``callback``
        (a ``ProposeError`` while another change is in progress, an
        ``UnsafeReconfigurationError`` when too few members run)."""

    def remove_member(self, address: str, callback: ProposeCallback) -> None:
        """Remove a member (a voter or a learner); as :meth:`add_member`."""

    def add_learner(self, address: str, callback: ProposeCallback) -> None:
        """Add a non-voting member (a learner: it gets the log and snapshots, and counts for
        no quorum); as :meth:`add_member`. An engine without learners refuses it with a
        ``ProposeError``."""

    def promote_member(self, address: str, callback: ProposeCallback) -> None:
        """Make a learner a voter: ``LearnerNotReadyError`` while its log is behind the
        leader's; otherwise as :meth:`add_member`."""

    def transfer_leadership(self, address: str | None, callback: ProposeCallback) -> None:
        """Ask the leader to hand over to ``address`` (None: the most caught-up follower);
        ``callback`` once it has (or refused)."""

    def leader_address(self) -> str:
        """The leader's peer address as this node knows it ("" if none)."""

    def is_leader(self) -> bool:
        """Whether this node leads now."""

    def is_learner(self) -> bool:
        """Whether this node is a learner (a non-voting member) now (cheap: per request)."""

    def name_member(self, node_id: str, address: str) -> None:
        """Learn a member's name (from wherever the caller keeps it), for status, leader
        ids and :meth:`members`."""


class InMemoryEngine:
    """A single-node engine: every proposal commits at once. For unit tests only.

    Membership changes take effect at once (no other member runs: a member added here is
    only a name in the configuration, and this node stays the leader); one that would
    leave no member, or hand leadership to nobody running, is refused."""

    def __init__(self, node_id: str = "n0", address: str = "inmem") -> None:
        self._node_id = node_id
        self._address = address
        self._lock = threading.Lock()
        self._log: list[tuple[int, bytes]] = []
        self._sink: CommitSink | None = None
        self._members: dict[str, str] = {address: node_id}  # address -> name ("" unknown)

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
            members={name or address: address for address, name in self._members.items()},
        )

    def term(self) -> int:
        return 1

    def force_snapshot(self) -> None:
        return None

    def uncommitted(self) -> list[bytes]:
        return []

    def stop(self) -> None:
        self._sink = None

    def members(self) -> list[Member]:
        with self._lock:
            return [Member(a, n) for a, n in sorted(self._members.items())]

    def add_member(self, address: str, callback: ProposeCallback) -> None:
        self._change(address, callback, add=True)

    def remove_member(self, address: str, callback: ProposeCallback) -> None:
        self._change(address, callback, add=False)

    def add_learner(self, address: str, callback: ProposeCallback) -> None:
        callback(None, ProposeError("learners need the native Raft engine"))

    def promote_member(self, address: str, callback: ProposeCallback) -> None:
        callback(None, ProposeError("learners need the native Raft engine"))

    def _change(self, address: str, callback: ProposeCallback, add: bool) -> None:
        with self._lock:
            refused = ""
            if add == (address in self._members):
                refused = "already a member" if add else "not a member"
            elif not add and address == self._address:
                refused = "it would leave no member"
            elif add:
                self._members[address] = ""
            else:
                del self._members[address]
            if not refused:
                index = len(self._log) + 1
                self._log.append((index, b""))  # a configuration entry: not for the sink
        if refused:
            callback(None, ProposeError(f"membership change refused: {refused}"))
        else:
            callback(index, None)

    def transfer_leadership(self, address: str | None, callback: ProposeCallback) -> None:
        callback(None, ProposeError("leadership transfer refused: no other member runs"))

    def leader_address(self) -> str:
        return self._address

    def is_leader(self) -> bool:
        return True

    def is_learner(self) -> bool:
        return False

    def name_member(self, node_id: str, address: str) -> None:
        with self._lock:
            if address in self._members:
                self._members[address] = node_id
