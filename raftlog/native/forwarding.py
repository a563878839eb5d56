"""Proposals, leadership transfer and read indexes: taken here or forwarded to the leader.

A leader appends a proposal to its own log; a follower forwards it (a PROPOSE message
with a request id) and answers its caller when the leader's PROPOSE_RESP says where the
entry landed and that index is delivered (a PROPOSE from an address that is not a voter's
is refused); with no leader known, it waits up to
``wait_leader_ms`` for one. Forwards lost with a connection that is not up yet are answered
"not leader" at once (the client retries). Read indexes (§6.4) go through the core and are
answered once this node delivered up to them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from raftlog.consensus import ProposeCallback
from raftlog.errors import (
    NotLeaderError,
    ProposalDroppedError,
    ProposeError,
    UnknownOutcomeError,
    UnsafeReconfigurationError,
)
from raftlog.native.base import EngineBase
from raftlog.native.core import Role
from raftlog.native.messages import (
    KIND_CONFIG,
    ChangeRefused,
    Message,
    MsgType,
    NotLeader,
    UnsafeChange,
)

_REJECT_NOT_LEADER = 1
_REJECT_REFUSED = 2
_REJECT_UNSAFE = 3  # the strict reconfiguration check refused a membership change


class Forwarding(EngineBase):
    """Proposals, transfers and reads: here on a leader, forwarded from a follower."""

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
            if m.src not in core.voters:
                # The handshake proves the dialer knows the cluster password, not that the
                # address it claims is a member's; only a member forwards its clients'
                # proposals (and a removed one no longer may).
                raise ProposeError(f"{m.src} is not a member of this cluster")
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
