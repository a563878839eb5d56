"""The real etcdctl (v3 API) changing a metaledger cluster's membership and leader.

``etcdctl member add NAME --peer-urls=...`` prints the ``ETCD_INITIAL_CLUSTER`` the new node
must start with; the node is started with exactly that (as ``--initial-cluster``), joins,
and ``etcdctl member list`` names it. ``etcdctl move-leader`` finds the leader itself
through Maintenance.Status of every endpoint, so it gets them all. Each test changes the
membership, so each has a cluster of its own (the ``cluster`` fixture).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.harness import Cluster, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]

ETCDCTL_TIMEOUT_S = 40


def etcdctl(
    endpoints: list[str], *args: str, check: bool = True, command_timeout_s: int = 15
) -> subprocess.CompletedProcess[str]:
    """Run ``etcdctl args`` against ``endpoints``."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ETCDCTL_")}
    env["ETCDCTL_API"] = "3"
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env.pop(proxy, None)
    cmd = [
        "etcdctl",
        f"--endpoints={','.join(endpoints)}",
        "--dial-timeout=5s",
        f"--command-timeout={command_timeout_s}s",
        *args,
    ]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=ETCDCTL_TIMEOUT_S, env=env, check=False
    )
    if check and result.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} exited {result.returncode}\n"
            f"stdout: {result.stdout}\nstderr: {result.stderr}"
        )
    return result


def parse_env_lines(text: str) -> dict[str, str]:
    """``NAME="value"`` lines of ``etcdctl member add`` output."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.startswith("ETCD_"):
            out[name] = value.strip('"')
    return out


def member_table(endpoints: list[str]) -> list[list[str]]:
    """``etcdctl member list`` rows: id, status, name, peer URLs, client URLs, learner."""
    out = etcdctl(endpoints, "member", "list").stdout
    return [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line]


def leader_name(cluster: Cluster) -> str:
    return cluster.nodes[cluster.wait_ready(20)].id


def test_member_add_start_list_move_leader_and_remove(cluster: Cluster) -> None:
    core = list(cluster.endpoints)

    # add n3 before it runs (etcd's order), then start it with the printed initial cluster
    n3 = cluster.add_node(start=False)
    peer = cluster.peer_url(n3)
    added = etcdctl(core, "member", "add", "n3", f"--peer-urls={peer}")
    first = added.stdout.splitlines()[0]
    assert first.startswith("Member ") and " added to cluster " in first, added.stdout
    new_id = first.split()[1]
    env = parse_env_lines(added.stdout)
    assert env["ETCD_NAME"] == "n3"
    assert env["ETCD_INITIAL_CLUSTER_STATE"] == "existing"
    assert env["ETCD_INITIAL_ADVERTISE_PEER_URLS"] == peer
    printed = dict(part.split("=", 1) for part in env["ETCD_INITIAL_CLUSTER"].split(","))
    expected = dict(part.split("=", 1) for part in cluster.initial_clusters[n3].split(","))
    assert {k: v.removeprefix("http://") for k, v in printed.items()} == expected
    cluster.start(n3)

    everyone = [*core, cluster.endpoints[n3]]

    def four_named() -> list[list[str]] | None:
        rows = member_table(core)
        return rows if len(rows) == 4 and all(r[1] == "started" for r in rows) else None

    rows = wait_until(four_named, 30, "etcdctl member list shows 4 started members", 0.2)
    assert rows is not None
    by_name = {r[2]: r for r in rows}
    assert sorted(by_name) == ["n0", "n1", "n2", "n3"]
    assert by_name["n3"][0] == new_id
    assert by_name["n3"][3] == peer
    assert by_name["n3"][4] == f"http://{cluster.endpoints[n3]}"
    assert all(r[5] == "false" for r in rows)
    cluster.wait_ready(30)

    # the new member serves: a write through it, read back (serializable) on it
    assert etcdctl([cluster.endpoints[n3]], "put", "joined/k", "v").stdout.strip() == "OK"
    got = etcdctl([cluster.endpoints[n3]], "get", "joined/k", "--consistency=s").stdout
    assert got.splitlines() == ["joined/k", "v"]

    # move-leader to a follower named by hex id: etcdctl finds the leader among everyone
    old = leader_name(cluster)
    target = next(name for name in ("n0", "n1", "n2") if name != old)
    moved = etcdctl(everyone, "move-leader", by_name[target][0])
    assert moved.stdout.strip().startswith("Leadership transferred from "), moved.stdout
    assert moved.stdout.strip().endswith(f"to {by_name[target][0]}"), moved.stdout
    wait_until(lambda: leader_name(cluster) == target, 15, f"{target} leads")

    status = json.loads(etcdctl(everyone, "endpoint", "status", "-w", "json").stdout)
    leaders = {s["Status"]["leader"] for s in status}
    assert leaders == {int(by_name[target][0], 16)}, status

    # remove n3 by hex id, then stop it: three members again, all named
    removed = etcdctl(core, "member", "remove", new_id)
    # etcdctl prints the id with "%16x": an id of fewer than 16 hex digits is space-padded
    assert re.match(rf"Member +{new_id} removed from cluster ", removed.stdout), removed.stdout
    assert cluster.stop(n3) == 0, cluster.log_tail(n3)
    rows = member_table(core)
    assert sorted(r[2] for r in rows) == ["n0", "n1", "n2"]
    assert etcdctl(core, "put", "after/remove", "ok").stdout.strip() == "OK"
    assert etcdctl(core, "get", "joined/k", "--print-value-only").stdout.strip() == "v"
