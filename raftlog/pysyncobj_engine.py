"""A :class:`~raftlog.consensus.ConsensusEngine` on PySyncObj 0.3.17.

What PySyncObj 0.3.17 gets wrong if used as is, and the mitigation of each, all applied here:

* One replicated method, ``append(bytes)``. It never raises (an exception in
  PySyncObj's apply wedges every replica for good) and does nothing but hand
  the item to our sink; our own apply thread does the work.
* The journal is a file, so a process crash loses nothing. PySyncObj never
  fsyncs it: a simultaneous power loss on a majority may lose the newest
  entries (README says so).
* The Raft port unpickles what arrives: a password (Fernet: PySyncObj decrypts
  and authenticates every message before it unpickles it) is required on every
  address, loopback included (any local process could reach a loopback port);
  :class:`PySyncObjConfig.validate` refuses otherwise.
* ``appendEntriesUseBatch=False``: a lone write commits in well under a
  millisecond instead of waiting for the 100 ms heartbeat; under load, items
  queued in one tick still travel in one append message.
* Election timeouts 1-2 s and ``leaderFallbackTimeout`` 2 s: a leader cut off
  from its peers steps down in about 2 s, not 30 s.
* PySyncObj's own log compaction (an in-thread pickle that stalled the leader
  for seconds) is switched off; snapshots are metaledger's own
  (:class:`raftlog.consensus.EngineSnapshots`).
* A follower's proposal reaches the leader inside PySyncObj (``apply_command``);
  with ``stamp_forwarded`` set the leader restamps the item with its own clock as it
  queues it, as the native engine does, so time enters the log from the leader only.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pysyncobj import (
    FAIL_REASON,
    SERIALIZER_STATE,
    SyncObj,
    SyncObjConf,
    SyncObjConsumer,
    replicated,
)
from pysyncobj import pickle as pso_pickle
from pysyncobj import tcp_connection as _tcp_connection
from pysyncobj.journal import createJournal
from pysyncobj.syncobj import _COMMAND_TYPE

from raftlog.consensus import (
    CommitSink,
    EngineConfig,
    EngineSnapshots,
    EngineStatus,
    Member,
    ProposeCallback,
    claim_journal_dir,
)
from raftlog.errors import (
    ConfigError,
    NotLeaderError,
    ProposalDroppedError,
    ProposeError,
    QueueFullError,
    UnknownOutcomeError,
)

log = logging.getLogger(__name__)


class _StoredZlib:
    """Stands in for ``zlib`` in PySyncObj's TCP connection: frames are still zlib streams
    (any peer decompresses them) but stored, not compressed. Compressing every Raft message
    at level 3 cost CPU for nothing: our payloads are protobuf with random-looking values."""

    @staticmethod
    def compress(data: bytes, level: int = -1) -> bytes:
        return zlib.compress(data, 0)

    @staticmethod
    def decompress(data: bytes) -> bytes:
        return zlib.decompress(data)


_tcp_connection.zlib = _StoredZlib
_ROLES = {0: "follower", 1: "candidate", 2: "leader"}
_LEADER = 2
_NEVER = 10**12


@dataclass(frozen=True)
class PySyncObjConfig(EngineConfig):
    password_reason: ClassVar[str] = (
        "PySyncObj unpickles whatever arrives there, so a cluster password is required"
    )

    connection_timeout_ms: int = 3500
    tick_period_ms: int = 20
    snapshot_min_interval_s: int = 10**9
    extra: dict[str, Any] = field(default_factory=dict)  # raw SyncObjConf overrides (tests)
    #: the leader's stamp for an item a follower forwarded (``NativeConfig.stamp_forwarded``)
    stamp_forwarded: Callable[[bytes], bytes] | None = field(default=None, compare=False)

    def validate(self) -> None:
        if not self.password:
            raise ConfigError(
                "password",
                f"required on every address, loopback included: {self.password_reason}",
            )
        super().validate()


class _CoalescingSyncObj(SyncObj):  # type: ignore[misc]
    """PySyncObj with two changes.

    * In no-batch mode the leader sends one append message after draining the whole
      command queue, instead of one message per command (64 queued writes were 64
      messages to each follower).
    * One membership change at a time, for real: 0.3.17 never records the index of a
      pending change, so its own guard never fires and two concurrent changes were both
      accepted (Raft's single-server changes are only safe one at a time).
    """

    _ml_change_index: int | None = None

    def __init__(self, *args: Any, stamp: Callable[[bytes], bytes] | None = None, **kw: Any):
        self._ml_stamp = stamp  # before PySyncObj's threads start
        super().__init__(*args, **kw)

    def _applyCommand(self, command: bytes, callback: Any, commandType: Any = None) -> None:
        # another node's command (callback (node, request id) or None) comes whole
        stamp = self._ml_stamp
        if stamp is not None and commandType is None and not callable(callback):
            command = restamped(command, stamp)
        super()._applyCommand(command, callback, commandType)

    def _SyncObj__changeCluster(self, request: Any) -> bool:
        applied = self._SyncObj__raftLastApplied
        noop = self._SyncObj__noopIDx
        if noop is None or applied < noop:
            return False  # this leader's first entry is not applied yet
        pending = self._ml_change_index
        if pending is not None and applied < pending:
            return False  # the previous change is not applied yet
        index = self._SyncObj__getCurrentLogIndex() + 1  # where this change will sit
        if not self._SyncObj__doChangeCluster(request):
            return False
        self._ml_change_index = index
        return True

    def _checkCommandsToApply(self) -> None:
        conf = self._SyncObj__conf
        before = self._SyncObj__getCurrentLogIndex()
        conf.appendEntriesUseBatch = True
        try:
            super()._checkCommandsToApply()
        finally:
            conf.appendEntriesUseBatch = False
        if self._SyncObj__raftState == _LEADER and self._SyncObj__getCurrentLogIndex() != before:
            self._SyncObj__sendAppendEntries()


def restamped(command: bytes, stamp: Callable[[bytes], bytes]) -> bytes:
    """A forwarded ``append(item)`` with ``stamp(item)``; other commands as they came."""
    if command[:1] != bytes([_COMMAND_TYPE.REGULAR]):
        return command
    try:
        func_id, args = pso_pickle.loads(command[1:])  # (id, args): no kwargs in append
        item = args[0] if len(args) == 1 and isinstance(args[0], bytes) else None
        return command[:1] + bytes(pso_pickle.dumps((func_id, (stamp(item),)))) if item else command
    except Exception:  # not ours to judge: PySyncObj applies it as it came
        return command


class _AppendConsumer(SyncObjConsumer):  # type: ignore[misc]
    """Holds the one replicated method. Nothing here is ever snapshotted by PySyncObj."""

    def __init__(self) -> None:
        super().__init__()
        self.sink: CommitSink | None = None
        self.last_index = 0  # Raft index of the last item handed to the sink

    @replicated  # type: ignore[untyped-decorator]
    def append(self, data: bytes) -> int:
        # Runs on PySyncObj's tick thread for every committed item, in log order.
        try:
            so = self._syncObj
            offset = int(so.raftLastApplied) + 1
            term = 0
            try:
                items = so._SyncObj__getEntries(offset, 1)
                if items:
                    term = int(items[0][2])
            except Exception:  # private API; the term is informational
                term = 0
            sink = self.sink
            if sink is not None:
                sink(offset, term, data)
            self.last_index = offset
            return offset
        except BaseException:  # never raise out of PySyncObj's apply
            log.exception("append: could not hand a committed item to the apply thread")
            return -1

    def _serialize(self) -> None:
        return None

    def _deserialize(self, data: Any) -> None:
        return None


def _reconcile_journal(journal_file: str, dump_file: str, snapshots: EngineSnapshots) -> None:
    """Compact PySyncObj's journal behind its dump if a crash came between the two.

    PySyncObj links a new snapshot, then (next tick) deletes the journal entries it covers.
    A crash in between leaves a journal that does not start with the dump's two entries,
    and PySyncObj's loader then *clears* the journal, dropping committed entries after the
    snapshot. Doing the deletion here first keeps them.
    """
    if not (os.path.exists(dump_file) and os.path.exists(journal_file)):
        return
    try:
        last_entry, prev_entry = pso_pickle.loads(snapshots.engine_meta(dump_file))[:2]
    except Exception:
        log.warning("cannot read the engine meta of %s; journal left as is", dump_file)
        return
    journal = createJournal(journal_file)
    try:
        if len(journal) >= 2 and journal[0] == prev_entry and journal[1] == last_entry:
            return
        for i in range(len(journal) - 1):
            if journal[i] == prev_entry and journal[i + 1] == last_entry:
                log.warning(
                    "journal %s was not compacted behind %s (a crash between the two): "
                    "dropping its first %d entries",
                    journal_file,
                    dump_file,
                    i,
                )
                journal.deleteEntriesTo(i)
                return
    finally:
        journal._destroy()


def _error_for(reason: int, leader_hint: str) -> ProposeError:
    if reason in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER, FAIL_REASON.LEADER_CHANGED):
        return NotLeaderError(f"no stable leader (reason {reason})", leader_hint)
    if reason == FAIL_REASON.DISCARDED:
        return ProposalDroppedError("the entry was replaced by a new leader's log")
    if reason == FAIL_REASON.QUEUE_FULL:
        return QueueFullError("consensus queue is full")
    if reason == FAIL_REASON.UNKNOWN_OUTCOME:
        return UnknownOutcomeError("outcome unknown after a leader change")
    return ProposeError(f"proposal refused (reason {reason})")


class PySyncObjEngine:
    def __init__(self, config: PySyncObjConfig) -> None:
        config.validate()
        self._config = config
        self._by_address = {addr: nid for nid, addr in config.peers.items()}
        self._consumer = _AppendConsumer()
        self._sync: SyncObj | None = None

    @property
    def dump_file(self) -> str:
        """Where PySyncObj keeps (and ships to lagging followers) the current snapshot."""
        return os.path.join(self._config.journal_dir, "dump.snap")

    def start(self, sink: CommitSink, snapshots: EngineSnapshots | None = None) -> None:
        cfg = self._config
        claim_journal_dir(cfg.journal_dir, "wal", "a native Raft log", "native")
        self._consumer.sink = sink
        hooks: dict[str, Any] = {
            "logCompactionMinEntries": 2**62,
            "logCompactionMinTime": _NEVER,
        }
        if snapshots is not None and cfg.snapshot_every_items > 0:
            states = {
                "writing": SERIALIZER_STATE.SERIALIZING,
                "done": SERIALIZER_STATE.SUCCESS,
                "failed": SERIALIZER_STATE.FAILED,
            }

            def serializer(_tmp_file: str, raft_meta: Any) -> None:
                # tick thread: only enqueue; the snapshot thread writes and links the file
                last_entry = raft_meta[0]
                snapshots.take(int(last_entry[1]), pso_pickle.dumps(tuple(raft_meta)))

            def checker() -> int:
                return int(states.get(snapshots.state(), SERIALIZER_STATE.NOT_SERIALIZING))

            def deserializer(path: str) -> Any:
                return pso_pickle.loads(snapshots.load(path))

            hooks = {
                "fullDumpFile": self.dump_file,
                "serializer": serializer,
                "serializeChecker": checker,
                "deserializer": deserializer,
                "logCompactionMinEntries": cfg.snapshot_every_items,
                "logCompactionMinTime": cfg.snapshot_min_interval_s,
                "logCompactionSplit": False,
            }
        conf = SyncObjConf(
            password=cfg.password,  # never empty: validate() refused that
            journalFile=os.path.join(cfg.journal_dir, "journal"),
            appendEntriesUseBatch=False,
            raftMinTimeout=cfg.election_timeout_min_ms / 1000,
            raftMaxTimeout=cfg.election_timeout_max_ms / 1000,
            leaderFallbackTimeout=cfg.leader_step_down_ms / 1000,
            connectionTimeout=cfg.connection_timeout_ms / 1000,
            autoTickPeriod=cfg.tick_period_ms / 1000,
            **hooks,
            dynamicMembershipChange=True,
            commandsWaitLeader=True,
            bindAddress=cfg.self_address,
            connectionRetryTime=1.0,
            **cfg.extra,
        )
        if snapshots is not None and cfg.snapshot_every_items > 0:
            _reconcile_journal(os.path.join(cfg.journal_dir, "journal"), self.dump_file, snapshots)
        others = [addr for nid, addr in cfg.peers.items() if nid != cfg.node_id]
        self._sync = _CoalescingSyncObj(
            cfg.self_address,
            others,
            conf=conf,
            consumers=[self._consumer],
            stamp=cfg.stamp_forwarded,
        )

    def propose(self, data: bytes, callback: ProposeCallback) -> None:
        if self._sync is None:
            callback(None, ProposeError("engine not started"))
            return

        def done(result: Any, reason: int) -> None:
            try:
                if reason == FAIL_REASON.SUCCESS:
                    callback(int(result), None)
                else:
                    callback(None, _error_for(reason, self.status().leader_id))
            except Exception:
                log.exception("propose callback failed")

        try:
            self._consumer.append(data, callback=done)
        except Exception as exc:  # pragma: no cover - PySyncObj queues, it does not raise
            callback(None, ProposeError(f"propose failed: {exc}"))

    def status(self) -> EngineStatus:
        so = self._sync
        cfg = self._config
        if so is None:
            return EngineStatus(cfg.node_id, "follower", 0, "", 0, 0, False, dict(cfg.peers))
        leader = so._getLeader()
        leader_id = ""
        if leader is not None:
            leader_id = self._name(getattr(leader, "address", str(leader)))
        commit = int(so.raftCommitIndex)
        try:
            end = int(so._SyncObj__raftLog[-1][1])
        except Exception:
            end = commit
        return EngineStatus(
            node_id=cfg.node_id,
            role=_ROLES.get(int(so._SyncObj__raftState), "unknown"),
            term=int(so.raftCurrentTerm),
            leader_id=leader_id,
            end_offset=max(end, commit),
            commit_offset=commit,
            has_quorum=bool(so.hasQuorum),
            members={self._name(a): a for a in self._addresses()},
        )

    # ------------------------------------------------------------ membership
    def members(self) -> list[Member]:
        """The current configuration (this node included), by peer address."""
        names = self._by_address
        return [Member(a, names.get(a, "")) for a in self._addresses()]

    def _addresses(self) -> list[str]:
        so = self._sync
        if so is None:
            return sorted(self._config.peers.values())
        nodes = {self._config.self_address}
        nodes.update(n.address for n in list(so.otherNodes))
        return sorted(nodes)

    def add_member(self, address: str, callback: ProposeCallback) -> None:
        """Add a voting member (one change at a time; the new node must already run
        with the existing members as its peers)."""
        self._change(address, callback, add=True)

    def remove_member(self, address: str, callback: ProposeCallback) -> None:
        self._change(address, callback, add=False)

    def add_learner(self, address: str, callback: ProposeCallback) -> None:
        callback(None, ProposeError("learners need the native Raft engine (raft_engine native)"))

    def promote_member(self, address: str, callback: ProposeCallback) -> None:
        callback(None, ProposeError("learners need the native Raft engine (raft_engine native)"))

    def _change(self, address: str, callback: ProposeCallback, add: bool) -> None:
        so = self._sync
        if so is None:
            callback(None, ProposeError("engine not started"))
            return

        def done(result: Any, reason: int) -> None:
            if reason == FAIL_REASON.SUCCESS:
                callback(0, None)
            elif reason == FAIL_REASON.REQUEST_DENIED:
                callback(
                    None,
                    ProposeError(
                        "membership change refused: another change is in progress, the "
                        "new leader has not committed its first entry yet, or the member "
                        "is already (or not) in the configuration"
                    ),
                )
            else:
                callback(None, _error_for(reason, self.status().leader_id))

        if add:
            so.addNodeToCluster(address, callback=done)
        else:
            so.removeNodeFromCluster(address, callback=done)

    def transfer_leadership(self, address: str | None, callback: ProposeCallback) -> None:
        """Ask the leader to hand over to ``address`` (or the most caught-up follower)."""
        so = self._sync
        if so is None:
            callback(None, ProposeError("engine not started"))
            return

        def done(result: Any, reason: int) -> None:
            if reason == FAIL_REASON.SUCCESS:
                callback(0, None)
            elif reason == FAIL_REASON.NOT_LEADER:
                callback(None, NotLeaderError("only the leader can transfer leadership"))
            else:
                callback(
                    None,
                    ProposeError("leadership transfer refused: the target is not caught up"),
                )

        so.transferLeadership(address, callback=done)

    def force_snapshot(self) -> None:
        so = self._sync
        if so is not None:
            so.forceLogCompaction()

    def uncommitted(self) -> list[bytes]:
        so = self._sync
        if so is None:
            return []
        out: list[bytes] = []
        try:
            items = so._SyncObj__getEntries(self._consumer.last_index + 1)
            for command, _idx, _term in items:
                if command[:1] == bytes([_COMMAND_TYPE.REGULAR]):
                    _func_id, args = pso_pickle.loads(command[1:])[:2]
                    out.append(bytes(args[0]))
        except Exception:  # private API, read from another thread: best effort
            log.debug("could not read uncommitted items", exc_info=True)
        return out

    def term(self) -> int:
        """The current term, cheaply (for response headers)."""
        so = self._sync
        return int(so.raftCurrentTerm) if so is not None else 0

    def name_member(self, node_id: str, address: str) -> None:
        """Learn a member's id (from its member record), for status and leader ids."""
        self._by_address = {**self._by_address, address: node_id}

    def leader_address(self) -> str:
        """The leader's peer address as this node knows it ("" if none)."""
        so = self._sync
        leader = so._getLeader() if so is not None else None
        return "" if leader is None else str(getattr(leader, "address", leader))

    def is_leader(self) -> bool:
        so = self._sync
        return so is not None and int(so._SyncObj__raftState) == _LEADER

    def is_learner(self) -> bool:
        return False  # (PySyncObj has no learners)

    def _name(self, address: str) -> str:
        return self._by_address.get(address, address)

    def stop(self) -> None:
        so, self._sync = self._sync, None
        self._consumer.sink = None
        if so is not None:
            so.destroy_synchronous()
