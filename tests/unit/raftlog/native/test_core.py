"""raftlog.native.core: the Raft core on a simulated network (no sockets, no disk, no clock).

Each test names the section of Ongaro's dissertation it covers. The simulation drives every
core as the native engine's driver does (send the outbox, "persist", send what waited for
persistence, deliver committed entries), with a virtual clock; a crash rebuilds a core from
what it had persisted. The property test at the end throws random partitions, drops and
crashes at a cluster and checks the safety properties of §3.6.3.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.native.core import RaftCore, Role, Timing
from raftlog.native.messages import (
    KIND_NORMAL,
    ChangeRefused,
    LogEntry,
    Message,
    MsgType,
    NotLeader,
    decode_message,
    encode_message,
)

TIMING = Timing(election_min_s=1.0, election_max_s=2.0, heartbeat_s=0.1, step_down_s=2.0)


@dataclass
class Disk:
    term: int = 0
    vote: str = ""
    entries: list[LogEntry] = field(default_factory=list)
    snap_index: int = 0
    snap_term: int = 0
    snap_voters: tuple[str, ...] = ()


class Sim:
    def __init__(self, names: list[str], seed: int = 1, voters: list[str] | None = None) -> None:
        self.rng = random.Random(seed)
        self.now = 0.0
        self.voters = voters or names
        self.cores: dict[str, RaftCore] = {}
        self.disks: dict[str, Disk] = {}
        self.applied: dict[str, list[tuple[int, int, bytes]]] = {}
        self.net: list[tuple[str, Message]] = []
        self.down: set[str] = set()
        self.cut: set[frozenset[str]] = set()  # pairs that cannot talk
        self.drop_rate = 0.0
        self.leaders_by_term: dict[int, str] = {}
        self.full: set[str] = set()  # disks that take no write (ENOSPC): nothing persists
        self.acks_checked = 0
        for n in names:
            self.add(n)

    def add(self, name: str, voters: list[str] | None = None) -> None:
        self.disks[name] = Disk(snap_voters=tuple(voters or self.voters))
        self.applied[name] = []
        self._boot(name)

    def _boot(self, name: str) -> None:
        d = self.disks[name]
        self.cores[name] = RaftCore(
            name,
            d.snap_voters,
            term=d.term,
            vote=d.vote,
            entries=list(d.entries),
            snap_index=d.snap_index,
            snap_term=d.snap_term,
            timing=TIMING,
            now=self.now,
            rng=random.Random(self.rng.random()),
        )
        self.applied[name] = [a for a in self.applied[name] if a[0] <= d.snap_index]

    def crash(self, name: str) -> None:
        self.down.add(name)

    def restart(self, name: str) -> None:
        self.down.discard(name)
        self._boot(name)

    def flush(self, name: str) -> None:
        c = self.cores[name]
        if c.replicate_pending:
            c.replicate(self.now)
        if c.read_pending:
            c.start_reads(self.now)
        self._out(name, c.outbox)
        if name in self.full:
            # the driver's degraded state: nothing is persisted, acks and votes wait
            self._deliver(name)
            return
        if c.unstable_from is not None or c.hard_dirty or c.truncated:
            d = self.disks[name]
            d.term, d.vote = c.term, c.vote
            d.entries = list(c.log)
            d.snap_index, d.snap_term, d.snap_voters = c.snap_index, c.snap_term, c.snap_voters
            c.persisted(c.last_index)
            if c.replicate_pending:
                c.replicate(self.now)
            if c.read_pending:
                c.start_reads(self.now)
        self._out(name, c.after_persist)
        self._out(name, c.outbox)
        self._deliver(name)

    def _deliver(self, name: str) -> None:
        c = self.cores[name]
        for e in c.committed_entries():
            if e.kind == KIND_NORMAL:
                self.applied[name].append((e.index, e.term, e.data))
        if c.role == Role.LEADER:
            other = self.leaders_by_term.setdefault(c.term, name)
            assert other == name, f"two leaders in term {c.term}: {other} and {name}"
        c.events.clear()

    def _out(self, src: str, box: list[tuple[str, Message]]) -> None:
        for to, m in box:
            m.src = src
            if m.type == MsgType.APPEND_RESP and not m.reject:
                self._check_ack(src, m.index)
            self.net.append((to, m))
        box.clear()

    def _check_ack(self, name: str, index: int) -> None:
        """An ack never promises what is not on the sender's disk: entries up to
        ``index`` are persisted, the same as the sender holds them."""
        d, c = self.disks[name], self.cores[name]
        self.acks_checked += 1
        if index <= d.snap_index:
            return
        on_disk = {e.index: e.term for e in d.entries if e.index > d.snap_index}
        assert index in on_disk, f"{name} acknowledged {index}, not on its disk"
        assert on_disk[index] == c.term_at(index), f"{name} acknowledged {index}, not on disk"

    def step(self, dt: float = 0.01) -> None:
        """Deliver what is in flight (in a shuffled order per destination-free view), then
        advance the clock by ``dt`` and tick everyone."""
        msgs, self.net = self.net, []
        for to, m in msgs:
            if to in self.down or m.src in self.down or to not in self.cores:
                continue
            if frozenset((to, m.src)) in self.cut or self.rng.random() < self.drop_rate:
                continue
            m2 = decode_message(encode_message(m))  # everything crosses the wire codec
            m2.src = m.src
            self.cores[to].step(m2, self.now)
            self.flush(to)
        self.now += dt
        for name, c in self.cores.items():
            if name not in self.down:
                c.tick(self.now)
                self.flush(name)

    def run(self, seconds: float, dt: float = 0.01) -> None:
        for _ in range(int(seconds / dt)):
            self.step(dt)

    def run_until(self, cond: object, seconds: float = 30.0) -> None:
        for _ in range(int(seconds / 0.01)):
            if cond():  # type: ignore[operator]
                return
            self.step()
        raise AssertionError("condition not reached in simulated time")

    def leader(self) -> str | None:
        live = [n for n, c in self.cores.items() if n not in self.down and c.role == Role.LEADER]
        return max(live, key=lambda n: self.cores[n].term) if live else None

    def propose(self, data: bytes) -> tuple[int, int]:
        leader = self.leader()
        assert leader is not None
        out = self.cores[leader].propose(data)
        self.flush(leader)
        return out

    def isolate(self, name: str) -> None:
        for other in self.cores:
            if other != name:
                self.cut.add(frozenset((name, other)))

    def heal(self) -> None:
        self.cut.clear()


def elect(sim: Sim) -> str:
    sim.run_until(lambda: sim.leader() is not None)
    leader = sim.leader()
    assert leader is not None
    return leader


def test_codec_round_trip_and_garbage() -> None:
    m = Message(MsgType.APPEND, 7, index=3, log_term=2, commit=3, flag=True, kind=2, data=b"x")
    m.entries = [LogEntry(4, 7, KIND_NORMAL, b"abc"), LogEntry(5, 7, 1, b"")]
    assert decode_message(encode_message(m)) == m
    with pytest.raises(ValueError):
        decode_message(b"\x01\x02")
    bad = bytearray(encode_message(m))
    bad[-5:] = b""  # cut into the last entry's data... or the trailing data
    with pytest.raises(ValueError):
        decode_message(bytes(bad[:60]))


def test_election_one_leader_and_replication_3_4_3_5() -> None:
    sim = Sim(["a", "b", "c"])
    leader = elect(sim)
    for i in range(20):
        sim.propose(b"v%d" % i)
    sim.run(0.5)
    logs = {n: sim.applied[n] for n in sim.cores}
    assert len(logs[leader]) == 20
    assert all(v == logs[leader] for v in logs.values())  # log matching, same order
    assert [d for _, _, d in logs[leader]] == [b"v%d" % i for i in range(20)]


def test_leader_failure_keeps_committed_entries_3_6() -> None:
    sim = Sim(["a", "b", "c"], seed=3)
    old = elect(sim)
    for i in range(5):
        sim.propose(b"x%d" % i)
    sim.run(0.3)
    sim.crash(old)
    sim.run_until(lambda: sim.leader() not in (None, old))
    new = sim.leader()
    assert new is not None and sim.cores[new].term > sim.cores[old].term
    sim.propose(b"after")
    sim.run(0.3)
    sim.restart(old)
    sim.run(3.0)
    want = [d for _, _, d in sim.applied[new]]
    assert want == [b"x0", b"x1", b"x2", b"x3", b"x4", b"after"]
    assert [d for _, _, d in sim.applied[old]] == want


def test_uncommitted_entries_of_a_cut_off_leader_are_replaced_3_6_2() -> None:
    sim = Sim(["a", "b", "c"], seed=5)
    old = elect(sim)
    sim.propose(b"committed")
    sim.run(0.3)
    sim.isolate(old)
    index, term = sim.cores[old].propose(b"lost")
    sim.flush(old)
    sim.run_until(lambda: sim.leader() not in (None, old))
    sim.propose(b"new")
    sim.run(0.3)
    sim.heal()
    sim.run(3.0)
    assert sim.cores[old].role == Role.FOLLOWER
    for n in sim.cores:
        assert [d for _, _, d in sim.applied[n]] == [b"committed", b"new"]
    assert sim.cores[old].term_at(index) != term  # the entry was overwritten


def test_check_quorum_makes_a_cut_off_leader_step_down_6_2() -> None:
    sim = Sim(["a", "b", "c"], seed=7)
    leader = elect(sim)
    sim.isolate(leader)
    sim.run(TIMING.step_down_s + 0.2)
    assert sim.cores[leader].role == Role.FOLLOWER
    with pytest.raises(NotLeader):
        sim.cores[leader].propose(b"x")
    # what the driver logs of it ("lost-quorum"): each voter's silence at the step-down
    silence = sim.cores[leader].quorum_silence
    assert sorted(silence) == sorted(n for n in sim.cores if n != leader)
    assert all(TIMING.step_down_s <= s < TIMING.step_down_s + 0.2 for s in silence.values())


def test_pre_vote_a_rejoining_node_does_not_depose_the_leader_9_6() -> None:
    sim = Sim(["a", "b", "c"], seed=11)
    leader = elect(sim)
    term = sim.cores[leader].term
    other = next(n for n in sim.cores if n != leader)
    sim.isolate(other)
    sim.run(10.0)  # it times out over and over, but only pre-votes: its term stays put
    assert sim.cores[other].term == term
    sim.heal()
    sim.run(2.0)
    assert sim.leader() == leader and sim.cores[leader].term == term


def test_add_and_remove_a_member_4_1() -> None:
    sim = Sim(["a", "b", "c"], seed=13)
    leader = elect(sim)
    for i in range(5):
        sim.propose(b"e%d" % i)
    sim.run(0.3)
    sim.add("d", voters=["a", "b", "c", "d"])
    sim.run(3.0)  # not a member yet: its pre-votes are ignored, nobody's term moves
    assert sim.leader() == leader
    sim.cores[leader].propose_change("add", "d")
    with pytest.raises(ChangeRefused, match="in progress"):
        sim.cores[leader].propose_change("add", "e")
    sim.flush(leader)
    sim.run(1.0)
    assert sim.cores["d"].voters == ("a", "b", "c", "d")
    assert [d for _, _, d in sim.applied["d"]] == [b"e%d" % i for i in range(5)]
    victim = next(n for n in ("a", "b", "c") if n != leader)
    sim.cores[leader].propose_change("remove", victim)
    sim.flush(leader)
    sim.run(1.0)
    assert victim not in sim.cores[leader].voters
    sim.crash(victim)
    sim.propose(b"after")
    sim.run(1.0)
    assert sim.applied["d"][-1][2] == b"after"


def test_a_leader_that_removes_itself_steps_down_4_2_2() -> None:
    sim = Sim(["a", "b", "c"], seed=17)
    leader = elect(sim)
    sim.run(0.5)
    sim.cores[leader].propose_change("remove", leader)
    sim.flush(leader)
    sim.run_until(lambda: sim.leader() not in (None, leader), seconds=10)
    assert leader not in sim.cores[sim.leader() or ""].voters
    sim.run(5.0)
    assert sim.cores[leader].role == Role.FOLLOWER  # and it never campaigns again
    quiet_s = 2 * TIMING.election_max_s  # and it knows it was removed (§4.2.3)
    assert [n for n, c in sim.cores.items() if c.removed(sim.now, quiet_s)] == [leader]


def test_leadership_transfer_3_10() -> None:
    sim = Sim(["a", "b", "c"], seed=19)
    leader = elect(sim)
    sim.propose(b"x")
    sim.run(0.3)
    target = next(n for n in sim.cores if n != leader)
    sim.cores[leader].transfer(target, sim.now)
    sim.flush(leader)
    sim.run_until(lambda: sim.leader() == target, seconds=1.0)  # far below an election timeout
    assert sim.cores[target].term == sim.cores[leader].term
    with pytest.raises(ChangeRefused):
        sim.cores[target].transfer("zz", sim.now)


def test_snapshot_compaction_and_catch_up_from_the_snapshot_5() -> None:
    sim = Sim(["a", "b", "c"], seed=23)
    leader = elect(sim)
    slow = next(n for n in sim.cores if n != leader)
    sim.crash(slow)
    for i in range(30):
        sim.propose(b"s%d" % i)
    sim.run(0.3)
    core = sim.cores[leader]
    core.compact(core.delivered)  # a snapshot now holds everything applied
    sim.flush(leader)
    index, term = core.snap_index, core.snap_term
    sim.restart(slow)
    sim.run_until(lambda: slow in core.need_snapshot or core.progress[slow].snapshot_until > 0)
    # what the driver does: stream the file, then the follower installs it
    follower = sim.cores[slow]
    assert follower.restore(index, term, core.config_at(index))
    sim.applied[slow] = list(sim.applied[leader])
    core.step(Message(MsgType.SNAPSHOT_RESP, core.term, index=index, src=slow), sim.now)
    sim.flush(leader)
    sim.propose(b"tail")
    sim.run(0.5)
    assert sim.applied[slow][-1][2] == b"tail"
    assert follower.last_index == core.last_index and follower.snap_index == index


def test_followers_that_cannot_persist_keep_the_leader_and_ack_only_their_disk_6_2() -> None:
    """Followers whose disks are full answer heartbeats at once with their last index on
    disk: the leader keeps its quorum (§6.2: no step-down, no new term) and commits nothing
    new until a majority persisted it; when space returns, it commits."""
    sim = Sim(["a", "b", "c"])
    leader = elect(sim)
    index, _ = sim.propose(b"before")
    sim.run_until(lambda: all(c.commit >= index for c in sim.cores.values()))
    term = sim.cores[leader].term
    followers = [n for n in sim.cores if n != leader]
    sim.full.update(followers)
    checked = sim.acks_checked
    late, _ = sim.propose(b"while full")
    sim.run(3 * TIMING.step_down_s)
    core = sim.cores[leader]
    assert sim.leader() == leader and core.term == term
    assert all(c.term == term for c in sim.cores.values())
    assert core.commit < late  # only the leader holds it on disk
    assert sim.acks_checked > checked + 20  # heartbeats were answered (and checked)
    assert all(core.progress[f].match == index for f in followers)
    sim.full.clear()
    sim.run_until(lambda: all(c.commit >= late for c in sim.cores.values()))
    assert sim.leader() == leader and core.term == term
    assert [d for _, _, d in sim.applied[followers[0]]] == [b"before", b"while full"]


def test_a_leader_that_cannot_persist_keeps_its_followers_and_commits_through_them() -> None:
    sim = Sim(["a", "b", "c"])
    leader = elect(sim)
    term = sim.cores[leader].term
    sim.full.add(leader)
    index, _ = sim.propose(b"x")
    sim.run(3 * TIMING.step_down_s)
    assert sim.leader() == leader and sim.cores[leader].term == term
    # a majority of followers persisted it: committed, though not on the leader's disk
    assert all(c.commit >= index for c in sim.cores.values())
    sim.full.clear()
    sim.run(0.5)
    assert sim.cores[leader].durable >= index


def test_an_ack_held_for_the_disk_is_dropped_when_its_entries_are_replaced_3_5() -> None:
    """An ack waiting for the disk that promises entries a newer leader's log replaces is
    never sent: the deposed leader must not count entries this node no longer holds."""
    core = RaftCore("b", ["a", "b", "c"], timing=TIMING)
    core.step(
        Message(
            MsgType.APPEND,
            1,
            entries=[LogEntry(1, 1, KIND_NORMAL, b"x"), LogEntry(2, 1, KIND_NORMAL, b"y")],
            src="a",
        ),
        0.0,
    )
    assert [m.index for _, m in core.after_persist] == [2]
    # before the disk took them, leader c of term 2 replaces entry 2
    core.step(
        Message(
            MsgType.APPEND,
            2,
            index=1,
            log_term=1,
            entries=[LogEntry(2, 2, KIND_NORMAL, b"z")],
            src="c",
        ),
        0.1,
    )
    assert [(to, m.term, m.index) for to, m in core.after_persist] == [("c", 2, 2)]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), drop=st.sampled_from([0.0, 0.05, 0.2]))
def test_safety_under_partitions_drops_crashes_and_full_disks_3_6_3(seed: int, drop: float) -> None:
    """Besides §3.6.3's safety properties, the simulation checks every ack it carries
    (:meth:`Sim._check_ack`): none promises an entry that is not on the sender's disk; and
    every read index answered (§6.4, asked of a random node each round) covers everything
    any node knew committed when the read was asked (no stale read, deposed leaders
    included)."""
    names = ["a", "b", "c", "d", "e"]
    sim = Sim(names, seed=seed)
    sim.drop_rate = drop
    rng = random.Random(seed)
    accepted: list[tuple[int, int, bytes]] = []
    floors: dict[int, int] = {}  # read id -> the highest commit index known when asked
    answered: list[int] = []

    def check_reads() -> None:
        for core in sim.cores.values():
            states, core.read_states = core.read_states, []
            for read_id, index in states:
                if index:
                    assert index >= floors[read_id], (read_id, index, floors[read_id])
                    answered.append(read_id)

    def ask(name: str, read_id: int) -> None:
        floors[read_id] = max(c.commit for c in sim.cores.values())
        try:
            sim.cores[name].read_index(read_id)
        except NotLeader:
            return
        sim.flush(name)

    for round_ in range(40):
        check_reads()
        live = [n for n in names if n not in sim.down]
        if live:
            ask(rng.choice(live), round_ + 1)
        action = rng.random()
        leader = sim.leader()
        if action < 0.1 and len(sim.down) < 2:
            sim.crash(rng.choice(names))
        elif action < 0.2 and leader is not None and len(sim.down) < 2:
            sim.crash(leader)
        elif action < 0.35 and sim.down:
            sim.restart(rng.choice(sorted(sim.down)))
        elif action < 0.45:
            sim.heal()
            a, b = rng.sample(names, 2)
            sim.cut.add(frozenset((a, b)))
        elif action < 0.55 and leader is not None:
            sim.heal()
            sim.isolate(leader)  # it keeps accepting proposals that will be overwritten
        elif action < 0.65:
            sim.heal()
        elif action < 0.8:
            if len(sim.full) < 2:
                sim.full.add(rng.choice(names))  # a disk fills up ...
            else:
                sim.full.discard(rng.choice(sorted(sim.full)))  # ... or gets space back
        leader = sim.leader()
        if leader is not None:
            try:
                index, term = sim.cores[leader].propose(b"r%d" % round_)
                accepted.append((index, term, b"r%d" % round_))
                sim.flush(leader)
            except NotLeader:
                pass
        sim.run(rng.choice([0.05, 0.3, 1.0]))
    sim.heal()
    sim.drop_rate = 0.0
    sim.full.clear()
    for n in sorted(sim.down):
        sim.restart(n)
    sim.run(6.0)
    leader = sim.leader()
    assert leader is not None
    index, term = sim.cores[leader].propose(b"final")
    accepted.append((index, term, b"final"))
    sim.run(2.0)
    check_reads()
    ask(leader, 1000)
    sim.run(0.5)
    check_reads()
    assert 1000 in answered
    # State machine safety: every node applied the same sequence (a prefix of the longest)
    longest = max(sim.applied.values(), key=len)
    assert longest, "nothing was ever committed"
    for n, applied in sim.applied.items():
        assert applied == longest[: len(applied)], n
    # a value applied anywhere sits at the index and term it was proposed at
    by_data = {d: (i, t) for i, t, d in accepted}
    for i, t, d in longest:
        assert by_data[d] == (i, t)


def test_a_new_leader_finds_its_predecessor_s_newest_item_3_6() -> None:
    """What the engine hands ``NativeConfig.on_lead``: the newest normal entry in the new
    leader's log, past its own no-op (the log's time comes from its stamps)."""
    sim = Sim(["a", "b", "c"], seed=3)
    old = elect(sim)
    assert sim.cores[old].newest_normal_data() == b""  # only its no-op so far
    for i in range(3):
        sim.propose(b"x%d" % i)
    sim.run(0.3)
    sim.crash(old)
    sim.run_until(lambda: sim.leader() not in (None, old))
    new = sim.leader()
    assert new is not None
    assert sim.cores[new].newest_normal_data() == b"x2"
