"""The corruption checks' driver on a one-node log (the node's facade, the in-memory
engine): what it asks, what it raises and how the node then answers; the peers' answers
are handed in (the rules themselves: test_corrupt.py, the wire: tests/cluster)."""

from __future__ import annotations

import pytest

from nameserver.cluster.corrupt import CORRUPT, KvHash, PeerHash
from nameserver.cluster.corrupt_check import CorruptChecker
from nameserver.cluster.records import ALARM_CORRUPT, Member
from nameserver.errors import DataLoss
from nameserver.node import NodeFacade
from raftlog import Entry
from tests.unit.nameserver.test_node import node, put, run

__all__ = ["node"]  # the fixture, used by name

PEER_ID = 0xB


def checker(n: NodeFacade, peers: list[PeerHash] | None = None) -> CorruptChecker:
    c = CorruptChecker(n, 1.0, dial=lambda address: pytest.fail(f"dialled {address}"))
    if peers is not None:

        async def peer_hashes(revision: int) -> list[PeerHash]:
            return peers

        c.peer_hashes = peer_hashes  # type: ignore[method-assign]
    return c


def test_a_peer_that_differs_gets_corrupt_raised_and_writes_are_refused(node: NodeFacade) -> None:
    run(lambda: node.propose(put(b"a"), None))
    local = run(lambda: checker(node).local_hash())
    bad = PeerHash(PEER_ID, ("http://x",), KvHash(local.hash ^ 1, local.revision, 0))
    assert run(lambda: checker(node, [bad]).check()) == PEER_ID
    assert node.alarms(node.state.image, ALARM_CORRUPT) == [(PEER_ID, ALARM_CORRUPT)]
    with pytest.raises(DataLoss, match=f"^{CORRUPT}$"):
        run(lambda: node.propose(put(b"b"), None))


def test_a_peer_counting_revisions_otherwise_is_not_compared(node: NodeFacade) -> None:
    """While the store switches to etcd's revision count, a member that applied the switch
    and one that has not yet number the same keys differently: not a corruption."""
    run(lambda: node.propose(put(b"a"), None))
    local = run(lambda: checker(node).local_hash())
    ours = node.state.image.store_rev.revision >= 0
    moved = KvHash(local.hash ^ 1, local.revision + 2, 0)
    switching = PeerHash(PEER_ID, ("http://x",), moved, counts_etcd=not ours)
    assert run(lambda: checker(node, [switching]).check()) is None
    assert node.alarms(node.state.image) == []
    alike = PeerHash(PEER_ID, ("http://x",), moved, counts_etcd=ours)
    assert run(lambda: checker(node, [alike]).check()) == PEER_ID


def test_no_check_when_this_store_switches_its_count_between_the_two_hashes(
    node: NodeFacade,
) -> None:
    run(lambda: node.propose(put(b"a"), None))
    local = run(lambda: checker(node).local_hash())
    ahead = PeerHash(PEER_ID, ("http://x",), KvHash(local.hash ^ 1, local.revision + 2, 0))
    c = checker(node, [ahead])
    said = iter([False, True])  # before the first hash, after the read barrier
    c._counts_etcd = lambda: next(said)  # type: ignore[method-assign]
    assert run(lambda: c.check()) is None
    assert node.alarms(node.state.image) == []


def test_peers_that_agree_raise_nothing(node: NodeFacade) -> None:
    run(lambda: node.propose(put(b"a"), None))
    local = run(lambda: checker(node).local_hash())
    good = PeerHash(PEER_ID, ("http://x",), KvHash(local.hash, local.revision, 0))
    assert run(lambda: checker(node, [good]).check()) is None
    assert node.alarms(node.state.image) == []


def test_the_initial_check_fails_on_a_mismatch_only(node: NodeFacade) -> None:
    run(lambda: node.propose(put(b"a"), None))
    local = run(lambda: checker(node).local_hash())
    same = PeerHash(PEER_ID, ("u",), KvHash(local.hash, local.revision, 0))
    other_compaction = PeerHash(PEER_ID, ("u",), KvHash(local.hash ^ 1, local.revision, 3))
    differs = PeerHash(PEER_ID, ("u",), KvHash(local.hash ^ 1, local.revision, 0))
    assert run(lambda: checker(node, [same, other_compaction, PeerHash(7, ())]).initial())
    assert not run(lambda: checker(node, [same, differs]).initial())
    assert node.alarms(node.state.image) == []  # the initial check raises no alarm


def test_peers_asked_are_the_other_announced_voters(node: NodeFacade) -> None:
    me = Member("n0", node.member_id, "http://127.0.0.1:9878", ("http://127.0.0.1:2379",))
    peer = Member("n1", PEER_ID, "http://127.0.0.1:9879", ("http://127.0.0.1:2381",))
    silent = Member("n2", 0xC, "http://127.0.0.1:9880", ())
    for m in (me, peer, silent):
        entry = Entry(type="member", key=m.id.encode(), value=m.to_record())
        run(lambda e=entry: node.log.propose([e], node.timeout_s))
    asked: list[tuple[int, tuple[str, ...], int]] = []
    c = checker(node)

    async def peer_hash(member_id: int, urls: tuple[str, ...], revision: int) -> PeerHash:
        asked.append((member_id, urls, revision))
        return PeerHash(member_id, urls)

    c._peer_hash = peer_hash  # type: ignore[method-assign]
    run(lambda: c.peer_hashes(5))
    assert asked == [(PEER_ID, ("http://127.0.0.1:2381",), 5)]
