"""RocketMQ replicator workers against a real metaledger node: per-partition claims decide
who replicates a source queue, and the claim key's create revision fences that queue's offset
commits (issue 19 item 2: "queues are spread over the live workers of a job and moved when
one dies; a paused worker that lost its lease can neither send nor commit")."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nameserver.client import Client, FailedPrecondition, LeaseLost, NotFound
from replicator.lease import Fence
from replicator.rocketmq.assign import Membership, assignment
from replicator.rocketmq.checkpoint import QueueCheckpoint, load_checkpoints
from tests.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster

JOB = "mirror1"
P = "TopicA/broker-a/0"


@pytest.fixture
def clients(tmp_path: Path) -> Iterator[tuple[Client, Client]]:
    with Cluster(tmp_path / "node", n=1) as c:
        c.wait_ready(30)
        with Client(c.endpoints, timeout_s=10) as a, Client(c.endpoints, timeout_s=10) as b:
            yield a, b


def commit(client: Client, fence: Fence, partition: str, next_offset: int) -> None:
    ckpt = QueueCheckpoint(next_offset, dest_topic="TopicA")
    client.offsets_commit(
        JOB,
        partition,
        ckpt.encode(),
        lease_id=fence.lease_id,
        fencing_token=fence.token,
        position=ckpt.next_offset,
    )


def test_one_claim_wins_and_a_dead_workers_queues_move_with_their_fence(
    clients: tuple[Client, Client],
) -> None:
    ca, cb = clients
    a = Membership(ca, JOB, "worker-a", ttl_s=2)
    b = Membership(cb, JOB, "worker-b", ttl_s=2)
    a.join()
    b.join()
    assert a.workers() == b.workers() == ["worker-a", "worker-b"]
    partitions = [f"TopicA/broker-a/{q}" for q in range(8)]
    assert sorted(a.mine(partitions) + b.mine(partitions)) == sorted(partitions)

    # both claim at once: exactly one wins
    got: dict[str, Fence | None] = {}
    threads = [
        threading.Thread(target=lambda m=m: got.__setitem__(m.worker, m.claim(P))) for m in (a, b)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    winners = [w for w, f in got.items() if f is not None]
    assert len(winners) == 1, got
    # make A the holder for the rest of the story
    if winners == ["worker-b"]:
        b.release(P)
        assert b.claims() == {}
        wait_until(lambda: a.claim(P), 10, "A claims the released partition")
    fa = a.claim(P)
    assert fa is not None and fa == a.claims()[P]  # claiming again: the same fence
    assert fa.lease_id == a.lease_id and fa.key.endswith(P.encode())
    assert b.claim(P) is None and a.holder(P) == "worker-a"
    commit(ca, fa, P, 100)

    # A is "paused": its keeper stops renewing, nothing revokes the lease
    assert a._keeper is not None
    a._keeper.stop()
    fb = wait_until(lambda: b.claim(P), 20, "B claims A's partition once A's lease expired")
    assert fb is not None and fb.token > fa.token and b.holder(P) == "worker-b"
    assert b.workers() == ["worker-b"]
    assert b.mine(partitions) == partitions
    with pytest.raises(LeaseLost):
        a.check()  # its local deadline passed: it must not send

    assert load_checkpoints(cb, JOB)[P].next_offset == 100  # B resumes from A's commit
    commit(cb, fb, P, 150)
    with pytest.raises(NotFound):
        commit(ca, fa, P, 200)  # the paused A wakes: its lease is gone, refused
    assert load_checkpoints(cb, JOB)[P].next_offset == 150
    b.leave()
    assert b.workers() == []
    a.leave()


def test_a_worker_that_released_a_partition_cannot_commit_it_again(
    clients: tuple[Client, Client],
) -> None:
    ca, cb = clients
    a = Membership(ca, JOB, "worker-a", ttl_s=5)
    b = Membership(cb, JOB, "worker-b", ttl_s=5)
    a.join()
    b.join()
    try:
        fa = a.claim(P)
        assert fa is not None
        commit(ca, fa, P, 10)
        a.release(P)  # a rebalance gave it to B
        fb = b.claim(P)
        assert fb is not None and fb.token > fa.token
        commit(cb, fb, P, 20)
        # A's lease is alive, but its claim key is gone: its token is no longer of its lease
        with pytest.raises(FailedPrecondition):
            commit(ca, fa, P, 30)
        assert load_checkpoints(ca, JOB)[P].next_offset == 20

        # A takes it back later (B released it): the newer claim commits, B's old one cannot
        b.release(P)
        fa2 = a.claim(P)
        assert fa2 is not None and fa2.token > fb.token
        commit(ca, fa2, P, 25)
        with pytest.raises(FailedPrecondition):
            commit(cb, fb, P, 40)

        # revoked behind its back (an operator): a claim says the lease is lost
        a2 = Membership(ca, JOB, "worker-a2", ttl_s=30)
        a2.join()
        ca.lease_revoke(a2.lease_id)
        with pytest.raises(LeaseLost):
            a2.claim("T/b/9")
        a2.leave()

        # leaving revokes the lease: the claims go at once, another worker claims right away
        a.leave()
        with pytest.raises(LeaseLost):
            a.check()
        assert b.claim(P) is not None
        assert b.workers() == ["worker-b"]
    finally:
        a.leave()
        b.leave()


def test_assignment_over_the_live_workers_is_the_same_for_everyone(
    clients: tuple[Client, Client],
) -> None:
    ca, cb = clients
    members = [Membership(ca if i % 2 else cb, JOB, f"w{i}", ttl_s=5) for i in range(3)]
    for m in members:
        m.join()
    try:
        partitions = [f"T/b/{q}" for q in range(12)]
        views = [m.workers() for m in members]
        assert views == [["w0", "w1", "w2"]] * 3
        mine = [m.mine(partitions) for m in members]
        assert sorted(p for ps in mine for p in ps) == sorted(partitions)
        assert mine[0] == assignment(["w0", "w1", "w2"], partitions, "w0")
        # each claims what it was assigned: every claim succeeds
        for m, ps in zip(members, mine, strict=True):
            assert all(m.claim(p) is not None for p in ps)
    finally:
        for m in members:
            m.leave()
