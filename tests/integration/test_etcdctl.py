"""The real etcdctl (v3 API) against a 3-node metaledger cluster, unchanged (DESIGN.md §1).

Every command runs as a subprocess with a timeout; writes go through followers as well
as the leader (followers forward them). Each test uses keys of its own, so the tests share
one cluster (the ``module_cluster`` fixture).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess

import pytest

from tests.harness import Cluster, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]

ETCDCTL_TIMEOUT_S = 30


def etcdctl(
    cluster: Cluster,
    *args: str,
    node: int = 0,
    all_endpoints: bool = False,
    stdin: str | None = None,
    check: bool = True,
    command_timeout_s: int = 10,
) -> subprocess.CompletedProcess[str]:
    """Run ``etcdctl args`` against node ``node`` (or every endpoint)."""
    endpoints = ",".join(cluster.endpoints) if all_endpoints else cluster.endpoints[node]
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ETCDCTL_")}
    env["ETCDCTL_API"] = "3"
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env.pop(proxy, None)
    cmd = [
        "etcdctl",
        f"--endpoints={endpoints}",
        "--dial-timeout=5s",
        f"--command-timeout={command_timeout_s}s",
        *args,
    ]
    result = subprocess.run(
        cmd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=ETCDCTL_TIMEOUT_S,
        env=env,
        check=False,
    )
    if check and result.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} exited {result.returncode}\n"
            f"stdout: {result.stdout}\nstderr: {result.stderr}"
        )
    return result


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_put_and_get(module_cluster: Cluster) -> None:
    c = module_cluster
    assert etcdctl(c, "put", "plain/k", "hello world", node=1).stdout.strip() == "OK"
    for node in range(c.n):
        assert etcdctl(c, "get", "plain/k", node=node).stdout.splitlines() == [
            "plain/k",
            "hello world",
        ]
    assert etcdctl(c, "get", "plain/missing").stdout == ""


def test_get_prefix_keys_only_and_print_value_only(module_cluster: Cluster) -> None:
    c = module_cluster
    for i, name in enumerate(["b", "a", "c"]):
        etcdctl(c, "put", f"pfx/{name}", f"value-{name}", node=i)
    etcdctl(c, "put", "pfx0", "outside the prefix", node=2)

    out = etcdctl(c, "get", "pfx/", "--prefix", node=2).stdout.splitlines()
    assert out == ["pfx/a", "value-a", "pfx/b", "value-b", "pfx/c", "value-c"]

    keys = [
        line
        for line in etcdctl(c, "get", "pfx/", "--prefix", "--keys-only").stdout.splitlines()
        if line
    ]
    assert keys == ["pfx/a", "pfx/b", "pfx/c"]

    values = etcdctl(c, "get", "pfx/", "--prefix", "--print-value-only", node=1).stdout
    assert values.splitlines() == ["value-a", "value-b", "value-c"]
    assert etcdctl(c, "get", "pfx/b", "--print-value-only").stdout.strip() == "value-b"


def test_get_json_revisions_and_versions(module_cluster: Cluster) -> None:
    c = module_cluster
    first = json.loads(etcdctl(c, "put", "json/k", "v1", "-w", "json", node=1).stdout)
    second = json.loads(etcdctl(c, "put", "json/k", "v2", "-w", "json", node=2).stdout)
    rev1, rev2 = first["header"]["revision"], second["header"]["revision"]
    assert 0 < rev1 < rev2

    got = json.loads(etcdctl(c, "get", "json/k", "-w", "json").stdout)
    assert got["count"] == 1
    [kv] = got["kvs"]
    assert kv["key"] == b64("json/k")
    assert kv["value"] == b64("v2")
    assert kv["create_revision"] == rev1
    assert kv["mod_revision"] == rev2
    assert kv["version"] == 2
    assert got["header"]["revision"] >= rev2
    assert got["header"]["raft_term"] >= 1
    assert got["header"]["cluster_id"] == second["header"]["cluster_id"]

    missing = json.loads(etcdctl(c, "get", "json/none", "-w", "json").stdout)
    assert missing.get("count", 0) == 0 and "kvs" not in missing


def test_get_at_a_past_revision_reads_the_value_then(module_cluster: Cluster) -> None:
    """More in test_etcd_history.py (side by side with etcd)."""
    c = module_cluster
    first = json.loads(etcdctl(c, "put", "rev/k", "v1", "-w", "json").stdout)
    etcdctl(c, "put", "rev/k", "v2")
    rev = first["header"]["revision"]
    assert etcdctl(c, "get", "rev/k", f"--rev={rev}", "--print-value-only").stdout == "v1\n"
    result = etcdctl(c, "get", "rev/k", "--rev=999999999", check=False)
    assert result.returncode != 0
    assert "required revision is a future revision" in result.stderr, result.stderr


def test_del_and_del_prefix(module_cluster: Cluster) -> None:
    c = module_cluster
    for name in ("a", "b", "c"):
        etcdctl(c, "put", f"del/{name}", name, node=1)
    etcdctl(c, "put", "del-keep", "stays", node=1)

    assert etcdctl(c, "del", "del/a", node=2).stdout.strip() == "1"
    assert etcdctl(c, "get", "del/a", node=0).stdout == ""
    assert etcdctl(c, "del", "del/a").stdout.strip() == "0"

    assert etcdctl(c, "del", "del/", "--prefix", node=0).stdout.strip() == "2"
    assert etcdctl(c, "get", "del/", "--prefix", node=1).stdout == ""
    assert etcdctl(c, "get", "del-keep", "--print-value-only", node=2).stdout.strip() == "stays"


def test_txn_interactive_both_branches(module_cluster: Cluster) -> None:
    c = module_cluster
    etcdctl(c, "put", "txn/k", "start")
    script = 'value("txn/k") = "start"\n\nput txn/k on-success\n\nput txn/k on-failure\n\n'

    first = etcdctl(c, "txn", "-i", stdin=script, node=1).stdout
    assert "SUCCESS" in first and "FAILURE" not in first, first
    assert etcdctl(c, "get", "txn/k", "--print-value-only").stdout.strip() == "on-success"

    second = etcdctl(c, "txn", "-i", stdin=script, node=2).stdout
    assert "FAILURE" in second and "SUCCESS" not in second, second
    assert etcdctl(c, "get", "txn/k", "--print-value-only").stdout.strip() == "on-failure"

    # Non-interactive, a get in the success branch, JSON out.
    read = 'version("txn/k") > "0"\n\nget txn/k\n\nput txn/k never\n\n'
    resp = json.loads(etcdctl(c, "txn", "-w", "json", stdin=read).stdout)
    assert resp["succeeded"] is True
    [op] = resp["responses"]
    [kv] = op["Response"]["ResponseRange"]["kvs"]
    assert kv["value"] == b64("on-failure")
    assert kv["version"] == 3


def test_member_list(module_cluster: Cluster) -> None:
    c = module_cluster
    out = json.loads(etcdctl(c, "member", "list", "-w", "json", node=2).stdout)
    members = {m["name"]: m for m in out["members"]}
    assert set(members) == {s.id for s in c.nodes}
    for s in c.nodes:
        m = members[s.id]
        assert m["clientURLs"] == [f"http://{s.client_addr}"]
        assert m["peerURLs"] == [f"http://{s.peer_addr}"]
        assert m["ID"] != 0
    assert len({m["ID"] for m in members.values()}) == 3

    table = etcdctl(c, "member", "list").stdout.splitlines()
    assert len(table) == 3
    for s in c.nodes:
        assert any(s.id in line and f"http://{s.client_addr}" in line for line in table), table


def test_endpoint_status_names_exactly_one_leader(module_cluster: Cluster) -> None:
    c = module_cluster
    out = json.loads(etcdctl(c, "endpoint", "status", "-w", "json", all_endpoints=True).stdout)
    assert sorted(e["Endpoint"] for e in out) == sorted(c.endpoints)
    statuses = [e["Status"] for e in out]
    leaders = {s["leader"] for s in statuses}
    assert len(leaders) == 1 and 0 not in leaders, leaders
    leader_id = leaders.pop()
    assert sum(s["header"]["member_id"] == leader_id for s in statuses) == 1
    assert len({s["header"]["cluster_id"] for s in statuses}) == 1
    for s in statuses:
        assert s["raftTerm"] >= 1
        assert 0 < s["raftAppliedIndex"] <= s["raftIndex"]
        assert s["version"]

    table = etcdctl(c, "endpoint", "status", all_endpoints=True).stdout.splitlines()
    assert len(table) == 3
    # columns: endpoint, ID, version, db size, is leader, is learner, term, index, applied
    assert sum(line.split(", ")[4] == "true" for line in table) == 1, table


def test_endpoint_health(module_cluster: Cluster) -> None:
    c = module_cluster
    out = json.loads(etcdctl(c, "endpoint", "health", "-w", "json", all_endpoints=True).stdout)
    assert sorted(e["endpoint"] for e in out) == sorted(c.endpoints)
    assert all(e["health"] is True for e in out), out

    result = etcdctl(c, "endpoint", "health", all_endpoints=True)
    text = result.stdout + result.stderr
    for addr in c.endpoints:
        assert f"{addr} is healthy" in text, text


def test_endpoint_health_reports_a_stopped_node(module_cluster: Cluster) -> None:
    """Runs last in this module: it stops a follower (and starts it again)."""
    c = module_cluster
    leader = c.leader()
    follower = next(i for i in range(c.n) if i != leader)
    etcdctl(c, "put", "health/k", "before the stop", node=leader)
    c.stop(follower)
    try:
        result = etcdctl(
            c,
            "endpoint",
            "health",
            "-w",
            "json",
            all_endpoints=True,
            check=False,
            command_timeout_s=2,
        )
        assert result.returncode != 0
        health = {e["endpoint"]: e["health"] for e in json.loads(result.stdout)}
        assert health[c.endpoints[follower]] is False
        assert health[c.endpoints[leader]] is True
    finally:
        c.start(follower)
        c.wait_ready(30)
    wait_until(
        lambda: (
            etcdctl(
                c, "get", "health/k", "--print-value-only", node=follower, check=False
            ).stdout.strip()
            == "before the stop"
        ),
        30,
        "the restarted follower serves again",
    )
