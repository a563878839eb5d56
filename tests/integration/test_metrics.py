"""The metrics endpoint (``--listen-metrics``, DESIGN.md §6) of every node of a real cluster:
Prometheus text with the three offsets, the role and the route-read counter."""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.request

import pytest

from nameserver.client import Client, NotFound
from tests.harness import Cluster, wait_until

pytestmark = pytest.mark.integration


def scrape(c: Cluster, i: int) -> dict[str, float]:
    """``name{labels}`` -> value of node ``i``'s metrics."""
    url = f"http://127.0.0.1:{c.nodes[i].metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            m = re.fullmatch(r"(\S+) (\S+)", line)
            assert m, f"not a Prometheus sample line: {line!r}"
            samples[m.group(1)] = float(m.group(2))
    return samples


def test_every_node_exposes_its_offsets_and_role(module_cluster: Cluster) -> None:
    c = module_cluster
    c.put(0, b"metrics/k", b"v")
    applied = c.wait_converged()
    leader = c.leader()
    for i in range(c.n):
        node = f'node="{c.nodes[i].id}"'
        m = wait_until(
            lambda i=i, node=node: (
                (s := scrape(c, i))[f"metaledger_apply_offset{{{node}}}"] >= applied and s
            ),
            10,
            f"{c.nodes[i].id} reports apply_offset >= {applied}",
        )
        assert (
            m[f"metaledger_apply_offset{{{node}}}"]
            <= m[f"metaledger_commit_offset{{{node}}}"]
            <= m[f"metaledger_end_offset{{{node}}}"]
        )
        role = "leader" if i == leader else "follower"
        assert m[f'metaledger_role{{{node},role="{role}"}}'] == 1
        assert m[f"metaledger_kv_keys{{{node}}}"] >= 1
        groups = m[f"metaledger_apply_groups_total{{{node}}}"]
        assert 1 <= groups <= m[f"metaledger_requests_applied_total{{{node}}}"]


def test_route_reads_are_counted(module_cluster: Cluster) -> None:
    c = module_cluster
    key = f'metaledger_route_reads_total{{node="{c.nodes[1].id}"}}'
    before = scrape(c, 1)[key]
    with Client([c.endpoints[1]]) as client, pytest.raises(NotFound):
        client.route_get("metrics-no-such-topic")
    assert scrape(c, 1)[key] == before + 1


def test_kv_calls_reach_the_extra_grpc_accepts(module_cluster: Cluster) -> None:
    # the server really runs nameserver.grpc.accept (a grpcio without its private API would
    # log a warning and leave this counter at 0)
    c = module_cluster
    key = f'metaledger_grpc_extra_accepts_total{{node="{c.nodes[2].id}"}}'
    before = scrape(c, 2)[key]
    for i in range(10):
        c.put(2, f"metrics/accepts/{i}".encode(), b"v")
    assert scrape(c, 2)[key] >= before + 5  # gRPC's own loop keeps a share (1 in 9 here)


def test_other_paths_are_not_found_and_garbage_is_refused(module_cluster: Cluster) -> None:
    c = module_cluster
    port = c.nodes[0].metrics_port
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
    assert err.value.code == 404
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"\x00\x01garbage\r\n\r\n")  # not an HTTP/1.x request line: 400
        assert s.recv(100).startswith(b"HTTP/1.1 400 ")
    assert scrape(c, 0)  # still serving
