"""``metaledger route …`` and ``metaledger kvconfig …`` against a real 3-node cluster whose
brokers registered over the remoting port; what the CLI writes is read back over remoting
(the same data, one log)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from nameserver.cli.exitcodes import ExitCode
from rmq.headers import GetRouteInfoHeader, KvConfigKeyHeader
from tests.harness import Cluster, wait_until
from tests.integration.test_cli_coordination import ml
from tests.remoting_client import call, register_request

pytestmark = pytest.mark.integration

ADDR = "127.0.0.1:20911"


def remoting(c: Cluster, i: int) -> str:
    return f"127.0.0.1:{c.nodes[i].remoting_port}"


@pytest.fixture(scope="module")
def brokers(module_cluster: Cluster) -> Iterator[Cluster]:
    c = module_cluster
    assert call(remoting(c, 0), register_request("cli-a", ADDR, ["CliT", "CliU"])).code == 0
    reply = call(
        remoting(c, 2), register_request("cli-b", "127.0.0.1:20921", ["CliU", "CliV"], cluster="C2")
    )
    assert reply.code == 0
    wait_until(
        lambda: all(
            call(remoting(c, i), GetRouteInfoHeader(topic="CliV").request()).code == 0
            for i in range(3)
        ),
        10,
        "routes on every node",
    )
    yield c


def test_route_get_table_and_json(brokers: Cluster) -> None:
    r = ml(brokers, "route", "get", "CliT")
    assert r.returncode == ExitCode.OK, r.stderr
    assert "cli-a" in r.stdout and f"0={ADDR}" in r.stdout and "apply offset" in r.stdout
    r = ml(brokers, "route", "get", "CliU", "-w", "json")
    doc = json.loads(r.stdout)
    assert sorted(q["brokerName"] for q in doc["queueDatas"]) == ["cli-a", "cli-b"]
    assert {b["brokerName"]: b["brokerAddrs"] for b in doc["brokerDatas"]}["cli-a"] == {"0": ADDR}
    assert doc["apply_offset"] > 0


def test_route_get_missing_topic_is_not_found(brokers: Cluster) -> None:
    r = ml(brokers, "route", "get", "NoSuchTopic")
    assert r.returncode == ExitCode.NOT_FOUND
    assert "No topic route info in name server for the topic: NoSuchTopic" in r.stderr


def test_route_clusters_and_brokers(brokers: Cluster) -> None:
    doc = json.loads(ml(brokers, "route", "clusters", "-w", "json").stdout)
    assert doc["clusters"]["C2"] == ["cli-b"] and "cli-a" in doc["clusters"]["DefaultCluster"]
    r = ml(brokers, "route", "brokers", "--cluster", "C2")
    assert r.returncode == 0 and "cli-b" in r.stdout and "cli-a" not in r.stdout
    doc = json.loads(ml(brokers, "route", "brokers", "-w", "json").stdout)
    assert {(b["brokerName"], b["addr"], b["heartbeatTimeoutMs"]) for b in doc["brokers"]} >= {
        ("cli-a", ADDR, 120_000)
    }


def test_route_topic_create_and_delete(brokers: Cluster) -> None:
    r = ml(
        brokers,
        "route",
        "topic",
        "create",
        "CliNew",
        "--broker",
        "cli-a",
        "--read-queues",
        "2",
        "--write-queues",
        "2",
    )
    assert r.returncode == 0, r.stderr
    # the RocketMQ view of the same topic, from another node's remoting port
    reply = wait_until(
        lambda: (
            x
            if (
                x := call(
                    remoting(brokers, 1),
                    GetRouteInfoHeader(topic="CliNew").request().replace(version=401),
                )
            ).code
            == 0
            else None
        ),
        10,
        "CliNew over remoting",
    )
    assert json.loads(reply.body)["queueDatas"][0]["readQueueNums"] == 2
    r = ml(brokers, "route", "topic", "create", "CliBad", "--broker", "ghost")
    assert (
        r.returncode == ExitCode.NOT_FOUND and "broker name 'ghost' is not registered" in r.stderr
    )
    r = ml(brokers, "route", "topic", "create", "", "--broker", "cli-a")
    assert r.returncode == ExitCode.INVALID and "topic must not be empty" in r.stderr
    r = ml(brokers, "route", "topic", "delete", "CliNew")
    assert r.returncode == 0 and "topic CliNew: deleted its queues on 1 broker(s)" in r.stdout
    r = ml(brokers, "route", "topic", "delete", "CliNew")  # idempotent, as mqadmin deleteTopic
    assert r.returncode == 0 and "topic CliNew: no queues, nothing to delete" in r.stdout
    assert ml(brokers, "route", "get", "CliNew").returncode == ExitCode.NOT_FOUND


def test_kvconfig_put_get_delete(brokers: Cluster) -> None:
    assert ml(brokers, "kvconfig", "put", "ns1", "k", "v1").returncode == 0
    r = ml(brokers, "kvconfig", "get", "ns1", "k")
    assert (r.returncode, r.stdout.strip()) == (0, "v1")
    reply = wait_until(
        lambda: (
            x
            if (
                x := call(
                    remoting(brokers, 2), KvConfigKeyHeader(namespace="ns1", key="k").request()
                )
            ).code
            == 0
            else None
        ),
        10,
        "kv config over remoting",
    )
    assert reply.ext_fields == {"value": "v1"}
    doc = json.loads(ml(brokers, "kvconfig", "list", "ns1", "-w", "json").stdout)
    assert doc["table"] == {"k": "v1"}
    assert ml(brokers, "kvconfig", "delete", "ns1", "k").returncode == 0
    r = ml(brokers, "kvconfig", "get", "ns1", "k")
    assert (
        r.returncode == ExitCode.NOT_FOUND and "No config item, Namespace: ns1 Key: k" in r.stderr
    )
    r = ml(brokers, "kvconfig", "delete", "ns1", "k")  # idempotent, as etcdctl del
    assert r.returncode == 0 and "ns1/k: no such item, nothing to delete" in r.stdout
    r = ml(brokers, "kvconfig", "put", "", "k", "v")
    assert r.returncode == ExitCode.INVALID and "namespace must not be empty" in r.stderr
