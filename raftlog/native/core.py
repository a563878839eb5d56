"""A Raft core without I/O: the native consensus engine's protocol logic.

Over 500 lines on purpose: one protocol state machine whose roles share every field (as
etcd-io/raft's ``raft.go``); split, each part would read the others' state.

The shape is etcd-io/raft's (``raft.go``, ``Ready``/``Advance``): the driver
(:mod:`raftlog.native.engine`) feeds messages, ticks and proposals in; the core changes its state
and leaves behind what the driver must do next, in this order:

1. send :attr:`RaftCore.outbox` (a leader's appends go out before its own fsync: the
   followers write while the leader writes);
2. persist the entries from :attr:`RaftCore.unstable_from` and the hard state (term, vote)
   when :attr:`RaftCore.hard_dirty`, then fdatasync, then call :meth:`RaftCore.persisted`;
3. send :attr:`RaftCore.after_persist` (acks of new entries and votes: never promise what
   is not on disk). An append that brings nothing new (a heartbeat, a resend) is answered
   in the outbox at once, with the last index both on disk and matching the leader
   (:attr:`RaftCore.durable`): a follower whose disk cannot take a write (ENOSPC) keeps
   its leader's quorum (§6.2), and still never acknowledges what it does not hold;
4. hand the committed entries (:meth:`RaftCore.committed_entries`) to the state machine.

Paper sections (Ongaro's dissertation, "Consensus: bridging theory and practice"):
elections §3.4 with pre-vote and leader stickiness §9.6 (a node that has heard from a
leader within the minimum election timeout ignores other candidates, so a node being
added or just removed cannot depose a healthy leader); log replication §3.5 with the
conflict hint of §5.3 (simplified: the follower's last index); commitment only of the
leader's own term §3.6.2 (a new leader appends a no-op); single-server membership changes
§4.1 (a configuration applies as soon as it is in the log, one at a time, and only after
the leader's no-op committed §4.1 "bug in single-server changes"); leadership transfer
§3.10 (TimeoutNow); check quorum §6.2 (a leader that has not heard from a majority for
``step_down_s`` steps down); InstallSnapshot §5.3 (the driver streams the file; the leader
heartbeats the follower meanwhile, and the answers say when it has read the file, and whether
it needs a newer one: the log may have been compacted past it before a paused follower read it);
linearizable reads by ReadIndex §6.4 (:meth:`RaftCore.read_index`: the leader, once it
committed an entry of its term, takes its commit index and confirms that it still leads
with one heartbeat round a majority answers; every read waiting at the round's start
shares it; a follower asks the leader). No log entry is written for a read, so reads
keep working while disks are full.

Beyond the paper, as etcd does it: a follower whose log is shorter than what it had
acknowledged (its data dir was wiped, or it was restored from an old copy) is caught up
from the leader's log or snapshot, whatever its old match was; and a membership change is
refused when it would leave fewer *started* members (heard from within an election
timeout) than a quorum of the new configuration (etcd's ``--strict-reconfig-check``).

Members are named by their peer address ("host:port"), as PySyncObj names them, so the two
engines are interchangeable behind :class:`raftlog.consensus.ConsensusEngine`.

Longer than 500 lines on purpose: :class:`RaftCore` is one state machine whose handlers
all read and write the same fields (role, term, log, progress, read rounds), and its
invariants are checked in one place; the messages, entries and their wire codec live in
:mod:`raftlog.native.messages`.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass

from raftlog.native.messages import (
    KIND_CONFIG,
    KIND_NOOP,
    KIND_NORMAL,
    ChangeRefused,
    LearnerNotReady,
    LogEntry,
    Message,
    MsgType,
    NotLeader,
    UnsafeChange,
    decode_config,
    encode_config,
)

#: The leader sends at most this many bytes of entries in one append message ...
MAX_APPEND_BYTES = 1024 * 1024
#: ... and lets at most this many entries be in flight to one follower (flow control).
MAX_INFLIGHT_ENTRIES = 512
#: A learner is promoted only once its log holds this share of the leader's (etcd 3.4's
#: ``readyPercent``).
LEARNER_READY_SHARE = 0.9
#: A commit index alone is not sent to a follower that got a message less than this ago.
COMMIT_LAZY_S = 0.005

log = logging.getLogger(__name__)


class Role(enum.IntEnum):
    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


ROLE_NAMES = {
    Role.FOLLOWER: "follower",
    Role.PRE_CANDIDATE: "candidate",
    Role.CANDIDATE: "candidate",
    Role.LEADER: "leader",
}


# ---------------------------------------------------------------------- the core
@dataclass(slots=True)
class Progress:
    """What the leader knows of one follower (§3.5)."""

    next: int
    match: int = 0
    last_ack: float = 0.0  # when it last answered this leader, or joined (check quorum)
    heard: float = -1e18  # when it last answered this leader (strict reconfiguration check)
    last_sent: float = 0.0  # when this leader last sent it anything (heartbeats)
    sent_commit: int = 0
    snapshot_until: float = 0.0  # a snapshot is being sent until then (heartbeats only meanwhile)
    # once its last chunk is written (the follower may read it much later: SIGSTOP): the
    # read_seq of this leader's messages from then on, and the snapshot's index
    snapshot_seq: int = 0
    snapshot_index: int = 0


@dataclass(slots=True)
class _ReadRound:
    """One heartbeat round of a leader confirming its read index (§6.4)."""

    seq: int
    index: int  # the leader's commit index when the round started
    readers: list[tuple[str, int]]  # (asker: "" for this node, read id)
    acks: set[str]


@dataclass(frozen=True, slots=True)
class Timing:
    election_min_s: float = 1.0
    election_max_s: float = 2.0
    heartbeat_s: float = 0.1
    step_down_s: float = 2.0
    snapshot_send_s: float = 120.0  # give up on a snapshot transfer after this long


class RaftCore:
    """Raft's state and rules for one member. Single-threaded: the driver serializes calls."""

    def __init__(
        self,
        me: str,
        voters: Sequence[str],
        *,
        term: int = 0,
        vote: str = "",
        entries: Sequence[LogEntry] = (),
        snap_index: int = 0,
        snap_term: int = 0,
        commit: int = 0,
        timing: Timing | None = None,
        now: float = 0.0,
        rng: random.Random | None = None,
        strict_reconfig: bool = True,
        learners: Sequence[str] = (),
    ) -> None:
        self.me = me
        self.strict_reconfig = strict_reconfig
        self.clock = now  # the newest time a tick or message brought (strict reconfig check)
        self.commit_gap_warned = False  # told the log a leader's commit is past this log
        self.timing = timing or Timing()
        self.rng = rng or random.Random()
        self.term = term
        self.vote = vote
        self.snap_index = snap_index
        self.snap_term = snap_term
        self.log: list[LogEntry] = [e for e in entries if e.index > snap_index]
        for i, e in enumerate(self.log):
            if e.index != snap_index + 1 + i:
                raise ValueError(f"log not contiguous at entry {e.index} (after {snap_index})")
        self.snap_voters: tuple[str, ...] = tuple(sorted(voters))
        self.voters: tuple[str, ...] = self.snap_voters
        # non-voting members (etcd 3.4's learners): they get the log and snapshots, but
        # never vote, campaign, or count for a quorum, a commit, a read round
        self.snap_learners: tuple[str, ...] = tuple(sorted(learners))
        self.learners: tuple[str, ...] = self.snap_learners
        self.config_index = 0  # index of the newest config entry in the log (0: none)
        self._recompute_config()
        self.commit = min(max(commit, snap_index), self.last_index)
        self.delivered = snap_index  # the last index handed to the state machine
        self.role = Role.FOLLOWER
        self.leader = ""
        self.last_heard_leader = -1e18
        self.election_deadline = now + self._election_timeout()
        self.votes: set[str] = set()
        self.progress: dict[str, Progress] = {}
        self.term_start = 0  # index of this leader's no-op
        self.transfer_to = ""
        self.transfer_sent = False
        self.transfer_deadline = 0.0
        self.durable = self.last_index  # what is on this node's disk
        # outputs, drained by the driver
        self.outbox: list[tuple[str, Message]] = []
        self.after_persist: list[tuple[str, Message]] = []
        self.unstable_from: int | None = None
        self.truncated = False  # unstable_from cuts into entries already on disk
        self.hard_dirty = False
        self.need_snapshot: set[str] = set()
        self.replicate_pending = False
        self.commit_lagging = False  # a follower was not told the newest commit index yet
        self.events: list[str] = []  # "leader", "follower", "transfer-sent", ... (for the driver)
        #: at a check-quorum step-down ("lost-quorum"): each voter's silence, in seconds
        self.quorum_silence: dict[str, float] = {}
        # ReadIndex (§6.4): answered reads (read id, read index; 0: refused, ask again)
        self.read_states: list[tuple[int, int]] = []
        self.read_pending = False  # reads wait for a round: the driver calls start_reads
        self.read_seq = 0  # this node's newest read round (sent in every append)
        self._read_next: list[tuple[str, int]] = []  # (asker, read id) for the next round
        self._read_rounds: list[_ReadRound] = []  # rounds in flight, oldest first

    # ------------------------------------------------------------------ log view
    @property
    def last_index(self) -> int:
        return self.snap_index + len(self.log)

    @property
    def last_term(self) -> int:
        return self.log[-1].term if self.log else self.snap_term

    def term_at(self, index: int) -> int | None:
        if index == self.snap_index:
            return self.snap_term
        if index < self.snap_index or index > self.last_index:
            return None
        return self.log[index - self.snap_index - 1].term

    def entry(self, index: int) -> LogEntry:
        return self.log[index - self.snap_index - 1]

    def newest_normal_data(self) -> bytes:
        """The data of the newest normal entry in this node's log (b"": none since its
        snapshot)."""
        for e in reversed(self.log):
            if e.kind == KIND_NORMAL:
                return e.data
        return b""

    def entries_after(self, index: int, max_bytes: int, max_count: int) -> list[LogEntry]:
        start = index - self.snap_index  # position of entry index+1
        out: list[LogEntry] = []
        size = 0
        for e in self.log[start : start + max_count]:
            if out and size + len(e.data) > max_bytes:
                break
            out.append(e)
            size += len(e.data)
        return out

    def membership_at(self, index: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(voters, learners) as of ``index`` (the newest config entry at or before it)."""
        for e in reversed(self.log[: max(0, index - self.snap_index)]):
            if e.kind == KIND_CONFIG:
                return decode_config(e.data)
        return self.snap_voters, self.snap_learners

    def config_at(self, index: int) -> tuple[str, ...]:
        """The voters as of ``index``."""
        return self.membership_at(index)[0]

    def _recompute_config(self) -> None:
        for e in reversed(self.log):
            if e.kind == KIND_CONFIG:
                self.voters, self.learners = decode_config(e.data)
                self.config_index = e.index
                return
        self.voters, self.learners = self.snap_voters, self.snap_learners
        self.config_index = 0

    @property
    def peers(self) -> list[str]:
        """The other voters (who a candidate asks for votes)."""
        return [v for v in self.voters if v != self.me]

    @property
    def replicas(self) -> list[str]:
        """Every other member, learners included (whom a leader sends the log)."""
        return [v for v in (*self.voters, *self.learners) if v != self.me]

    def is_member(self, address: str) -> bool:
        return address in self.voters or address in self.learners

    def quorum(self) -> int:
        return len(self.voters) // 2 + 1

    # ------------------------------------------------------------------ helpers
    def _election_timeout(self) -> float:
        t = self.timing
        return self.rng.uniform(t.election_min_s, t.election_max_s)

    def _send(self, to: str, m: Message, after_persist: bool = False) -> None:
        (self.after_persist if after_persist else self.outbox).append((to, m))

    def _set_term(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = ""
            self.hard_dirty = True

    def _append(self, entries: Sequence[LogEntry]) -> None:
        if not entries:
            return
        first = entries[0].index
        if self.unstable_from is None or first < self.unstable_from:
            self.unstable_from = first
        self.log.extend(entries)
        if any(e.kind == KIND_CONFIG for e in entries):
            self._recompute_config()
            self._config_changed()

    def _truncate_from(self, index: int) -> None:
        """Drop entries at and after ``index`` (a conflicting suffix, §3.5)."""
        if index <= self.commit:
            raise AssertionError(f"truncating committed entry {index} (commit {self.commit})")
        had_config = any(e.kind == KIND_CONFIG for e in self.log[index - self.snap_index - 1 :])
        del self.log[index - self.snap_index - 1 :]
        # acks still waiting for the disk that promise dropped entries are never sent (the
        # leader that sent those entries is deposed, or resends)
        self.after_persist = [
            (to, m)
            for to, m in self.after_persist
            if m.type != MsgType.APPEND_RESP or m.reject or m.index < index
        ]
        if index <= self.durable:
            self.truncated = True
            self.durable = index - 1
        if self.unstable_from is None or index < self.unstable_from:
            self.unstable_from = index
        if had_config:
            self._recompute_config()
            self._config_changed()

    def _config_changed(self) -> None:
        if self.role == Role.LEADER:
            for peer in self.replicas:
                if peer not in self.progress:
                    # a check-quorum grace for the new member, as a new leader gives all
                    self.progress[peer] = Progress(next=self.last_index + 1, last_ack=self.clock)
            # a removed member keeps getting the log until it knows the change committed
            # (_forget_removed), but counts for nothing from now on
        self.events.append("config")

    def _forget_removed(self, now: float) -> None:
        """Stop replicating to members the configuration no longer has, once they were sent
        the commit of the change that removed them (so a removed member learns of its
        removal, and answers whoever waits for it there), or once they are silent."""
        for peer in [p for p in self.progress if not self.is_member(p)]:
            pr = self.progress[peer]
            told = self.config_index <= min(self.commit, pr.match, pr.sent_commit)
            if told or now - pr.last_ack >= self.timing.step_down_s:
                del self.progress[peer]

    def removed(self, now: float, quiet_s: float) -> bool:
        """Whether this member was removed from the cluster (§4.2.3; etcd's
        ErrMemberRemoved): the newest configuration in its log leaves it out and is
        committed, and no leader has written to it for ``quiet_s`` (a leader writes to a
        removed member until it has sent it that commit, then never again; a new member
        catching up through an older configuration without it is written to all along)."""
        if self.is_member(self.me) or self.commit < self.config_index or self.role == Role.LEADER:
            return False
        return now - self.last_heard_leader >= quiet_s

    # ------------------------------------------------------------------ roles
    def become_follower(self, term: int, leader: str, now: float) -> None:
        was_leader = self.role == Role.LEADER
        self._set_term(term)
        self.role = Role.FOLLOWER
        if leader != self.leader:
            self.leader = leader
            self.events.append("leader-changed")
        if leader:
            self.last_heard_leader = now
        self.election_deadline = now + self._election_timeout()
        self.progress = {}
        self.transfer_to = ""
        if was_leader:
            self.events.append("stepped-down")
            self._refuse_reads()

    def _campaign(self, now: float, pre: bool, force: bool = False) -> None:
        if self.me not in self.voters:
            return
        self.election_deadline = now + self._election_timeout()
        self.votes = {self.me}
        if self.leader:
            self.leader = ""
            self.events.append("leader-changed")
        if pre:
            self.role = Role.PRE_CANDIDATE
            mtype, term = MsgType.PRE_VOTE, self.term + 1
        else:
            self.role = Role.CANDIDATE
            self._set_term(self.term + 1)
            self.vote = self.me
            self.hard_dirty = True
            mtype, term = MsgType.VOTE, self.term
        if len(self.votes) >= self.quorum():
            self._won(now, pre)
            return
        for peer in self.peers:
            m = Message(mtype, term, index=self.last_index, log_term=self.last_term, flag=force)
            self._send(peer, m, after_persist=not pre)  # a vote for oneself is on disk first

    def _won(self, now: float, pre: bool) -> None:
        if pre:
            self._campaign(now, pre=False)
        else:
            self._become_leader(now)

    def _become_leader(self, now: float) -> None:
        self.role = Role.LEADER
        self.leader = self.me
        self.events.append("leader-changed")
        self.events.append("leader")
        self.transfer_to = ""
        self.progress = {
            p: Progress(next=self.last_index + 1, last_ack=now, last_sent=-1e18)
            for p in self.replicas
        }
        noop = LogEntry(self.last_index + 1, self.term, KIND_NOOP, b"")
        self.term_start = noop.index
        self._append([noop])
        self.replicate_pending = True

    # ------------------------------------------------------------------ inputs
    def tick(self, now: float) -> None:
        self.clock = now
        t = self.timing
        if self.role == Role.LEADER:
            # check quorum (§6.2): step down when a majority has been silent too long
            heard = 1 if self.me in self.voters else 0
            for peer, pr in self.progress.items():
                if now - pr.last_ack < t.step_down_s and peer in self.voters:
                    heard += 1
            if heard < self.quorum():
                self.quorum_silence = {
                    peer: now - pr.last_ack
                    for peer, pr in self.progress.items()
                    if peer in self.voters
                }
                self.events.append("lost-quorum")
                self.become_follower(self.term, "", now)
                return
            self._forget_removed(now)
            lagging, self.commit_lagging = self.commit_lagging, False
            for peer, pr in self.progress.items():
                if now - pr.last_sent >= t.heartbeat_s:
                    self._send_append(peer, now, heartbeat=True)
                elif lagging and pr.sent_commit < self.commit:
                    self._send_append(peer, now)
            if self.transfer_to and now > self.transfer_deadline:
                self.transfer_to = ""
                self.events.append("transfer-failed")
            if self.me not in self.voters and self.commit >= self.config_index:
                # removed, and the change is committed: hand over by going quiet (§4.2.2)
                self.become_follower(self.term, "", now)
            return
        if now >= self.election_deadline and self.me in self.voters:
            self._campaign(now, pre=True)

    def propose(self, data: bytes, kind: int = KIND_NORMAL) -> tuple[int, int]:
        """Append an entry; (index, term). Raises NotLeader."""
        if self.role != Role.LEADER or self.transfer_to:
            raise NotLeader(self.leader)
        e = LogEntry(self.last_index + 1, self.term, kind, data)
        self._append([e])
        self.replicate_pending = True
        return e.index, e.term

    def propose_change(self, op: str, address: str, now: float | None = None) -> tuple[int, int]:
        """A single-server membership change (§4.1): ``op`` is "add" (a voter), "learner"
        (add a non-voting member), "promote" (a learner becomes a voter) or "remove"
        (either). Raises NotLeader, ChangeRefused (UnsafeChange: the strict
        reconfiguration check; LearnerNotReady: a promotion before the learner caught up).

        As etcd-io/raft's ``confchange``: a learner's change never alters the quorum, so
        adding or removing one is not checked against the members that run."""
        if self.role != Role.LEADER:
            raise NotLeader(self.leader)
        if self.commit < self.term_start:
            raise ChangeRefused("this leader's first entry is not committed yet")
        if self.config_index > self.commit:
            raise ChangeRefused("another membership change is in progress")
        voters, learners = set(self.voters), set(self.learners)
        if now is not None:
            self.clock = now
        if op in ("add", "learner"):
            if address in voters or address in learners:
                raise ChangeRefused(f"{address} is already a member")
            (voters if op == "add" else learners).add(address)
        elif op == "promote":
            if address not in learners:
                raise ChangeRefused(f"{address} is not a learner")
            self._check_ready(address)
            learners.discard(address)
            voters.add(address)
        elif op == "remove":
            if address in learners:
                learners.discard(address)
            elif address not in voters:
                raise ChangeRefused(f"{address} is not a member")
            elif len(voters) == 1:
                raise ChangeRefused("cannot remove the last member")
            else:
                voters.discard(address)
        else:
            raise ChangeRefused(f"unknown membership change {op!r}")
        if self.strict_reconfig and voters != set(self.voters):
            self._check_started(op, voters, self.clock)
        return self.propose(encode_config(voters, learners), KIND_CONFIG)

    def _check_ready(self, learner: str) -> None:
        """etcd 3.4's ``isLearnerReady``: the learner's match is at least
        :data:`LEARNER_READY_SHARE` of the leader's own (one not heard from yet matches 0)."""
        pr = self.progress.get(learner)
        match = pr.match if pr is not None else 0
        if self.durable > 0 and match < LEARNER_READY_SHARE * self.durable:
            raise LearnerNotReady(
                f"{learner} holds the log up to index {match}, the leader's reaches "
                f"{self.durable} (a learner is promoted once it holds "
                f"{LEARNER_READY_SHARE:.0%} of it)"
            )

    def started_members(self, now: float) -> set[str]:
        """The members (voters and learners) this leader heard from within an election
        timeout, itself included."""
        window = self.timing.election_max_s
        started = {self.me} if self.me in self.voters else set()
        for peer, pr in self.progress.items():
            if self.is_member(peer) and now - pr.heard < window:
                started.add(peer)
        return started

    def _check_started(self, op: str, new_voters: set[str], now: float) -> None:
        """etcd's ``--strict-reconfig-check``: after the change, the members that run must
        still make a quorum of the new configuration, or the cluster loses its leader (a
        member added but never started, a running member removed)."""
        started = self.started_members(now) & new_voters
        quorum = len(new_voters) // 2 + 1
        if op in ("add", "promote") and self.voters == (self.me,):
            return  # growing a one-member cluster (after --force-new-cluster), as etcd allows
        if len(started) < quorum:
            raise UnsafeChange(
                "re-configuration failed due to not enough started members "
                f"({len(started)} of the {len(new_voters)} members after the change have "
                f"answered within an election timeout; a quorum is {quorum})"
            )

    def transfer(self, target: str | None, now: float) -> str:
        """Start handing leadership to ``target`` (None: the most caught-up follower);
        returns the target. Raises NotLeader / ChangeRefused."""
        if self.role != Role.LEADER:
            raise NotLeader(self.leader)
        if target is None:
            voting = [p for p in self.progress if p in self.voters]
            if not voting:
                raise ChangeRefused("no other member to hand leadership to")
            target = max(voting, key=lambda p: self.progress[p].match)
        if target == self.me:
            raise ChangeRefused("already the leader")
        if target not in self.progress or target not in self.voters:
            raise ChangeRefused(f"{target} is not a voting member")
        self.transfer_to = target
        self.transfer_sent = False
        self.transfer_deadline = now + self.timing.election_max_s
        self._maybe_send_timeout_now(now)
        if self.transfer_to:
            self._send_append(target, now)
        return target

    def _maybe_send_timeout_now(self, now: float) -> None:
        target = self.transfer_to
        pr = self.progress.get(target)
        if pr is not None and pr.match == self.last_index and not self.transfer_sent:
            self.transfer_sent = True
            self._send(target, Message(MsgType.TIMEOUT_NOW, self.term))
            self.events.append("transfer-sent")
            # the target campaigns now; this leader keeps refusing proposals until it
            # hears the new term (transfer_to stays set until the deadline or step-down)

    def step(self, m: Message, now: float) -> None:
        """Handle one message from peer ``m.src``."""
        self.clock = now
        if m.type in (MsgType.PROPOSE, MsgType.PROPOSE_RESP):
            return  # the driver handles forwarding
        if m.type == MsgType.READ_INDEX:
            if self.role == Role.LEADER:
                self._read_next.append((m.src, m.offset))
                self.read_pending = True
            else:
                resp = Message(MsgType.READ_INDEX_RESP, self.term, offset=m.offset, reject=True)
                self._send(m.src, resp)
            return
        if m.type == MsgType.READ_INDEX_RESP:
            self.read_states.append((m.offset, 0 if m.reject else m.index))
            return
        if m.type == MsgType.PRE_VOTE:
            self._on_vote_request(m, now, pre=True)
            return
        if m.type == MsgType.VOTE:
            self._on_vote_request(m, now, pre=False)
            return
        if m.type == MsgType.PRE_VOTE_RESP:
            if m.term > self.term and m.reject:
                self.become_follower(m.term, "", now)
            elif self.role == Role.PRE_CANDIDATE and not m.reject and m.term == self.term + 1:
                self._tally(m.src, now, pre=True)
            return
        if m.term > self.term:
            leader = m.src if m.type in (MsgType.APPEND, MsgType.SNAPSHOT) else ""
            self.become_follower(m.term, leader, now)
        elif m.term < self.term:
            if m.type in (MsgType.APPEND, MsgType.SNAPSHOT):
                # a deposed leader: tell it the new term
                self._send(m.src, Message(MsgType.APPEND_RESP, self.term, reject=True))
            return
        if m.type == MsgType.APPEND:
            self._on_append(m, now)
        elif m.type == MsgType.APPEND_RESP:
            self._on_append_resp(m, now)
        elif m.type == MsgType.VOTE_RESP:
            if self.role == Role.CANDIDATE and not m.reject:
                self._tally(m.src, now, pre=False)
        elif m.type == MsgType.SNAPSHOT_RESP:
            self._on_snapshot_resp(m, now)
        elif m.type == MsgType.SNAPSHOT:
            # a chunk of the leader's snapshot (the driver writes it): the leader is alive
            if self.role != Role.FOLLOWER or self.leader != m.src:
                self.become_follower(self.term, m.src, now)
            self.last_heard_leader = now
            self.election_deadline = now + self._election_timeout()
        elif m.type == MsgType.TIMEOUT_NOW:
            if self.role != Role.LEADER:
                self._campaign(now, pre=False, force=True)

    def _tally(self, voter: str, now: float, pre: bool) -> None:
        if voter in self.voters:
            self.votes.add(voter)
        if len(self.votes) >= self.quorum():
            self._won(now, pre)

    def _on_vote_request(self, m: Message, now: float, pre: bool) -> None:
        resp_type = MsgType.PRE_VOTE_RESP if pre else MsgType.VOTE_RESP
        # leader stickiness (§9.6): a member that heard from a leader recently ignores
        # candidates, unless the leader itself asked for the election (transfer)
        in_lease = (
            self.leader != ""
            and now - self.last_heard_leader < self.timing.election_min_s
            and not m.flag
        ) or (self.role == Role.LEADER and not m.flag)
        if in_lease:
            self._send(m.src, Message(resp_type, self.term, reject=True))
            return
        up_to_date = (m.log_term, m.index) >= (self.last_term, self.last_index)
        if pre:
            grant = m.term > self.term and up_to_date
            self._send(m.src, Message(resp_type, m.term if grant else self.term, reject=not grant))
            return
        if m.term > self.term:
            self.become_follower(m.term, "", now)
        if m.term < self.term:
            self._send(m.src, Message(resp_type, self.term, reject=True))
            return
        grant = self.vote in ("", m.src) and up_to_date
        if grant:
            self.vote = m.src
            self.hard_dirty = True
            self.election_deadline = now + self._election_timeout()
        self._send(m.src, Message(resp_type, self.term, reject=not grant), after_persist=grant)

    def _on_append(self, m: Message, now: float) -> None:
        if self.role != Role.FOLLOWER or self.leader != m.src:
            self.become_follower(self.term, m.src, now)
        self.last_heard_leader = now
        self.election_deadline = now + self._election_timeout()
        prev, prev_term, entries = m.index, m.log_term, m.entries
        if prev < self.snap_index:
            # the start is inside this node's snapshot: those entries are committed here
            skip = self.snap_index - prev
            if skip > len(entries):
                self._ack(m.src, self.snap_index, after_persist=False, read_seq=m.offset)
                return
            entries = entries[skip:]
            prev, prev_term = self.snap_index, self.snap_term
        if self.term_at(prev) != prev_term:
            hint = min(prev - 1, self.last_index)
            if prev <= self.last_index:
                # skip back over the whole conflicting term at once
                bad = self.term_at(prev)
                while hint > self.commit and hint > self.snap_index and self.term_at(hint) == bad:
                    hint -= 1
            if m.commit > self.last_index:
                self._warn_commit_gap(m)
            resp = Message(
                MsgType.APPEND_RESP,
                self.term,
                reject=True,
                hint=hint,
                flag=True,  # index carries this log's end
                index=self.last_index,
                offset=m.offset,
            )
            self._send(m.src, resp)
            return
        self.commit_gap_warned = False
        new: list[LogEntry] = []
        for i, e in enumerate(entries):
            if e.index <= self.last_index:
                if self.term_at(e.index) == e.term:
                    continue
                self._truncate_from(e.index)
            new = entries[i:]
            break
        self._append(new)
        match = prev + len(entries)
        if m.commit > self.commit:
            # never past what this log holds and matches the leader (§3.5)
            self.commit = max(self.commit, min(m.commit, match))
        if new:
            # the ack promises the new entries: it leaves once they are on disk
            self._ack(m.src, match, after_persist=True, read_seq=m.offset)
        else:
            # a heartbeat, or entries this log already holds: answer at once, promising
            # only what is on disk (while the disk cannot take a write, the leader still
            # hears from this follower and keeps its quorum, §6.2)
            self._ack(m.src, min(match, self.durable), after_persist=False, read_seq=m.offset)

    def _warn_commit_gap(self, m: Message) -> None:
        """A leader's commit index lies past this log's end and its entry does not match:
        this node is behind, or lost entries it had acknowledged. Say so once (the leader
        resends its log or a snapshot), not on every heartbeat."""
        if self.commit_gap_warned:
            return
        self.commit_gap_warned = True
        log.info(
            "this node's log ends at index %d, behind what the leader %s has committed "
            "(%d): catching up from the leader's log or a snapshot (a new member, one that "
            "was down, or one that lost its data)",
            self.last_index,
            m.src,
            m.commit,
        )

    def _ack(self, leader: str, match: int, after_persist: bool, read_seq: int = 0) -> None:
        m = Message(MsgType.APPEND_RESP, self.term, index=match, offset=read_seq)
        self._send(leader, m, after_persist)

    def _on_append_resp(self, m: Message, now: float) -> None:
        if self.role != Role.LEADER:
            return
        pr = self.progress.get(m.src)
        if pr is None:
            return
        pr.last_ack = pr.heard = now
        if self._read_rounds and m.offset:
            self._read_acked(m.src, m.offset)
        if pr.snapshot_until > now and not self._snapshot_over(pr, m, now):
            return  # the snapshot is still on its way
        if m.reject:
            if m.flag and m.index < pr.match:
                self._lost_log(m.src, pr, m.index, m.hint)
            else:
                # retry from the follower's hint; never below what it already matched
                pr.next = max(pr.match + 1, min(m.hint + 1, pr.next - 1))
            self._send_append(m.src, now)
            return
        if m.index > pr.match:
            pr.match = m.index
            self._maybe_commit()
        if pr.next <= pr.match:
            pr.next = pr.match + 1
        if self.transfer_to == m.src:
            self._maybe_send_timeout_now(now)
        if pr.next <= self.last_index or pr.sent_commit < self.commit:
            self._send_append(m.src, now)

    def _snapshot_over(self, pr: Progress, m: Message, now: float) -> bool:
        """``m`` answers this leader while a snapshot is on its way to ``m.src`` (§5.3):
        whether the transfer is over (its index: the follower's match, or its last index
        when it rejects). It is when the follower holds every entry before this log's start
        (whatever it installed, the log catches it up from there), or when it answered a
        message sent after the snapshot's last chunk, so it read them all (the same
        connection) and did install it, but this log has since been compacted past it (a
        newer snapshot, at once). If such an answer shows its log still ending before the
        snapshot, the chunks were lost (the connection closed before it read them) or not
        installed: sent again after an election timeout (not in a loop)."""
        holds_log_start = not m.reject and m.index >= self.snap_index
        if not holds_log_start:
            if not pr.snapshot_seq or m.offset < pr.snapshot_seq:
                return False  # it answers a message sent before the last chunk
            if m.index < pr.snapshot_index:
                pr.snapshot_seq = 0
                pr.snapshot_until = min(pr.snapshot_until, now + self.timing.election_min_s)
                return False
        pr.snapshot_until = 0.0
        pr.snapshot_seq = 0
        pr.next = pr.match + 1  # from where its answer says (a reject: a snapshot again)
        return True

    def _lost_log(self, peer: str, pr: Progress, last: int, hint: int) -> None:
        """``peer``'s log ends below what it had acknowledged: it lost its data (a wiped
        data dir restarted with the same command, a restore from an old copy). Start over
        from where it says it is: from the log, or a snapshot when the log no longer holds
        those entries (``_send_append`` asks the driver for one).

        Its match drops to no more than the commit index: what it holds past that is not
        known to match this log, and must not count towards committing anything."""
        source = "the log" if hint >= self.snap_index else "a snapshot"
        log.warning(
            "member %s lost its log (its last index %d < matched %d); catching it up from %s",
            peer,
            last,
            pr.match,
            source,
        )
        pr.match = min(hint, self.commit)
        pr.next = hint + 1
        pr.snapshot_until = 0.0

    def _on_snapshot_resp(self, m: Message, now: float) -> None:
        pr = self.progress.get(m.src)
        if self.role != Role.LEADER or pr is None:
            return
        pr.last_ack = pr.heard = now
        sending = pr.snapshot_until > now
        pr.snapshot_until = 0.0
        if not m.reject:
            pr.match = max(pr.match, m.index)
            # (the answer to a transfer the log took over from: appends go on where they are)
            pr.next = pr.match + 1 if sending else max(pr.next, pr.match + 1)
            self._maybe_commit()
        self._send_append(m.src, now)

    def _maybe_commit(self) -> None:
        matches = sorted(
            (self.durable if v == self.me else self.progress[v].match if v in self.progress else 0)
            for v in self.voters
        )
        index = matches[len(matches) - self.quorum()]
        if index > self.commit and self.term_at(index) == self.term:  # §3.6.2
            self.commit = index
            self.replicate_pending = True  # followers learn the new commit index

    # ------------------------------------------------------------------ leader output
    def replicate(self, now: float) -> None:
        """Send every follower what it lacks (new entries, or a newer commit index)."""
        self.replicate_pending = False
        if self.role != Role.LEADER:
            return
        for peer in self.progress:
            self._send_append(peer, now)

    def _send_append(
        self, peer: str, now: float, heartbeat: bool = False, probe: bool = False
    ) -> None:
        """``probe``: a heartbeat without entries (a read round's: the follower answers
        it at once, even while its disk cannot take the entries)."""
        pr = self.progress[peer]
        if pr.snapshot_until > now:
            if heartbeat:
                # a snapshot is on its way: the follower keeps its leader meanwhile, and
                # its answer says how far its log goes (_snapshot_over)
                m = Message(
                    MsgType.APPEND,
                    self.term,
                    index=self.snap_index,
                    log_term=self.snap_term,
                    commit=self.commit,
                    offset=self.read_seq,
                )
                pr.last_sent = now
                self._send(peer, m)
            return
        prev = pr.next - 1
        if prev < self.snap_index:
            pr.snapshot_until = now + self.timing.snapshot_send_s
            pr.snapshot_seq = 0
            self.need_snapshot.add(peer)
            return
        room = MAX_INFLIGHT_ENTRIES - (prev - pr.match)
        entries = self.entries_after(prev, MAX_APPEND_BYTES, room) if room > 0 and not probe else []
        if not entries and not heartbeat:
            if pr.sent_commit >= self.commit:
                return
            if now - pr.last_sent < COMMIT_LAZY_S:
                # under load: the next append (a batching window away) carries the commit
                # index; tick() sends it if none comes (one message per item, not two)
                self.commit_lagging = True
                return
        prev_term = self.term_at(prev)
        assert prev_term is not None
        m = Message(
            MsgType.APPEND,
            self.term,
            index=prev,
            log_term=prev_term,
            commit=self.commit,
            offset=self.read_seq,
        )
        m.entries = entries
        pr.next = prev + len(entries) + 1
        pr.sent_commit = self.commit
        pr.last_sent = now
        self._send(peer, m)

    def snapshot_sent(self, peer: str, ok: bool, now: float, index: int = 0) -> None:
        """The driver wrote the last chunk of the snapshot at ``index`` to ``peer`` (ok),
        or gave up streaming it."""
        pr = self.progress.get(peer)
        if pr is None or pr.snapshot_until <= now:
            return
        if not ok:
            pr.snapshot_until = 0.0
            return
        # written, maybe not read yet (a stopped follower reads it when it runs again): an
        # answer to a message sent from now on comes after the follower read all of it.
        # (A read round's acks count for the rounds started before what they answer:
        # a step of read_seq without a round keeps that true.)
        self.read_seq += 1
        pr.snapshot_seq, pr.snapshot_index = self.read_seq, index

    # ------------------------------------------------------------------ reads (§6.4)
    def read_index(self, read_id: int) -> None:
        """Ask for a linearizable read index; the answer lands in :attr:`read_states` as
        ``(read_id, index)`` (index 0: refused, this node lost or never had the leader).
        A leader queues the read for its next heartbeat round (:meth:`start_reads`); a
        follower asks its leader. Raises NotLeader when no leader is known."""
        if self.role == Role.LEADER:
            self._read_next.append(("", read_id))
            self.read_pending = True
        elif self.leader:
            self._send(self.leader, Message(MsgType.READ_INDEX, self.term, offset=read_id))
        else:
            raise NotLeader("")

    def start_reads(self, now: float) -> None:
        """Start a heartbeat round for the reads waiting, if one can start now: this
        leader committed an entry of its own term (its no-op, §6.4 step 1: before that its
        commit index may be behind the previous leader's), and the last round is answered
        (reads that arrive meanwhile share the next one)."""
        self.read_pending = False
        if self.role != Role.LEADER or not self._read_next:
            return
        if self.commit < self.term_start or self._read_rounds:
            self.read_pending = True  # the commit, or the answer, brings the round
            return
        self.read_seq += 1
        rnd = _ReadRound(self.read_seq, self.commit, self._read_next, set())
        self._read_next = []
        self._read_rounds.append(rnd)
        if self.me in self.voters:
            rnd.acks.add(self.me)
        if not self._read_done():
            for peer in self.progress:
                self._send_append(peer, now, heartbeat=True, probe=True)

    def _read_acked(self, peer: str, seq: int) -> None:
        if peer not in self.voters:
            return
        for rnd in self._read_rounds:
            if rnd.seq <= seq:  # answered a message sent after the round started
                rnd.acks.add(peer)
        if self._read_done() and self._read_next:
            self.read_pending = True

    def _read_done(self) -> bool:
        """Answer the rounds a majority confirmed (oldest first: an ack counts for every
        round started before it). True if none is left in flight."""
        quorum = self.quorum()
        while self._read_rounds and len(self._read_rounds[0].acks) >= quorum:
            rnd = self._read_rounds.pop(0)
            for asker, read_id in rnd.readers:
                if asker:
                    m = Message(MsgType.READ_INDEX_RESP, self.term, offset=read_id, index=rnd.index)
                    self._send(asker, m)
                else:
                    self.read_states.append((read_id, rnd.index))
        return not self._read_rounds

    def _refuse_reads(self) -> None:
        """No longer the leader: every read waiting here is refused (asked again)."""
        readers = [r for rnd in self._read_rounds for r in rnd.readers] + self._read_next
        self._read_rounds, self._read_next = [], []
        self.read_pending = False
        for asker, read_id in readers:
            if asker:
                m = Message(MsgType.READ_INDEX_RESP, self.term, offset=read_id, reject=True)
                self._send(asker, m)
            else:
                self.read_states.append((read_id, 0))

    # ------------------------------------------------------------------ driver callbacks
    def persisted(self, index: int) -> None:
        """Everything up to ``index`` and the hard state are on disk."""
        self.unstable_from = None
        self.truncated = False
        self.hard_dirty = False
        self.durable = index
        if self.role == Role.LEADER:
            self._maybe_commit()

    def committed_entries(self) -> list[LogEntry]:
        """Committed entries not yet handed to the state machine (marks them handed)."""
        if self.commit <= self.delivered:
            return []
        start = self.delivered - self.snap_index
        out = self.log[start : self.commit - self.snap_index]
        self.delivered = self.commit
        return out

    def compact(self, index: int) -> None:
        """A snapshot now holds everything up to ``index`` (delivered): drop those entries."""
        if index <= self.snap_index:
            return
        if index > self.delivered:
            raise ValueError(f"compacting past the delivered index ({index} > {self.delivered})")
        self.snap_voters, self.snap_learners = self.membership_at(index)
        term = self.term_at(index)
        assert term is not None
        self.snap_term = term
        del self.log[: index - self.snap_index]
        self.snap_index = index

    def restore(
        self, index: int, term: int, voters: Sequence[str], learners: Sequence[str] = ()
    ) -> bool:
        """Install a snapshot from the leader (§5.3); False if it is not newer than what is
        committed here."""
        if index <= self.commit:
            return False
        if self.term_at(index) == term:
            del self.log[: index - self.snap_index]  # keep the entries after it
        else:
            self.log = []
        self.snap_index, self.snap_term = index, term
        self.snap_voters = tuple(sorted(voters))
        self.snap_learners = tuple(sorted(learners))
        self._recompute_config()
        self.commit = self.delivered = index
        self.durable = self.last_index  # the driver rewrites its log file at once
        self.unstable_from = None
        self.truncated = False
        self.events.append("config")
        return True

    def status_role(self) -> str:
        return ROLE_NAMES[self.role]
