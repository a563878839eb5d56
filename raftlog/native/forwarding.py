"""Proposals, leadership transfer and read indexes: taken here or forwarded to the leader.

A leader appends a proposal to its own log; a follower forwards it (a PROPOSE message
with a request id; the leader may add its clock to it: ``NativeConfig.stamp_forwarded``)
and answers its caller when the leader's PROPOSE_RESP says where the
entry landed and that index is delivered (a PROPOSE from an address that is not a voter's
is refused); with no leader known, it waits up to
``wait_leader_ms`` for one. Forwards lost with a connection that is not up yet are answered
"not leader" at once (the client retries). Read indexes (§6.4) go through the core and are
answered once this node delivered up to them; a follower asks its leader again after
:data:`READ_ASK_AGAIN_S` without an answer.

:class:`Forwarding` also hands the committed entries to the sink (:meth:`Forwarding.deliver`):
it answers the proposals waiting for them in the same pass over the entries.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable

from raftlog.consensus import CommitSink, ProposeCallback
from raftlog.errors import (
    LearnerNotReadyError,
    NotLeaderError,
    ProposalDroppedError,
    ProposeError,
    UnknownOutcomeError,
    UnsafeReconfigurationError,
)
from raftlog.native.config import NativeConfig
from raftlog.native.core import RaftCore, Role
from raftlog.native.messages import (
    KIND_CONFIG,
    KIND_NORMAL,
    ChangeRefused,
    LearnerNotReady,
    Message,
    MsgType,
    NotLeader,
    UnsafeChange,
)

_REJECT_NOT_LEADER = 1
_REJECT_REFUSED = 2
_REJECT_UNSAFE = 3  # the strict reconfiguration check refused a membership change
_REJECT_NOT_READY = 4  # a learner's promotion before it caught up
#: a follower asks its leader for a read index again when this passed without an answer:
#: the request may have been dropped (no connection to the leader up yet, as right after a
#: healed partition) or written into a connection that died. Either answer is a valid
#: read index (the leader took it after the read began); the later one finds no reader.
READ_ASK_AGAIN_S = 0.25

log = logging.getLogger(__name__)


class Forwarding:
    """Proposals, transfers and reads: here on a leader, forwarded from a follower (on the
    engine's loop). Owns every caller waiting for an answer."""

    def __init__(
        self,
        config: NativeConfig,
        core: RaftCore,
        sink: CommitSink | None,
        send: Callable[[str, Message], None],
        send_forward: Callable[[str, Message, int], None],
        kick: Callable[[], None],
        name: Callable[[str], str],
    ) -> None:
        """``sink``: where committed entries go; ``send``/``send_forward``: the transport's;
        ``kick``: a flush is needed; ``name(address)``: a member's name for messages."""
        self._config = config
        self._core = core
        self._sink = sink
        self._send = send
        self._send_forward = send_forward
        self._kick = kick
        self._name = name
        # proposals appended (here, or by the leader for a forward): index -> (term, callback)
        self._waiting: dict[int, tuple[int, ProposeCallback]] = {}
        self._forwards: dict[int, tuple[ProposeCallback, float]] = {}
        self._queued: list[tuple[bytes, int, ProposeCallback, float]] = []
        # linearizable reads (ReadIndex, §6.4): asked of the core (read id -> callback,
        # deadline), waiting for a leader, and answered but not yet delivered up to
        self._reads: dict[int, tuple[ProposeCallback, float]] = {}
        self._read_asked: dict[int, float] = {}  # a follower's reads: read id -> asked at
        self._reads_queued: list[tuple[ProposeCallback, float]] = []
        self._reads_ready: list[tuple[int, ProposeCallback, float]] = []
        self._rids = itertools.count(1)
        self._transfer_cb: ProposeCallback | None = None

    def detach_sink(self) -> None:
        """Nothing more goes to the sink."""
        self._sink = None

    def propose(self, data: bytes, kind: int, callback: ProposeCallback) -> None:
        core = self._core
        if core.role == Role.LEADER:
            self.propose_local(data, kind, callback)
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
        core = self._core
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
        except LearnerNotReady as exc:
            raise LearnerNotReadyError(str(exc)) from None
        except ChangeRefused as exc:
            raise ProposeError(f"membership change refused: {exc}") from None
        if callback is not None:
            self._waiting[index] = (term, callback)
        self._kick()
        return index, term

    def propose_local(self, data: bytes, kind: int, callback: ProposeCallback) -> None:
        try:
            self._propose_here(data, kind, callback)
        except ProposeError as err:
            callback(None, err)

    def _forward(self, data: bytes, kind: int, callback: ProposeCallback) -> None:
        rid = next(self._rids)
        self._forwards[rid] = (callback, time.monotonic() + self._config.wait_leader_ms / 1000)
        m = Message(MsgType.PROPOSE, self._core.term, offset=rid, kind=kind, data=data)
        self._send_forward(self._core.leader, m, rid)

    def on_propose(self, m: Message) -> None:
        """Leader: a follower forwards a proposal; the follower waits for the commit."""
        core = self._core
        try:
            if m.src not in core.voters and m.src not in core.learners:
                # The handshake proves the dialer knows the cluster password, not that the
                # address it claims is a member's; only a member forwards its clients'
                # proposals (and a removed one no longer may).
                raise ProposeError(f"{m.src} is not a member of this cluster")
            data, stamp = m.data, self._config.stamp_forwarded
            if stamp is not None and m.kind == KIND_NORMAL:
                data = stamp(data)  # the leader's clock, not the follower's
            index, term = self._propose_here(data, m.kind, None)
        except ProposeError as err:
            code = _REJECT_NOT_LEADER if isinstance(err, NotLeaderError) else _REJECT_REFUSED
            if isinstance(err, UnsafeReconfigurationError):
                code = _REJECT_UNSAFE
            elif isinstance(err, LearnerNotReadyError):
                code = _REJECT_NOT_READY
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

    def on_propose_resp(self, m: Message) -> None:
        entry = self._forwards.pop(m.offset, None)
        if entry is None:
            return
        callback = entry[0]
        if m.reject:
            reason = m.data.decode(errors="replace")
            if m.hint == _REJECT_NOT_LEADER:
                callback(None, NotLeaderError(reason, self._name(self._core.leader)))
            elif m.hint == _REJECT_UNSAFE:
                callback(None, UnsafeReconfigurationError(reason))
            elif m.hint == _REJECT_NOT_READY:
                callback(None, LearnerNotReadyError(reason))
            else:
                callback(None, ProposeError(reason))
            return
        core = self._core
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

    def fail_forwards(self, leader: str, rids: Iterable[int]) -> None:
        """Proposals forwarded to ``leader`` while this node has no connection to it (it
        is reconnecting: the leader was just elected, restarted or thawed) are lost with
        the frame: answer them now with "not leader" (the client retries) rather than at
        the forward deadline, past the client's own."""
        for rid in rids:
            entry = self._forwards.pop(rid, None)
            if entry is not None:
                name = self._name(leader)
                entry[0](None, NotLeaderError(f"no connection to the leader {name} yet", name))

    def connection_lost(self, address: str) -> None:
        """The connection to ``address`` broke. If it leads, the proposals forwarded to it
        and not yet answered may or may not have arrived: answer them now (the outcome is
        unknown) rather than at their deadline, and a forward written into a dead
        connection never lands long after its client gave up (the kernel drops it with
        the connection)."""
        if address != self._core.leader or not self._forwards:
            return
        forwards, self._forwards = self._forwards, {}
        for callback, _ in forwards.values():
            callback(None, UnknownOutcomeError("the connection to the leader broke"))

    def transfer(self, address: str | None, callback: ProposeCallback) -> None:
        core = self._core
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

    def read_index(self, callback: ProposeCallback, deadline: float | None) -> None:
        now = time.monotonic()
        if deadline is None:
            deadline = now + self._config.wait_leader_ms / 1000
        rid = next(self._rids)
        try:
            self._core.read_index(rid)
        except NotLeader:
            self._reads_queued.append((callback, deadline))  # until a leader is known
            return
        self._reads[rid] = (callback, deadline)
        if self._core.role != Role.LEADER:
            self._read_asked[rid] = now
        self._kick()

    def answer_reads(self) -> None:
        """Hand out the read indexes the core answered (``core.read_states``), once
        delivered up to them (the others when :meth:`deliver` gets there)."""
        core = self._core
        if core.read_states:
            states, core.read_states = core.read_states, []
            for rid, index in states:
                entry = self._reads.pop(rid, None)
                self._read_asked.pop(rid, None)
                if entry is None:
                    continue
                if index == 0:
                    leader = self._name(core.leader)
                    entry[0](None, NotLeaderError("the leader changed under the read", leader))
                else:
                    self._reads_ready.append((index, *entry))
        if self._reads_ready:
            self._answer_ready_reads()

    def _answer_ready_reads(self) -> None:
        delivered = self._core.delivered
        ready = [r for r in self._reads_ready if r[0] <= delivered]
        if ready:
            self._reads_ready = [r for r in self._reads_ready if r[0] > delivered]
            for index, callback, _ in ready:
                callback(index, None)

    def deliver(self) -> bool:
        """Hand what the core committed since to the sink and answer the callers waiting
        for those entries (and the reads now delivered up to); False if nothing was."""
        core = self._core
        entries = core.committed_entries()
        if not entries:
            return False
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
        if self._reads_ready:
            self._answer_ready_reads()
        return True

    def snapshot_installed(self, index: int) -> None:
        """The leader's snapshot up to ``index`` replaced this node's log (the core is
        restored to it): the proposals waiting for entries inside it never learn their fate."""
        for i in [i for i in self._waiting if i <= index]:
            _, callback = self._waiting.pop(i)
            callback(None, UnknownOutcomeError("the entry is inside the leader's snapshot"))
        if self._reads_ready:
            self._answer_ready_reads()

    def leader_changed(self) -> None:
        """Forwards and reads the old leader never answered are failed (the clients retry);
        with a new leader, what waited for one goes to it."""
        core = self._core
        # forwarded proposals the old leader never answered: the client retries
        # (requests carry (client id, seq), so a retry is applied at most once)
        forwards, self._forwards = self._forwards, {}
        for callback, _ in forwards.values():
            callback(None, NotLeaderError("the leader changed", self._name(core.leader)))
        # reads asked of the old leader may never be answered (the core refuses
        # its own when it steps down): they ask again
        reads, self._reads = self._reads, {}
        self._read_asked = {}
        for callback, _ in reads.values():
            callback(None, NotLeaderError("the leader changed", self._name(core.leader)))
        if core.leader:
            queued, self._queued = self._queued, []
            stamp = self._config.stamp_forwarded if core.role == Role.LEADER else None
            for data, kind, callback, _ in queued:
                # what waited for a leader and lands here carries this leader's clock, as
                # a forward would (its own stamps were taken before it knew the log's time)
                held = stamp(data) if stamp is not None and kind == KIND_NORMAL else data
                self.propose(held, kind, callback)
            waiting, self._reads_queued = self._reads_queued, []
            for callback, deadline in waiting:
                self.read_index(callback, deadline)

    def transfer_done(self, err: ProposeError | None) -> None:
        """The leadership transfer asked for ended (``err``: refused)."""
        cb, self._transfer_cb = self._transfer_cb, None
        if cb is None:
            return
        if err is None:
            cb(0, None)
        else:
            cb(None, err)

    def propose_queued(self) -> None:
        """This node leads: what waited for a leader is proposed here."""
        if self._queued:
            queued, self._queued = self._queued, []
            for data, kind, callback, _ in queued:
                self.propose_local(data, kind, callback)

    def expire(self, now: float) -> None:
        """Answer what waited past its deadline: for a leader, for a forward's answer, for
        a read index."""
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
        if self._read_asked:
            self._ask_again(now)

    def _ask_again(self, now: float) -> None:
        """Ask the leader again for the read indexes it has not answered in
        :data:`READ_ASK_AGAIN_S`."""
        core = self._core
        if core.role == Role.LEADER or not core.leader:
            return  # leader_changed() answers them
        asked = False
        for rid, at in list(self._read_asked.items()):
            if rid not in self._reads:
                del self._read_asked[rid]
            elif now - at >= READ_ASK_AGAIN_S:
                core.read_index(rid)
                self._read_asked[rid] = now
                asked = True
        if asked:
            self._kick()

    def _expire_reads(self, now: float) -> None:
        for rid, (callback, deadline) in list(self._reads.items()):
            if deadline <= now:
                del self._reads[rid]
                self._read_asked.pop(rid, None)
                callback(None, UnknownOutcomeError("the read index was not confirmed in time"))
        for callback, _ in [r for r in self._reads_queued if r[1] <= now]:
            callback(None, NotLeaderError("no leader elected in time"))
        self._reads_queued = [r for r in self._reads_queued if r[1] > now]
        for _, callback, _ in [r for r in self._reads_ready if r[2] <= now]:
            callback(None, UnknownOutcomeError("this node did not catch up with the read index"))
        self._reads_ready = [r for r in self._reads_ready if r[2] > now]
