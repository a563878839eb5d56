"""raftlog.native.core: learners (non-voting members, as etcd 3.4 has them).

A learner gets the log and snapshots but never votes, campaigns, or counts for a quorum, a
commit or a read round; it is promoted to a voter once its log holds nearly all of the
leader's (etcd-io/raft ``tracker``/``confchange``: a learner's progress is tracked, its
match is not in the quorum; single-server changes, dissertation §4.1 and §4.2.1 "catching
up new servers", which is what a learner does before it votes).
"""

from __future__ import annotations

import pytest

from raftlog.native.core import LEARNER_READY_SHARE, RaftCore, Role
from raftlog.native.messages import (
    KIND_CONFIG,
    ChangeRefused,
    LearnerNotReady,
    LogEntry,
    Message,
    MsgType,
    UnsafeChange,
    decode_config,
    decode_voters,
    encode_config,
    standalone_config,
)
from tests.unit.raftlog.native.test_core import TIMING, Sim, elect


def values(sim: Sim, name: str) -> list[bytes]:
    return [d for _, _, d in sim.applied[name]]


def with_learner(seed: int, entries: int = 5) -> tuple[Sim, str]:
    """Three voters and "d" added as a learner (committed); the leader's name."""
    sim = Sim(["a", "b", "c"], seed=seed)
    leader = elect(sim)
    for i in range(entries):
        sim.propose(b"e%d" % i)
    sim.run(0.3)
    sim.add("d", voters=["a", "b", "c"])
    sim.cores[leader].propose_change("learner", "d")
    sim.flush(leader)
    sim.run(1.0)
    return sim, leader


def test_config_codec_keeps_the_old_form_without_learners_4_1() -> None:
    # no learner: the bytes an older build writes and reads (a JSON list of voters)
    assert encode_config(["b", "a"]) == b'["a", "b"]'
    assert decode_config(b'["b", "a"]') == (("a", "b"), ())
    both = encode_config(["b", "a"], ["d"])
    assert decode_config(both) == (("a", "b"), ("d",))
    assert decode_voters(both) == ("a", "b")
    for garbage in (b"{}", b'{"voters": ["a"], "learners": 3}', b"7"):
        with pytest.raises(ValueError):
            decode_config(garbage)


def test_a_learner_gets_the_log_but_is_not_in_the_quorum_4_2_1() -> None:
    sim, leader = with_learner(seed=61)
    core = sim.cores[leader]
    assert core.learners == ("d",) and core.voters == ("a", "b", "c")
    assert sim.cores["d"].learners == ("d",)
    assert values(sim, "d") == [b"e%d" % i for i in range(5)]
    # the learner's match never makes a commit: with one voter down, two of three voters
    # still commit; with two down, nothing commits although the learner holds it
    voters = [n for n in ("a", "b", "c") if n != leader]
    sim.crash(voters[0])
    sim.propose(b"two of three")
    sim.run(0.5)
    assert values(sim, "d")[-1] == b"two of three"
    sim.crash(voters[1])
    index, _ = sim.propose(b"no quorum")
    sim.run(0.5)
    assert sim.cores["d"].last_index >= index
    assert core.progress["d"].match >= index
    assert core.commit < index
    # and check quorum counts voters only: the learner's answers do not keep it leading
    sim.run(TIMING.step_down_s + 0.5)
    assert core.role != Role.LEADER


def test_killing_the_learner_costs_no_quorum_4_2_1() -> None:
    sim, leader = with_learner(seed=67)
    sim.crash("d")
    sim.propose(b"without the learner")
    sim.run(TIMING.step_down_s + 1.0)
    assert sim.leader() == leader
    assert values(sim, leader)[-1] == b"without the learner"
    sim.restart("d")  # and it catches up when it comes back
    sim.run(1.0)
    assert values(sim, "d")[-1] == b"without the learner"


def test_a_learner_never_campaigns_and_its_votes_do_not_count_3_4() -> None:
    sim, leader = with_learner(seed=71)
    learner = sim.cores["d"]
    for n in ("a", "b", "c"):
        sim.crash(n)
    sim.run(5 * TIMING.election_max_s)
    assert learner.role == Role.FOLLOWER and learner.term == sim.cores[leader].term
    assert not any(m.type in (MsgType.VOTE, MsgType.PRE_VOTE) for _, m in sim.net)
    # a candidate counts only voters: a learner's grant does not elect it
    cand = RaftCore("a", ["a", "b", "c"], learners=["d"], timing=TIMING)
    cand._campaign(0.0, pre=False)
    assert {to for to, _ in cand.after_persist} == {"b", "c"}
    cand.step(Message(MsgType.VOTE_RESP, cand.term, src="d"), 0.1)
    assert cand.role == Role.CANDIDATE
    cand.step(Message(MsgType.VOTE_RESP, cand.term, src="b"), 0.2)
    assert cand.role == Role.LEADER


