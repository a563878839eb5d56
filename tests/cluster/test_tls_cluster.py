"""Peer TLS on a 3-node cluster (issue 20, item 3): the members elect a leader and
replicate over TLS on the Raft port (the password handshake on top), a follower forwards a
call to the leader's client port over TLS with its own certificate (node-to-node gRPC), a
member whose certificate another CA signed cannot join, and ``metaledger cluster up --tls``
end to end with etcdctl and the metaledger CLI.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from nameserver.cli import cluster as cluster_cmd
from nameserver.client import Client
from protos.metaledger.v1 import admin_pb2, admin_pb2_grpc
from tests.etcd_harness import etcdctl
from tests.harness import REPO_ROOT, free_ports, wait_until
from tests.tls_harness import Pki, TlsCluster

pytestmark = pytest.mark.cluster


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki.make(tmp_path / "pki", nodes=3)


def _no_errors_logged(cluster: TlsCluster, nodes: range | list[int]) -> None:
    for i in nodes:
        text = cluster.log_text(i)
        assert "Traceback" not in text and " ERROR [" not in text, cluster.log_tail(i)


def _values(client: Client, key: bytes) -> list[bytes]:
    return [kv.value for kv in client.get(key, serializable=True).kvs]


class _NodeFlags(TlsCluster):
    """Node i serves with ``n<i>``'s pair of the cluster's CA, but node ``intruder_at`` with
    a pair (and a CA) of another authority."""

    intruder_at = -1

    def command(self, i: int) -> list[str]:
        argv = super().command(i)
        if i == self.intruder_at:
            return [*argv, *self.pki.serve_flags("intruder", which="other", peer=True)]
        return [*argv, *self.pki.serve_flags(f"n{i}", peer=True)]


def test_three_members_with_peer_tls_elect_replicate_and_forward(tmp_path: Path, pki: Pki) -> None:
    cluster = _NodeFlags(tmp_path / "c", 3, pki, [])
    with cluster:
        leader = cluster.wait_ready()
        follower = (leader + 1) % 3
        files = pki.client_files()
        with Client([cluster.endpoints[follower]], timeout_s=10.0, **files) as client:
            client.put(b"tls/replicated", b"yes")  # through the follower: Raft forwarding
            wait_until(  # each member announces its name through the log once it runs
                lambda: sorted(m.name for m in client.members()) == ["n0", "n1", "n2"],
                20.0,
                "members did not announce themselves",
            )
            members = client.members()
        assert all(url.startswith("https://") for m in members for url in m.peer_urls)
        for i in range(3):
            with Client([cluster.endpoints[i]], timeout_s=10.0, **files) as client:
                wait_until(
                    lambda c=client: _values(c, b"tls/replicated") == [b"yes"],  # type: ignore[misc]
                    15.0,
                    f"n{i} did not get the write",
                )
        # a follower forwards Heartbeat to the leader's client port: TLS, its own certificate
        with Client([cluster.endpoints[follower]], timeout_s=10.0, **files) as client:
            written = client.replica_register("c1", "broker-tls", "127.0.0.1:1", 0, 10_000)
            beat = client.replica_heartbeat("broker-tls", written.broker_id)
        assert beat.alive
        _no_errors_logged(cluster, range(3))


def test_a_member_whose_certificate_another_ca_signed_cannot_join(tmp_path: Path, pki: Pki) -> None:
    cluster = _NodeFlags(tmp_path / "c", 3, pki, [], start=False)
    cluster.intruder_at = 2
    with cluster:
        for i in range(3):
            cluster.start(i)
        cluster.wait_ready(nodes=[0, 1])
        with Client(cluster.endpoints[:2], timeout_s=10.0, **pki.client_files()) as client:
            client.put(b"tls/two", b"of three")
        intruder = cluster.nodes[2]
        wait_until(
            lambda: f"TLS to the Raft port of {intruder.peer_addr} failed" in cluster.log_text(0),
            20.0,
            "n0 did not report n2's certificate",
        )
        # n2 (reached with its own authority's client certificate) never learned a leader
        creds = grpc.ssl_channel_credentials(
            Path(pki.ca("other")).read_bytes(),
            Path(pki.key("client", "other")).read_bytes(),
            Path(pki.cert("client", "other")).read_bytes(),
        )
        with grpc.secure_channel(intruder.client_addr, creds) as channel:
            status = admin_pb2_grpc.AdminStub(channel).Status(
                admin_pb2.StatusRequest(), timeout=5.0
            )
        assert status.leader == "" and cluster.is_running(2)
        _no_errors_logged(cluster, [0, 1])


def _free_base_port(nodes: int) -> int:
    for _ in range(50):
        base = free_ports(1)[0] // 10 * 10
        layout = cluster_cmd.layout(nodes, base) if base + 10 * nodes < 65536 else []
        if layout and not cluster_cmd.busy_ports(layout):
            return base
    raise AssertionError("no free ports for a cluster")


@pytest.fixture
def cluster_up_tls(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, Path]]:
    data = tmp_path / "up"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "nameserver.cli", "cluster", "up", "--tls", "--nodes", "3"]
    base = _free_base_port(3)
    proc = subprocess.Popen(
        [*argv, "--data-dir", str(data), "--base-port", str(base)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        out = ""
        for line in proc.stdout:  # ends if cluster up exits (its startup timeout: 60 s)
            out += line
            if line.lstrip().startswith("etcdctl "):
                break
        assert "etcdctl " in out, (out, proc.poll())
        yield proc, out, data
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_cluster_up_tls_end_to_end(
    cluster_up_tls: tuple[subprocess.Popen[str], str, Path],
) -> None:
    proc, out, data = cluster_up_tls
    line = next(s for s in out.splitlines() if s.lstrip().startswith("etcdctl "))
    m = re.search(r"--endpoints (\S+) (--cacert \S+ --cert \S+ --key \S+)", line)
    assert m, line
    endpoints, tls = m.group(1), m.group(2).split()
    flags = [f"{tls[i]}={tls[i + 1]}" for i in range(0, len(tls), 2)]
    assert etcdctl(endpoints, "put", "up/tls", "v", flags=flags).returncode == 0
    got = etcdctl(endpoints, "get", "up/tls", flags=flags)
    assert (got.returncode, got.stdout) == (0, "up/tls\nv\n"), got
    refused = etcdctl(endpoints, "get", "up/tls", flags=flags[:1], command_timeout_s=3)
    assert refused.returncode == 1, refused  # no client certificate
    ml_line = next(s for s in out.splitlines() if s.lstrip().startswith("metaledger "))
    ml_argv = ml_line.split()[1:-1]  # the printed command without its "status"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cli = subprocess.run(
        [sys.executable, "-m", "nameserver.cli", *ml_argv, "get", "up/tls"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert (cli.returncode, cli.stdout) == (0, "up/tls\nv\n"), cli
    assert (data / "tls" / "ca.pem").exists()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
    for i in range(3):
        text = (data / f"n{i}.log").read_text()
        assert "Traceback" not in text and " ERROR [" not in text, text[-3000:]
