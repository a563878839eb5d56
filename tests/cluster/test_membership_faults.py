"""Members that lose their data, members that never start, a cluster that lost its quorum:
real processes (issue 14, items 4 and 5).

* A follower whose data dir is wiped and that is restarted with the same command is caught
  up by the leader, from the log or from a snapshot (Raft §3.5, §5.3; the leader notices
  that the follower's log ends below what it had acknowledged).
* etcd's strict reconfiguration check: a membership change that would leave fewer started
  members than a quorum is refused (FAILED_PRECONDITION), so adding members that never
  start does not cost the cluster its leader (Raft §4.1 changes one server at a time).
* ``serve --force-new-cluster`` (etcd's disaster recovery): a member's data, restarted
  alone after the others are gone for good, serves every write it had acknowledged and
  grows again with member add.

Each test ends with every acknowledged write read back from the nodes that remain.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from protos.etcdserverpb import rpc_pb2
from tests.harness import Cluster, free_ports, grpc_code, prefix_end, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.faults]

PUTS_PER_TXN = 100
#: keys written before the wipe (the test's own default, or this variable's: to time a
#: bigger catch-up, e.g. METALEDGER_WIPE_KEYS=1000000)
WIPE_KEYS_ENV = "METALEDGER_WIPE_KEYS"


class FlagCluster(Cluster):
    """A :class:`Cluster` whose nodes can get extra ``serve`` flags (all nodes, or one)."""

    def __init__(self, root: Path, n: int = 3, flags: tuple[str, ...] = ()) -> None:
        self.flags = flags
        self.extra: dict[int, list[str]] = {}  # node -> flags for its next start only
        super().__init__(root, n)

    def command(self, i: int) -> list[str]:
        cmd = super().command(i)
        assert "serve" in cmd, "these tests need the CLI launcher (serve flags)"
        return [*cmd, *self.flags, *self.extra.pop(i, [])]


@pytest.fixture
def make_cluster(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., FlagCluster]]:
    made: list[FlagCluster] = []

    def make(flags: tuple[str, ...] = ()) -> FlagCluster:
        c = FlagCluster(tmp_path / f"cluster{len(made)}", 3, flags)
        made.append(c)
        c.wait_ready(30)
        c.wait_announced(30)
        return c

    yield make
    failed = any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
        for when in ("setup", "call")
    )
    for c in made:
        c.close(failed=failed)


def put_many(cluster: Cluster, prefix: bytes, count: int) -> dict[bytes, bytes]:
    """``count`` keys under ``prefix`` in transactions of PUTS_PER_TXN puts (through whoever
    leads); returns what was acknowledged."""
    acked: dict[bytes, bytes] = {}
    for start in range(0, count, PUTS_PER_TXN):
        batch = {
            prefix + b"%08d" % i: b"value %d" % i
            for i in range(start, min(count, start + PUTS_PER_TXN))
        }
        ops = [
            rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=k, value=v))
            for k, v in batch.items()
        ]
        txn = rpc_pb2.TxnRequest(success=ops)

        def commit(txn: rpc_pb2.TxnRequest = txn) -> bool:
            leader = cluster.leader(20)
            cluster.stub(leader).Txn(txn, timeout=10)
            return True

        wait_until(commit, 30, f"a transaction of {len(ops)} puts is acknowledged")
        acked.update(batch)
    return acked


def read_prefix(cluster: Cluster, i: int, prefix: bytes, serializable: bool) -> dict[bytes, bytes]:
    """Every key under ``prefix`` on node i, in pages (a million keys pass the response
    size limit in one)."""
    got: dict[bytes, bytes] = {}
    key, end = prefix, prefix_end(prefix)
    while True:
        resp = cluster.stub(i).Range(
            rpc_pb2.RangeRequest(key=key, range_end=end, limit=10_000, serializable=serializable),
            timeout=30,
        )
        got.update((kv.key, kv.value) for kv in resp.kvs)
        if not resp.more:
            return got
        key = resp.kvs[-1].key + b"\x00"


def assert_has(cluster: Cluster, i: int, prefix: bytes, acked: dict[bytes, bytes]) -> None:
    got = read_prefix(cluster, i, prefix, serializable=True)
    missing = sorted(k for k in acked if k not in got)
    wrong = sorted(k for k in acked if k in got and got[k] != acked[k])
    assert not missing and not wrong, (
        f"{cluster.nodes[i].id} lacks acknowledged writes: {len(missing)} missing "
        f"(e.g. {missing[:3]}), {len(wrong)} wrong, of {len(acked)}"
    )


def wipe(cluster: Cluster, i: int) -> None:
    cluster.kill(i)
    shutil.rmtree(cluster.data_dir(i))


def unreachable_peer_url() -> str:
    """A loopback peer URL nothing listens on (a member that never starts)."""
    return f"http://127.0.0.1:{free_ports(1)[0]}"


# --------------------------------------------------------------------------- wipe and rejoin
@pytest.mark.parametrize(
    ("flags", "keys"),
    [
        pytest.param((), 20_000, id="from-the-log"),
        pytest.param(("--snapshot-every-items", "40"), 20_000, id="from-a-snapshot"),
    ],
)
def test_a_wiped_follower_restarted_with_the_same_command_catches_up(
    make_cluster: Callable[..., FlagCluster], flags: tuple[str, ...], keys: int
) -> None:
    """§3.5/§5.3: its log is empty, the leader remembers a far higher match; the leader
    starts over from what the follower has, and the follower then serves serializable reads
    of every acknowledged write (before the fix: end = commit = apply = 0 forever)."""
    keys = int(os.environ.get(WIPE_KEYS_ENV) or keys)
    cluster = make_cluster(flags)
    acked = put_many(cluster, b"wipe/", keys)
    leader = cluster.leader()
    victim = next(i for i in range(cluster.n) if i != leader)
    target = cluster.wait_converged()
    wipe(cluster, victim)
    started = time.monotonic()
    cluster.start(victim)
    cluster.wait_applied(target, [victim], timeout=max(120.0, keys / 2_000))
    took = time.monotonic() - started
    assert_has(cluster, victim, b"wipe/", acked)
    more = put_many(cluster, b"after/", 200)  # and it keeps up afterwards
    cluster.wait_converged()
    assert_has(cluster, victim, b"after/", more)
    said = [i for i in range(cluster.n) if "lost its log" in cluster.log_text(i)]
    assert said, "no leader said that the follower lost its log"
    print(
        f"wiped follower {cluster.nodes[victim].id} caught up {keys} keys "
        f"(apply offset {target}, {' '.join(flags) or 'no snapshots'}) in {took:.1f} s"
    )


# --------------------------------------------------------------------------- strict reconfig
def test_adding_members_that_never_start_never_costs_the_leader(
    make_cluster: Callable[..., FlagCluster],
) -> None:
    """etcd's --strict-reconfig-check: 3 started of 4 (quorum 3) and of 5 (quorum 3) are
    allowed; 3 of 6 (quorum 4) is refused with FAILED_PRECONDITION, and the cluster keeps
    its leader and its writes throughout (before: three adds, no leader ever again)."""
    cluster = make_cluster()
    leader = cluster.leader()
    added = []
    for _ in range(2):
        url = unreachable_peer_url()
        request = rpc_pb2.MemberAddRequest(peerURLs=[url])
        cluster.cluster_stub(leader).MemberAdd(request, timeout=20)
        added.append(url)
        cluster.put_retrying(leader, b"still/%d" % len(added), b"ok")
    third = rpc_pb2.MemberAddRequest(peerURLs=[unreachable_peer_url()])
    for via in range(cluster.n):  # the leader refuses, and so do followers (forwarded)
        with pytest.raises(grpc.RpcError) as refused:
            cluster.cluster_stub(via).MemberAdd(third, timeout=20)
        assert grpc_code(refused.value) == grpc.StatusCode.FAILED_PRECONDITION
        details = refused.value.details()
        assert details.startswith(
            "etcdserver: re-configuration failed due to not enough started members"
        ), details
    members = cluster.cluster_stub(leader).MemberList(rpc_pb2.MemberListRequest(), timeout=5)
    assert len(members.members) == 5
    # a running member cannot be removed now (2 started of 4); a member never started can
    running = next(i for i in range(cluster.n) if i != leader)
    by_url = {url: m.ID for m in members.members for url in m.peerURLs}
    with pytest.raises(grpc.RpcError) as refused:
        cluster.cluster_stub(leader).MemberRemove(
            rpc_pb2.MemberRemoveRequest(ID=by_url[cluster.peer_url(running)]), timeout=20
        )
    assert grpc_code(refused.value) == grpc.StatusCode.FAILED_PRECONDITION
    for url in added:
        cluster.cluster_stub(leader).MemberRemove(
            rpc_pb2.MemberRemoveRequest(ID=by_url[url]), timeout=20
        )
    assert cluster.leader() == leader
    cluster.put_retrying(leader, b"still/end", b"ok")
    image = cluster.range_all(leader, b"still/")
    assert sorted(image) == [b"still/1", b"still/2", b"still/end"]
    members = cluster.cluster_stub(leader).MemberList(rpc_pb2.MemberListRequest(), timeout=5)
    assert len(members.members) == 3


def test_member_remove_sent_to_the_member_being_removed_answers_success(
    make_cluster: Callable[..., FlagCluster],
) -> None:
    """Before: "request timed out", although the removal happened."""
    cluster = make_cluster()
    leader = cluster.leader()
    victim = next(i for i in range(cluster.n) if i != leader)
    member_id = cluster.status(victim).member_id
    resp = cluster.cluster_stub(victim).MemberRemove(
        rpc_pb2.MemberRemoveRequest(ID=member_id), timeout=20
    )
    assert cluster.peer_url(victim) not in {u for m in resp.members for u in m.peerURLs}
    assert len(resp.members) == 2
    cluster.stop(victim)
    rest = [i for i in range(cluster.n) if i != victim]
    cluster.wait_ready(20, rest)
    cluster.put_retrying(cluster.leader(), b"after-remove", b"ok")


# --------------------------------------------------------------------------- force new cluster
def test_force_new_cluster_recovers_a_cluster_that_lost_its_quorum_for_good(
    make_cluster: Callable[..., FlagCluster],
) -> None:
    """Two of three members are gone for good; the third, restarted with
    --force-new-cluster, leads alone, serves every acknowledged write, and grows again."""
    cluster = make_cluster(("--snapshot-every-items", "40"))
    acked = put_many(cluster, b"force/", 3_000)
    cluster.wait_converged()
    survivor = next(i for i in range(cluster.n) if i != cluster.leader())
    for i in range(cluster.n):
        cluster.kill(i)  # the other two for good; the survivor to restart it
    cluster.extra[survivor] = ["--force-new-cluster"]
    cluster.start(survivor)
    assert cluster.wait_ready(30, [survivor]) == survivor
    assert cluster.status(survivor).role == "leader"
    assert_has(cluster, survivor, b"force/", acked)
    got = read_prefix(cluster, survivor, b"force/", serializable=False)  # linearizable
    assert got == acked
    cluster.put_retrying(survivor, b"force/after", b"ok")
    members = cluster.cluster_stub(survivor).MemberList(rpc_pb2.MemberListRequest(), timeout=5)
    assert [u for m in members.members for u in m.peerURLs] == [cluster.peer_url(survivor)]
    assert "the only voter" in cluster.log_text(survivor)

    # grow again: a new member from an empty data dir (strict check: 1 started of 2 is the
    # one case etcd allows, to restore a cluster)
    new = cluster.add_node([survivor])
    cluster.cluster_stub(survivor).MemberAdd(
        rpc_pb2.MemberAddRequest(peerURLs=[cluster.peer_url(new)]), timeout=20
    )
    target = cluster.wait_converged([survivor, new], timeout=60)
    cluster.wait_applied(target, [new], timeout=60)
    assert_has(cluster, new, b"force/", {**acked, b"force/after": b"ok"})

    # the change is on disk: restarted without the flag it stays a cluster of these two
    cluster.stop(survivor)
    cluster.start(survivor)
    cluster.wait_ready(30, [survivor, new])
    cluster.put_retrying(survivor, b"force/restarted", b"ok")
    members = cluster.cluster_stub(new).MemberList(rpc_pb2.MemberListRequest(), timeout=5)
    assert len(members.members) == 2