def test_promote_waits_for_the_learner_to_catch_up_then_it_votes_4_2_1() -> None:
    sim = Sim(["a", "b", "c"], seed=73)
    leader = elect(sim)
    core = sim.cores[leader]
    sim.run(0.3)
    sim.add("d", voters=["a", "b", "c"])
    sim.crash("d")  # added while down: it holds nothing
    core.propose_change("learner", "d")
    sim.flush(leader)
    for i in range(20):
        sim.propose(b"p%d" % i)
    sim.run(0.5)
    assert core.commit >= core.config_index
    with pytest.raises(LearnerNotReady, match="90%"):
        core.propose_change("promote", "d")
    with pytest.raises(ChangeRefused, match="not a learner"):
        core.propose_change("promote", "b")
    with pytest.raises(ChangeRefused, match="already a member"):
        core.propose_change("add", "d")
    sim.restart("d")
    sim.run_until(lambda: core.progress["d"].match >= LEARNER_READY_SHARE * core.durable)
    core.propose_change("promote", "d")
    sim.flush(leader)
    sim.run(1.0)
    assert core.voters == ("a", "b", "c", "d") and core.learners == ()
    assert sim.cores["d"].voters == ("a", "b", "c", "d")
    # now it counts: two voters down of four leave no quorum
    others = [n for n in ("a", "b", "c") if n != leader]
    sim.crash(others[0])
    sim.crash(others[1])
    index, _ = sim.propose(b"needs three of four")
    sim.run(0.5)
    assert core.commit < index
    sim.restart(others[0])
    sim.run(1.0)
    assert values(sim, "d")[-1] == b"needs three of four"


def test_removing_a_learner_and_adding_one_skip_the_started_check_4_1() -> None:
    sim = Sim(["a", "b", "c"], seed=79)
    leader = elect(sim)
    core = sim.cores[leader]
    sim.run(0.5)
    sim.crash(next(n for n in sim.cores if n != leader))
    sim.run(TIMING.election_max_s + 0.2)
    # 2 started of 3: adding a voter would be refused (2 of 4, quorum 3), a learner is not
    with pytest.raises(UnsafeChange):
        core.propose_change("add", "x")
    core.propose_change("learner", "x")
    sim.flush(leader)
    sim.run(0.5)
    assert core.learners == ("x",) and core.role == Role.LEADER
    core.propose_change("remove", "x")
    sim.flush(leader)
    sim.run(TIMING.step_down_s + 0.5)  # (it never answered: forgotten once silent that long)
    assert core.learners == () and "x" not in core.progress
    assert core.voters == ("a", "b", "c")


def test_a_learner_catches_up_from_a_snapshot_and_keeps_its_role_5_3() -> None:
    sim, leader = with_learner(seed=83)
    core = sim.cores[leader]
    sim.crash("d")
    for i in range(30):
        sim.propose(b"s%d" % i)
    sim.run(0.3)
    core.compact(core.delivered)
    assert core.snap_learners == ("d",)
    index, term = core.snap_index, core.snap_term
    sim.restart("d")
    sim.run_until(lambda: "d" in core.need_snapshot or core.progress["d"].snapshot_until > 0)
    learner = sim.cores["d"]
    voters, learners = core.membership_at(index)
    assert learner.restore(index, term, voters, learners)
    assert learner.learners == ("d",) and learner.voters == ("a", "b", "c")
    sim.applied["d"] = list(sim.applied[leader])
    core.step(Message(MsgType.SNAPSHOT_RESP, core.term, index=index, src="d"), sim.now)
    sim.flush(leader)
    sim.propose(b"tail")
    sim.run(0.5)
    assert values(sim, "d")[-1] == b"tail"


def test_a_removed_learner_knows_it_and_a_kept_one_does_not_4_2_3() -> None:
    sim, leader = with_learner(seed=89)
    quiet_s = 2 * TIMING.election_max_s
    sim.run(quiet_s + 1)
    assert not sim.cores["d"].removed(sim.now, quiet_s)
    sim.cores[leader].propose_change("remove", "d")
    sim.flush(leader)
    sim.run(quiet_s + 1)
    assert sim.cores["d"].removed(sim.now, quiet_s)


def test_force_new_cluster_drops_learners_too_4_1() -> None:
    entries = [LogEntry(1, 1, KIND_CONFIG, encode_config(["a", "b"], ["c"]))]
    forced = standalone_config("a", ["a", "b"], entries, 0, 0, 1)
    assert forced is not None and decode_config(forced.data) == (("a",), ())
    alone = [LogEntry(1, 1, KIND_CONFIG, encode_config(["a"]))]
    assert standalone_config("a", ["a", "b"], alone, 0, 0, 1) is None
