"""RocketMQ ACL 1.0 on a real node's remoting port: with auth on, every write code is refused
(NO_PERMISSION, RocketMQ's remark) without a valid ``AccessKey``/``Signature``, or when the
access key's user lacks write on the record, and changes nothing; a request signed as
``AclClientRPCHook`` signs it (HmacSHA1 over the sorted ext field values and the body) by
a user whose role grants write on ``/_metaledger/`` is served. Route reads stay open.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from nameserver.auth.acl import sign
from nameserver.client import Client
from protos.metaledger.v1 import admin_pb2
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.headers import (
    BrokerHeartbeatHeader,
    BrokerNameHeader,
    DeleteTopicHeader,
    GetRouteInfoHeader,
    KvConfigKeyHeader,
    PutKvConfigHeader,
    RegisterTopicHeader,
)
from tests.etcd_harness import etcdctl
from tests.harness import Cluster, running_cluster
from tests.remoting_client import call, register_request, unregister_request

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]

BROKER = "acl-broker-a"
ADDR = "127.0.0.1:10911"
TOPIC = "AclTopic"
QUEUES = json.dumps(
    {"queueDatas": [{"brokerName": BROKER, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}]}
).encode()


def write_requests() -> dict[str, RemotingCommand]:
    """One request of every write code the nameserver serves (a broker's or an admin's)."""
    return {
        "REGISTER_BROKER": register_request(BROKER, ADDR, [TOPIC, TOPIC + "b"]),
        "BROKER_HEARTBEAT": BrokerHeartbeatHeader(
            cluster_name="DefaultCluster", broker_addr=ADDR, broker_name=BROKER, broker_id=0
        ).request(),
        "WIPE_WRITE_PERM_OF_BROKER": BrokerNameHeader(broker_name=BROKER).request(
            code=RequestCode.WIPE_WRITE_PERM_OF_BROKER
        ),
        "ADD_WRITE_PERM_OF_BROKER": BrokerNameHeader(broker_name=BROKER).request(
            code=RequestCode.ADD_WRITE_PERM_OF_BROKER
        ),
        "REGISTER_TOPIC_IN_NAMESRV": RegisterTopicHeader(topic=TOPIC + "2").request(QUEUES),
        "DELETE_TOPIC_IN_NAMESRV": DeleteTopicHeader(topic=TOPIC).request(),
        "PUT_KV_CONFIG": PutKvConfigHeader(namespace="ns", key="k", value="v").request(),
        "DELETE_KV_CONFIG": KvConfigKeyHeader(namespace="ns", key="k").request(
            code=RequestCode.DELETE_KV_CONFIG
        ),
        "UNREGISTER_BROKER": unregister_request(BROKER, ADDR),
    }


def signed(request: RemotingCommand, access_key: str, secret_key: str) -> RemotingCommand:
    ext = dict(request.ext_fields)
    sign(access_key, secret_key, ext, request.body)
    return request.replace(ext_fields=ext)


def apply_offset(cluster: Cluster) -> int:
    return int(cluster.admin(0).Status(admin_pb2.StatusRequest(), timeout=5).apply_offset)


def set_up_auth(cluster: Cluster) -> None:
    ep = cluster.endpoints[0]
    for args in (
        ["user", "add", "root:rootpw"],
        ["user", "grant-role", "root", "root"],
        ["role", "add", "brokers"],
        ["role", "grant-permission", "brokers", "readwrite", "/_metaledger/", "--prefix=true"],
        ["user", "add", "rmq:x"],
        ["user", "grant-role", "rmq", "brokers"],
        ["user", "add", "weak:x"],
        ["auth", "enable"],
    ):
        r = etcdctl(ep, *args)
        assert r.returncode == 0, f"etcdctl {args}: {r.stderr}"
    with Client([ep], user="root", password="rootpw") as root:
        root.user_set_secret_key("rmq", "rmq-secret")
        root.user_set_secret_key("weak", "weak-secret")


def test_every_remoting_write_needs_a_valid_signature_and_write_permission(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path, 1, extra_args=["--bcrypt-cost=4"]) as cluster:
        remoting = f"127.0.0.1:{cluster.nodes[0].remoting_port}"
        set_up_auth(cluster)
        cluster.wait_announced(30)  # the node's own member record is the one write left to come
        before = apply_offset(cluster)
        refusals = {
            "unsigned": (lambda r: r, "No accessKey is configured"),
            "unknown access key": (lambda r: signed(r, "nobody", "s"), "No acl config for nobody"),
            "wrong secret": (
                lambda r: signed(r, "rmq", "not-the-secret"),
                "Check signature failed for accessKey=rmq",
            ),
            "no role": (lambda r: signed(r, "weak", "weak-secret"), "No permission for request"),
        }
        for name, request in write_requests().items():
            for why, (prepare, remark) in refusals.items():
                reply = call(remoting, prepare(request))
                assert reply.code == ResponseCode.NO_PERMISSION, (name, why, reply.remark)
                assert remark in (reply.remark or ""), (name, why, reply.remark)
            # a body changed after signing fails the signature too
            tampered = signed(request, "rmq", "rmq-secret").replace(body=request.body + b" ")
            assert call(remoting, tampered).code == ResponseCode.NO_PERMISSION, name
        assert apply_offset(cluster) == before  # nothing was proposed
        route = call(remoting, GetRouteInfoHeader(topic=TOPIC).request())
        assert route.code == ResponseCode.TOPIC_NOT_EXIST  # reads are open; nothing registered

        for name, request in write_requests().items():
            reply = call(remoting, signed(request, "rmq", "rmq-secret"))
            assert reply.code == ResponseCode.SUCCESS, (name, reply.remark)
            if name == "REGISTER_BROKER":
                route = call(remoting, GetRouteInfoHeader(topic=TOPIC).request())
                assert route.code == ResponseCode.SUCCESS
        assert apply_offset(cluster) > before


def test_nothing_is_checked_while_auth_is_off(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 1) as cluster:
        remoting = f"127.0.0.1:{cluster.nodes[0].remoting_port}"
        reply = call(remoting, register_request(BROKER, ADDR, [TOPIC, TOPIC + "b"]))
        assert reply.code == ResponseCode.SUCCESS, reply.remark
