"""A client's refused request is counted, and logged at DEBUG only, on every node and on replay.

Against a real 3-node cluster: a quota exceeded, a commit with a wrong fencing token, an
offset moving backwards (all refused by apply rules, on every node), an unknown lease
(refused by a handler) and a remoting request with a bad topic name. Afterwards no node's
log has a WARNING (or INFO) line about them, not even a node restarted to replay its log;
the node that answered counts each in ``metaledger_requests_rejected_total`` by API, gRPC
status and error class.
"""

from __future__ import annotations

import pytest

from nameserver.client import Client, FailedPrecondition, NotFound, ResourceExhausted
from rmq.codes import ResponseCode
from rmq.headers import RegisterTopicHeader
from tests.harness import Cluster, wait_until
from tests.integration.test_metrics import scrape
from tests.remoting_client import call

pytestmark = pytest.mark.integration

REJECTED = "metaledger_requests_rejected_total"


DEFAULT_TOKEN_WARNING = "--initial-cluster-token is the default"


def _rejected(c: Cluster, i: int, api: str, code: str, error: str) -> float:
    labels = f'api="{api}",code="{code}",error="{error}",node="{c.nodes[i].id}"'
    return scrape(c, i).get(f"{REJECTED}{{{labels}}}", 0.0)


def _log_lines_since(c: Cluster, marks: dict[int, int], i: int) -> list[str]:
    return c.log_text(i)[marks[i] :].splitlines()


def test_refused_requests_are_counted_and_not_logged_above_debug(cluster: Cluster) -> None:
    c = cluster
    leader = c.wait_ready(30)
    marks = {i: len(c.log_text(i)) for i in range(c.n)}
    with Client([c.endpoints[leader]], timeout_s=10) as client:
        lease = client.lease_grant(60)
        with pytest.raises(FailedPrecondition, match="is not a token of lease"):
            client.offsets_commit("job", "0", "x", lease_id=lease.id, fencing_token=1)
        client.offsets_commit(
            "job", "0", "x", lease_id=lease.id, fencing_token=lease.fencing_token, position=5
        )
        with pytest.raises(FailedPrecondition, match="would move backwards"):
            client.offsets_commit(
                "job", "0", "y", lease_id=lease.id, fencing_token=lease.fencing_token, position=1
            )
        client.quota_set("kv", max_keys=1)
        client.put("quota/a", "1")
        with pytest.raises(ResourceExhausted, match="quota exceeded"):
            client.put("quota/b", "2")
        with pytest.raises(NotFound):
            client.lease_revoke(0xABCDEF)
    answer = call(
        f"127.0.0.1:{c.nodes[leader].remoting_port}",
        RegisterTopicHeader(topic="bad topic!").request(),
    )
    assert answer.code == ResponseCode.SYSTEM_ERROR, answer

    assert _rejected(c, leader, "grpc", "FAILED_PRECONDITION", "FailedPrecondition") == 2
    assert _rejected(c, leader, "grpc", "RESOURCE_EXHAUSTED", "ResourceExhausted") == 1
    assert _rejected(c, leader, "grpc", "NOT_FOUND", "NotFound") == 1
    assert _rejected(c, leader, "remoting", "INVALID_ARGUMENT", "InvalidArgument") == 1

    # every node applied the refused items; one restarts and replays its log
    applied = c.wait_converged()
    follower = (leader + 1) % c.n
    c.restart(follower)
    c.wait_ready(30)
    wait_until(
        lambda: c.status(follower).apply_offset >= applied, 30, "the restarted node replayed"
    )
    for i in range(c.n):
        lines = _log_lines_since(c, marks, i)
        # the restarted node's one startup WARNING about the default cluster token is not
        # about the refused requests (the harness's clusters keep the default token)
        loud = [
            line
            for line in lines
            if (" WARNING " in line or " ERROR " in line) and DEFAULT_TOKEN_WARNING not in line
        ]
        assert loud == [], f"{c.nodes[i].id}: {loud}"
        told = [
            line
            for line in lines
            if any(w in line for w in ("not a token", "backwards", "quota", "bad topic"))
        ]
        assert told == [], f"{c.nodes[i].id}: {told}"
