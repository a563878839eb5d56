"""Replica groups against a real 3-node cluster: register, alter the in-sync set and elect
through gRPC (the client library) and the CLI, from any node; epoch fencing (a stale master
epoch or in-sync set epoch gets FAILED_PRECONDITION naming RocketMQ's controller code);
need_ack_nums in GetGroup; a Watch of ``replica_group`` records; a replica that stops
heartbeating leaves the alive set on every node (heartbeats through followers reach the
leader) and a dead master is replaced; bad input gets clear errors; and (cluster) a leader
kill does not lose a committed election."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from nameserver.client import (
    Client,
    FailedPrecondition,
    GroupPolicy,
    InvalidArgument,
    NotFound,
    ReplicaGroupInfo,
    WatchEvent,
)
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import replica_groups_pb2, replica_groups_pb2_grpc
from tests.harness import Cluster, wait_until

pytestmark = pytest.mark.integration

WORKTREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LONG_MS = 600_000  # replicas that must not expire during a test


@pytest.fixture(scope="module")
def client(module_cluster: Cluster) -> Iterator[Client]:
    with Client(module_cluster.endpoints, timeout_s=15) as c:
        yield c


def cli(c: Cluster, *args: str, node: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nameserver.cli", "--endpoints", c.endpoints[node], *args],
        cwd=WORKTREE,
        env={**os.environ, "PYTHONPATH": WORKTREE},
        capture_output=True,
        text=True,
        timeout=60,
    )


def at(c: Cluster, node: int) -> Client:
    return Client([c.endpoints[node]], timeout_s=15)


def group_on(c: Cluster, node: int, name: str) -> ReplicaGroupInfo:
    with at(c, node) as one:
        return one.replica_group(name)


def register_three(client: Client, name: str, timeout_ms: int = LONG_MS) -> None:
    for i in (1, 2, 3):
        w = client.replica_register(
            "rc", name, f"10.0.0.{i}:10911", heartbeat_timeout_ms=timeout_ms
        )
        assert w.broker_id == i


def test_register_alter_elect_and_epoch_fencing_through_client_and_cli(
    module_cluster: Cluster, client: Client
) -> None:
    c = module_cluster
    register_three(client, "rg-a")
    g = client.replica_group("rg-a")
    assert (g.master_id, g.master_address, g.master_epoch) == (1, "10.0.0.1:10911", 1)
    assert (g.sync_state_set, g.sync_state_set_epoch) == ([1], 1)
    assert [r.alive for r in g.replicas] == [True, True, True]
    client.replica_set_policy("rg-a", GroupPolicy(3, 3, 2, True))
    w = client.replica_alter_isr(
        "rg-a", master_id=1, master_epoch=1, sync_state_set_epoch=1, sync_state_set=[1, 2, 3]
    )
    assert w.group.sync_state_set == [1, 2, 3] and w.group.sync_state_set_epoch == 2
    for node in range(3):  # the same group, need_ack_nums included, on every node
        g = group_on(c, node, "rg-a")
        assert g.need_ack is not None
        assert (g.need_ack.need_ack_nums, g.need_ack.status) == (3, "PUT_OK")
        assert g.sync_state_set_epoch == 2

    # a stale in-sync set epoch (the set changed since) cannot alter it
    with pytest.raises(FailedPrecondition, match=r"CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH 2001"):
        client.replica_alter_isr(
            "rg-a", master_id=1, master_epoch=1, sync_state_set_epoch=1, sync_state_set=[1, 2]
        )
    # the CLI elects 2 on a follower's endpoint: master epoch 2, in-sync set {2}
    r = cli(c, "replica-group", "elect", "rg-a", "--broker-id", "2", node=1)
    assert r.returncode == 0, r.stderr
    assert "elected 2 (10.0.0.2:10911), master epoch 2" in r.stdout
    # the deposed master 1, with its epochs, is fenced (client and CLI)
    with pytest.raises(FailedPrecondition, match=r"CONTROLLER_FENCED_MASTER_EPOCH 2000") as e:
        client.replica_alter_isr(
            "rg-a", master_id=1, master_epoch=1, sync_state_set_epoch=3, sync_state_set=[1, 2]
        )
    assert "master_epoch 1 is not the current master epoch 2" in str(e.value)
    r = cli(
        c, "replica-group", "alter-isr", "rg-a", "--master", "1",
        "--master-epoch", "1", "--isr-epoch", "3", "--isr", "1,2",
    )  # fmt: skip
    assert r.returncode == 1 and "CONTROLLER_FENCED_MASTER_EPOCH 2000" in r.stderr
    r = cli(
        c, "replica-group", "alter-isr", "rg-a",
        "--master-epoch", "2", "--isr-epoch", "3", "--isr", "2,3", node=2,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "in-sync set 2,3 (epoch 4" in r.stdout
    r = cli(c, "--output", "json", "replica-group", "show", "rg-a", node=2)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["master_id"], doc["master_epoch"], doc["sync_state_set"]) == (2, 2, [2, 3])
    assert doc["need_ack"]["need_ack_nums"] == 2  # auto: min(3, in sync 2), at least 2
    assert doc["need_ack"]["status"] == "PUT_OK"
    r = cli(c, "replica-group", "show", "rg-a")
    assert "need_ack_nums: 2 (in sync 2, alive 3): PUT_OK" in r.stdout
    # the master is alive and in sync: elect keeps it
    r = cli(c, "replica-group", "elect", "rg-a")
    assert r.returncode == 0 and "CONTROLLER_MASTER_STILL_EXIST" in r.stdout
    # 1 is outside the in-sync set: only an unclean election may pick it
    r = cli(c, "replica-group", "elect", "rg-a", "--broker-id", "1")
    assert r.returncode == 1 and "CONTROLLER_ELECT_MASTER_FAILED 2012" in r.stderr
    assert "unclean=true" in r.stderr
    r = cli(c, "replica-group", "elect", "rg-a", "--broker-id", "1", "--unclean")
    assert r.returncode == 0 and "elected 1" in r.stdout
    r = cli(c, "replica-group", "list")
    assert r.returncode == 0 and "rg-a" in r.stdout


def test_bad_input_gets_clear_errors_and_changes_nothing(
    module_cluster: Cluster, client: Client
) -> None:
    register_three(client, "rg-bad")
    before = client.replica_group("rg-bad")
    with pytest.raises(InvalidArgument, match="broker_name must not be empty"):
        client.replica_register("rc", "", "h:1")
    with pytest.raises(InvalidArgument, match="address must be host:port"):
        client.replica_register("rc", "rg-bad", "nohost")
    with pytest.raises(InvalidArgument, match="cluster_name 'other' does not match"):
        client.replica_register("other", "rg-bad", "10.0.0.9:1")
    with pytest.raises(
        InvalidArgument, match=r"policy.min_in_sync_replicas must be in \[1, in_sync_replicas=2\]"
    ):
        client.replica_set_policy("rg-bad", GroupPolicy(3, 2, 3))
    with pytest.raises(InvalidArgument, match="CONTROLLER_INVALID_REPLICAS 2003"):
        client.replica_alter_isr(
            "rg-bad", master_id=1, master_epoch=1, sync_state_set_epoch=1, sync_state_set=[1, 9]
        )
    with pytest.raises(NotFound, match="CONTROLLER_BROKER_NEED_TO_BE_REGISTERED 2010"):
        client.replica_group("rg-none")
    with pytest.raises(NotFound, match="broker_id 7 is not a replica"):
        client.replica_heartbeat("rg-bad", 7)
    with pytest.raises(InvalidArgument, match="broker_id must be >= 1"):
        client.replica_heartbeat("rg-bad", 0)
    after = client.replica_group("rg-bad")
    assert (after.version, after.mod_revision) == (before.version, before.mod_revision)
    assert after.replicas == before.replicas and after.policy == before.policy
    r = cli(module_cluster, "replica-group", "show", "rg-none")
    assert r.returncode == 4 and "rg-none" in r.stderr  # ExitCode.NOT_FOUND
    # an unknown record type in a Watch is refused at create, naming the field
    stub = rpc_pb2_grpc.WatchStub(module_cluster.channel(1))
    create = rpc_pb2.WatchRequest(
        create_request=rpc_pb2.WatchCreateRequest(key=b"a", record_type="nope")
    )
    responses = stub.Watch(iter([create]), timeout=10)
    first = next(responses)
    assert first.canceled and "unknown record_type 'nope'" in first.cancel_reason
    responses.cancel()


class Collector:
    def __init__(self, client: Client, start_revision: int) -> None:
        self.watch = client.watch(
            b"rg-w", start_revision=start_revision, record_type="replica_group"
        )
        self.events: list[WatchEvent] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for ev in self.watch:
            self.events.append(ev)

    def close(self) -> None:
        self.watch.close()
        self._thread.join(10)


def test_replica_group_changes_are_watchable(module_cluster: Cluster) -> None:
    c = module_cluster
    with at(c, 2) as follower, at(c, 0) as other:
        # from the next revision on: whatever happens after this point is owed to it, live
        # or replayed, however long the stream takes to start
        live = Collector(follower, follower.status().apply_offset + 1)
        try:
            w1 = other.replica_register("rc", "rg-w", "10.1.0.1:1", heartbeat_timeout_ms=LONG_MS)
            w2 = other.replica_register("rc", "rg-w", "10.1.0.2:1", heartbeat_timeout_ms=LONG_MS)
            e = other.replica_elect("rg-w", broker_id=2, unclean=True)
            revisions = [w1.revision, w2.revision, e.revision]
            wait_until(
                lambda: [ev.revision for ev in live.events] == revisions,
                20,
                lambda: f"live events {[ev.revision for ev in live.events]} != {revisions}",
            )
        finally:
            live.close()
        last = records_pb2.ReplicaGroupRecord.FromString(live.events[-1].kv.value)  # type: ignore[union-attr]
        assert (last.broker_name, last.master_id, last.master_epoch) == ("rg-w", 2, 2)
        assert [ev.type for ev in live.events] == ["PUT"] * 3
        assert all(ev.kv is not None and ev.kv.key == b"rg-w" for ev in live.events)
        replay = Collector(follower, revisions[0])  # the same changes, from the segments
        try:
            wait_until(lambda: len(replay.events) >= 3, 20, "replayed events")
        finally:
            replay.close()
        assert [ev.revision for ev in replay.events[:3]] == revisions


def test_a_replica_that_stops_heartbeating_leaves_the_alive_set(
    module_cluster: Cluster, client: Client
) -> None:
    c = module_cluster
    # 3 s: ten heartbeat periods, so a busy 2-core machine does not expire a live replica
    register_three(client, "rg-h", timeout_ms=3000)
    client.replica_alter_isr(
        "rg-h", master_id=1, master_epoch=1, sync_state_set_epoch=1, sync_state_set=[1, 2, 3]
    )
    leader = c.leader()
    follower = next(i for i in range(3) if i != leader)
    stop = threading.Event()
    errors: list[BaseException] = []

    def beat() -> None:  # replicas 1 and 2 heartbeat through a follower; 3 stays silent
        with at(c, follower) as f:
            while not stop.is_set():
                try:
                    f.replica_heartbeat("rg-h", 1, max_offset=100, epoch=1)
                    f.replica_heartbeat("rg-h", 2, max_offset=90, epoch=1)
                except BaseException as exc:
                    errors.append(exc)
                stop.wait(0.3)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:

        def alive_everywhere() -> bool:
            return all(
                [r.alive for r in group_on(c, i, "rg-h").replicas] == [True, True, False]
                for i in range(3)
            )

        wait_until(alive_everywhere, 20, "replica 3 expired, 1 and 2 alive on every node")
        # for well past the timeout, 1 and 2 stay alive (their heartbeats reach the leader)
        until = time.monotonic() + 3.5
        while time.monotonic() < until:
            assert alive_everywhere() and not errors, errors
        g = client.replica_group("rg-h")
        assert g.need_ack is not None and g.need_ack.alive_replicas == 2
    finally:
        stop.set()
        thread.join(10)
    # everyone silent: the master dies; 2 is not alive either, so no master, epoch + 1
    wait_until(
        lambda: group_on(c, follower, "rg-h").master_id == 0, 20, "the silent master expired"
    )
    g = client.replica_group("rg-h")
    assert g.master_epoch == 2 and [r.alive for r in g.replicas] == [False] * 3
    # 2 comes back (in sync, offset 90): the masterless group elects it
    hb = client.replica_heartbeat("rg-h", 2, max_offset=90, epoch=1)
    assert hb.alive and (hb.master_id, hb.master_epoch) == (2, 3)
    assert hb.master_address == "10.0.0.2:10911"


@pytest.mark.cluster
def test_leader_kill_does_not_lose_a_committed_election(cluster: Cluster) -> None:
    c = cluster
    with Client(c.endpoints, timeout_s=20) as client:
        register_three(client, "rg-k")
        client.replica_alter_isr(
            "rg-k", master_id=1, master_epoch=1, sync_state_set_epoch=1, sync_state_set=[1, 2, 3]
        )
        e = client.replica_elect("rg-k", broker_id=3)
        assert e.changed and e.group.master_id == 3 and e.group.master_epoch == 2
        leader = c.leader()
        c.kill(leader)
        survivors = [i for i in range(3) if i != leader]
        c.wait_ready(30, nodes=survivors)
        for i in survivors:
            g = wait_until(lambda i=i: group_on(c, i, "rg-k"), 30, f"group on node {i}")
            assert (g.master_id, g.master_epoch, g.sync_state_set) == (3, 2, [3])
            assert g.sync_state_set_epoch == 3
        # the new leader fences the old epoch as the old one did
        with pytest.raises(FailedPrecondition, match="CONTROLLER_FENCED_MASTER_EPOCH"):
            client.replica_alter_isr(
                "rg-k", master_id=1, master_epoch=1, sync_state_set_epoch=2, sync_state_set=[1]
            )
        c.start(leader)
        c.wait_ready(30)
        g = wait_until(lambda: group_on(c, leader, "rg-k"), 30, "group on the restarted node")
        assert (g.master_id, g.master_epoch) == (3, 2)


def test_raw_grpc_register_answers_master_and_epochs(module_cluster: Cluster) -> None:
    stub = replica_groups_pb2_grpc.ReplicaGroupsStub(module_cluster.channel(1))
    resp = stub.Register(
        replica_groups_pb2.RegisterReplicaRequest(
            cluster_name="rc", broker_name="rg-raw", address="10.2.0.1:10911", broker_id=5
        ),
        timeout=15,
    )
    assert resp.broker_id == 5 and resp.group.master_id == 5 and resp.group.master_epoch == 1
    with pytest.raises(grpc.RpcError) as e:
        stub.Register(
            replica_groups_pb2.RegisterReplicaRequest(
                cluster_name="rc", broker_name="rg-raw", address="10.2.0.2:10911", broker_id=5
            ),
            timeout=15,
        )
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "CONTROLLER_BROKER_ID_INVALID 2014" in (e.value.details() or "")
