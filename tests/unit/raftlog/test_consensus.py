"""raftlog.consensus.InMemoryEngine: the in-memory implementation of the ConsensusEngine
interface, membership included."""

from __future__ import annotations

from raftlog import ConsensusEngine, InMemoryEngine, Member, ProposeError


def outcome(start: object) -> tuple[int | None, Exception | None]:
    got: list[tuple[int | None, Exception | None]] = []
    start(lambda index, err: got.append((index, err)))  # type: ignore[operator]
    (result,) = got
    return result


def test_members_are_named_by_address_and_changes_take_effect_at_once() -> None:
    engine: ConsensusEngine = InMemoryEngine("n0", "127.0.0.1:1")
    assert engine.members() == [Member("127.0.0.1:1", "n0")]
    index, err = outcome(lambda cb: engine.add_member("127.0.0.1:2", cb))
    assert err is None and index
    assert engine.members() == [Member("127.0.0.1:1", "n0"), Member("127.0.0.1:2", "")]
    engine.name_member("n1", "127.0.0.1:2")
    assert engine.members()[1] == Member("127.0.0.1:2", "n1")
    assert engine.status().members == {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2"}
    _, err = outcome(lambda cb: engine.remove_member("127.0.0.1:2", cb))
    assert err is None and engine.members() == [Member("127.0.0.1:1", "n0")]
    assert engine.is_leader() and engine.leader_address() == "127.0.0.1:1"


def test_changes_it_cannot_make_are_refused() -> None:
    engine = InMemoryEngine("n0", "127.0.0.1:1")
    for start in (
        lambda cb: engine.add_member("127.0.0.1:1", cb),  # already a member
        lambda cb: engine.remove_member("127.0.0.1:9", cb),  # not one
        lambda cb: engine.remove_member("127.0.0.1:1", cb),  # would leave none
        lambda cb: engine.transfer_leadership(None, cb),  # nobody else runs
    ):
        index, err = outcome(start)
        assert index is None and isinstance(err, ProposeError)
    assert engine.members() == [Member("127.0.0.1:1", "n0")]
