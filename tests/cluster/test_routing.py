"""RocketMQ routes on a real 3-node cluster, driven through the remoting port with frames
built by our codec (as brokers send them) and read back over remoting and gRPC.

- a registration through any node gives the same route on all three;
- a clean UNREGISTER_BROKER removes the broker at once, everywhere;
- a broker that stops heartbeating disappears from every node after its
  ``heartbeatTimeoutMillis`` while one that heartbeats through a follower stays
  (followers forward heartbeats to the leader's memory; nothing is logged);
- a leader kill during a registration storm (100 brokers x 1,000 topics, each broker
  retrying on error as real brokers do) loses no registration.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from protos.metaledger.v1 import routing_pb2, routing_pb2_grpc
from rmq.codec import RemotingCommand
from rmq.codes import ResponseCode
from rmq.headers import BrokerHeartbeatHeader, GetRouteInfoHeader
from tests.harness import Cluster, wait_until
from tests.remoting_client import AsyncRemotingClient, call, register_request, unregister_request

pytestmark = pytest.mark.cluster


def remoting(c: Cluster, i: int) -> str:
    return f"127.0.0.1:{c.nodes[i].remoting_port}"


def route_body(c: Cluster, i: int, topic: str) -> bytes | None:
    reply = call(remoting(c, i), GetRouteInfoHeader(topic=topic).request().replace(version=401))
    return reply.body if reply.code == ResponseCode.SUCCESS else None


def routing_stub(c: Cluster, i: int) -> routing_pb2_grpc.RoutingStub:
    return routing_pb2_grpc.RoutingStub(c.channel(i))


def test_registration_through_any_node_is_the_same_route_on_all(module_cluster: Cluster) -> None:
    c = module_cluster
    for i in range(3):
        name = f"any-{i}"
        reply = call(
            remoting(c, i), register_request(name, f"127.0.0.{i + 1}:10911", [f"T{i}", "Shared"])
        )
        assert reply.code == ResponseCode.SUCCESS, reply.remark

        def same(topic: str = f"T{i}") -> list[bytes | None] | None:
            bodies = [route_body(c, j, topic) for j in range(3)]
            return bodies if bodies[0] is not None and len(set(bodies)) == 1 else None

        bodies = wait_until(same, 10, f"route of T{i} on all nodes")
        route = json.loads(bodies[0] or b"")
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": f"127.0.0.{i + 1}:10911"}
    # gRPC sees it too, with the apply offset of the image that answered
    resp = routing_stub(c, 2).GetRoute(routing_pb2.GetRouteRequest(topic="Shared"), timeout=5)
    assert sorted(q.broker_name for q in resp.queues) == ["any-0", "any-1", "any-2"]
    assert resp.apply_offset > 0
    for j in range(3):
        wait_until(
            lambda j=j: (
                routing_stub(c, j)
                .GetRoute(routing_pb2.GetRouteRequest(topic="Shared"), timeout=5)
                .queues.__len__()
                == 3
            ),
            10,
            "Shared on every node",
        )


def test_unregister_removes_the_broker_at_once_on_every_node(module_cluster: Cluster) -> None:
    c = module_cluster
    addr = "127.0.0.9:10911"
    assert call(remoting(c, 0), register_request("gone", addr, ["GoneT", "GoneU"])).code == 0
    wait_until(lambda: all(route_body(c, j, "GoneT") for j in range(3)), 10, "registered")
    reply = call(remoting(c, 1), unregister_request("gone", addr))
    assert reply.code == ResponseCode.SUCCESS
    # applied on node 1 before it answered; the others within a commit
    assert route_body(c, 1, "GoneT") is None
    wait_until(lambda: not any(route_body(c, j, "GoneT") for j in range(3)), 5, "unregistered")


def test_grpc_bad_input_names_the_field(module_cluster: Cluster) -> None:
    stub = routing_stub(module_cluster, 0)
    with pytest.raises(grpc.RpcError) as err:
        stub.RegisterBroker(routing_pb2.RegisterBrokerRequest(cluster="c", addr="a:1"), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "broker_name must not be empty" in (err.value.details() or "")
    with pytest.raises(grpc.RpcError) as err:
        stub.GetRoute(routing_pb2.GetRouteRequest(topic="NoSuchTopic"), timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert err.value.details() == "No topic route info in name server for the topic: NoSuchTopic"


def test_silent_broker_expires_everywhere_heartbeating_one_stays(module_cluster: Cluster) -> None:
    c = module_cluster
    leader = c.leader()
    follower = (leader + 1) % 3
    timeout_ms = 3000
    for name in ("silent", "beating"):
        reply = call(
            remoting(c, follower),
            register_request(
                name,
                f"10.0.0.1:{len(name)}",
                [f"{name}-T", f"{name}-U"],
                heartbeat_timeout_ms=timeout_ms,
            ),
        )
        assert reply.code == 0, reply.remark
    registered_at = time.monotonic()
    wait_until(lambda: all(route_body(c, j, "silent-T") for j in range(3)), 10, "registered")
    heartbeat = BrokerHeartbeatHeader(
        cluster_name="DefaultCluster", broker_addr="10.0.0.1:7", broker_name="beating", broker_id=0
    )

    def gone_everywhere() -> bool:
        # the other broker heartbeats (oneway 904) through a follower meanwhile
        call_oneway(remoting(c, follower), heartbeat.request(oneway=True))
        return not any(route_body(c, j, "silent-T") for j in range(3))

    wait_until(gone_everywhere, 15, "silent broker expired on every node", interval=0.3)
    assert time.monotonic() - registered_at >= timeout_ms / 1000 - 0.2
    # keep heartbeating for another two timeouts: the beating broker stays on every node
    deadline = time.monotonic() + 2 * timeout_ms / 1000
    while time.monotonic() < deadline:
        call_oneway(remoting(c, follower), heartbeat.request(oneway=True))
        assert all(route_body(c, j, "beating-T") for j in range(3))
        time.sleep(0.3)
    # ... and once it stops, it expires too
    wait_until(
        lambda: not any(route_body(c, j, "beating-T") for j in range(3)), 15, "beating expired"
    )


def call_oneway(address: str, request: RemotingCommand) -> None:
    async def send() -> None:
        client = await AsyncRemotingClient(address).connect()
        await client.oneway(request)
        await client.close()

    asyncio.run(send())


# ------------------------------------------------------------------- storm
BROKERS = 100
TOPICS = 1000


@pytest.fixture
def storm_cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster", n=3)
    try:
        c.wait_ready(30)
        c.wait_announced(30)
        yield c
    finally:
        c.close()


async def _broker(c: Cluster, b: int, topics: list[str], nodes: list[int], log: list[str]) -> int:
    """One broker registering until the nameserver says SUCCESS, moving to the next node on
    any error (real brokers retry every 30 s against every nameserver)."""
    request = register_request(f"storm-{b:03d}", f"10.1.{b // 250}.{b % 250}:10911", topics)
    attempt = 0
    while True:
        node = nodes[(b + attempt) % len(nodes)]
        attempt += 1
        try:
            client = await AsyncRemotingClient(remoting(c, node)).connect()
            try:
                reply = await client.call(request, timeout=30)
            finally:
                await client.close()
            if reply.code == ResponseCode.SUCCESS:
                return attempt
            log.append(f"storm-{b:03d} via n{node}: {reply.code} {reply.remark}")
        except (TimeoutError, OSError) as exc:
            log.append(f"storm-{b:03d} via n{node}: {exc!r}")
        await asyncio.sleep(0.2)


@pytest.mark.slow
def test_leader_kill_during_registration_storm_loses_no_registration(
    storm_cluster: Cluster,
) -> None:
    c = storm_cluster
    topics = [f"StormTopic-{t:04d}" for t in range(TOPICS)]
    leader = c.leader()
    errors: list[str] = []

    outstanding_at_kill = 0

    async def storm() -> list[int]:
        nonlocal outstanding_at_kill
        tasks = [
            asyncio.ensure_future(_broker(c, b, topics, [0, 1, 2], errors)) for b in range(BROKERS)
        ]
        # kill the leader once a part of the storm is in (early: the leader's own
        # registrations finish first, and the kill must land while many are in flight)
        while sum(t.done() for t in tasks) < BROKERS // 10:
            await asyncio.sleep(0.02)
        outstanding_at_kill = sum(not t.done() for t in tasks)
        await asyncio.get_running_loop().run_in_executor(None, c.kill, leader)
        return list(await asyncio.gather(*tasks))

    started = time.monotonic()
    attempts = asyncio.run(asyncio.wait_for(storm(), 600))
    elapsed = time.monotonic() - started
    print(
        f"storm: {BROKERS} brokers x {TOPICS} topics in {elapsed:.1f} s "
        f"({BROKERS * TOPICS / elapsed:.0f} broker-topics/s), retries {sum(attempts) - BROKERS}, "
        f"{outstanding_at_kill} registrations outstanding when the leader was killed"
    )
    assert outstanding_at_kill > 0, "the leader was killed after the storm, not during it"
    alive = [i for i in range(3) if i != leader]
    c.start(leader)  # the old leader comes back and catches up
    for i in [*alive, leader]:

        def complete(i: int = i) -> bool:
            info = routing_stub(c, i).GetClusterInfo(
                routing_pb2.GetClusterInfoRequest(), timeout=10
            )
            listed = routing_stub(c, i).ListTopics(routing_pb2.ListTopicsRequest(), timeout=10)
            return len(info.brokers) == BROKERS and list(listed.topics) == topics

        wait_until(complete, 60, lambda i=i: f"node {i} lacks registrations; errors: {errors[-5:]}")
        for topic in topics[:: TOPICS // 20]:
            route = routing_stub(c, i).GetRoute(
                routing_pb2.GetRouteRequest(topic=topic), timeout=10
            )
            assert len(route.queues) == BROKERS and len(route.brokers) == BROKERS, (i, topic)
    # every queue datum of every broker, from one node
    stub = routing_stub(c, alive[0])
    for topic in topics:
        route = stub.GetRoute(routing_pb2.GetRouteRequest(topic=topic), timeout=10)
        assert len(route.queues) == BROKERS, topic
