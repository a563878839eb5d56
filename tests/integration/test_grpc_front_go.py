"""``metaledger serve --grpc-front go``: a real node behind the real Go front, driven by the
real etcdctl and by nameserver.client.

KV's put/get/del/txn go through the front's fast path (the core socket); watch, lease
keep-alive, member list and auth's methods are proxied to the node's own gRPC server. A
too-large put is refused with the python front's words; the front killed with SIGKILL is
started again by the node; a node stopped, or killed with SIGKILL, leaves no front behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from nameserver.client import Client
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from tests.etcd_harness import etcdctl as etcdctl_at
from tests.go_front import GO_FRONT, front_binary, front_pids, is_front
from tests.harness import Cluster, wait_until
from tests.integration.test_etcdctl import etcdctl
from tests.integration.test_etcdctl_watch import EtcdctlWatch
from tests.integration.test_metrics import scrape
from tests.tls_harness import Pki, TlsCluster

__all__ = ["front_binary"]  # the fixture, used by name

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]

MiB = 1024 * 1024


def _go_node(root: Path) -> Cluster:
    c = Cluster(root, n=1, extra_args=GO_FRONT)
    try:
        c.wait_ready(60)
        c.wait_announced(30)
    except BaseException:
        c.close(failed=True)
        raise
    return c


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, front_binary: Path) -> Iterator[Cluster]:
    """One node serving its client port through the Go front."""
    c = _go_node(tmp_path_factory.mktemp("gofront") / "cluster")
    failed = True
    try:
        yield c
        failed = False
    finally:
        c.close(failed=failed)


def test_the_node_serves_its_client_port_through_the_go_front(node: Cluster) -> None:
    (pid,) = front_pids(node, 0)
    assert is_front(pid)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[cmdline.index(b"--listen") + 1] == node.endpoints[0].encode()
    backend = cmdline[cmdline.index(b"--backend") + 1].decode()
    assert backend.startswith("@metaledger-backend-")  # an abstract socket, no port


def front_metric(c: Cluster, name: str) -> float:
    return scrape(c, 0)[f'metaledger_grpc_front_{name}_total{{node="{c.nodes[0].id}"}}']


def test_put_get_del_and_txn_through_the_fast_path(node: Cluster) -> None:
    before = front_metric(node, "calls")
    assert etcdctl(node, "put", "fast/k", "v1").stdout.strip() == "OK"
    assert etcdctl(node, "get", "fast/k").stdout.splitlines() == ["fast/k", "v1"]
    txn = etcdctl(
        node,
        "txn",
        stdin='value("fast/k") = "v1"\n\nput fast/k v2\n\nput fast/other no\n\n',
    ).stdout.split()
    assert txn == ["SUCCESS", "OK"]
    assert etcdctl(node, "get", "fast/k", "--print-value-only").stdout.strip() == "v2"
    assert etcdctl(node, "del", "fast/k").stdout.strip() == "1"
    assert etcdctl(node, "get", "fast/k").stdout == ""
    assert front_metric(node, "calls") >= before + 6  # handed to the core, not proxied


def test_watch_and_lease_keep_alive_are_proxied(node: Cluster) -> None:
    put = etcdctl(node, "put", "proxied/w", "seen", "-w", "json").stdout
    revision = json.loads(put)["header"]["revision"]
    watch = EtcdctlWatch(node, "proxied/w", "--rev", str(revision))
    try:
        assert watch.read(3) == ["PUT", "proxied/w", "seen"]
        etcdctl(node, "put", "proxied/w", "live")
        assert watch.read(3) == ["PUT", "proxied/w", "live"]
    finally:
        watch.stop()
    lease = etcdctl(node, "lease", "grant", "30").stdout.split()[1]
    alive = etcdctl(node, "lease", "keep-alive", "--once", lease).stdout
    assert f"lease {lease} keepalived with TTL(" in alive


def test_a_calls_metadata_reaches_the_handlers_through_the_fast_path(node: Cluster) -> None:
    """Not only etcd's token: nameserver.client's retry identity (``x-ml-client-id``,
    ``x-ml-seq``) must reach the handler, or a retried write would be applied twice."""
    with grpc.insecure_channel(node.endpoints[0]) as channel:
        kv = rpc_pb2_grpc.KVStub(channel)
        md = [("x-ml-client-id", "front-md-test"), ("x-ml-seq", "1")]
        put = rpc_pb2.PutRequest(key=b"md/k", value=b"v")
        first = kv.Put(put, timeout=10, metadata=md)
        retried = kv.Put(put, timeout=10, metadata=md)  # answered, not applied again
        assert retried.header.revision == first.header.revision
        again = kv.Put(put, timeout=10, metadata=[md[0], ("x-ml-seq", "2")])
        assert again.header.revision == first.header.revision + 1


def test_member_list_names_the_client_port_the_front_listens_on(node: Cluster) -> None:
    (line,) = etcdctl(node, "member", "list").stdout.splitlines()
    assert line.split(", ")[2:5] == ["n0", node.peer_url(0), f"http://{node.endpoints[0]}"]


def test_too_large_puts_are_refused_as_on_the_python_front(node: Cluster) -> None:
    # (etcdctl sends no message over 2 MiB, max_request_bytes: a gRPC stub does)
    with pytest.raises(grpc.RpcError) as caught:
        node.stub(0).Put(rpc_pb2.PutRequest(key=b"big/k", value=b"x" * (3 * MiB)), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == (
        f"etcdserver: request is too large: {3 * MiB + 12} bytes > limit "
        f"max_request_bytes={2 * MiB}"
    )
    with pytest.raises(grpc.RpcError) as caught:  # past gRPC's own limit (16 MiB)
        node.stub(0).Put(rpc_pb2.PutRequest(key=b"big/k", value=b"x" * (17 * MiB)), timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert etcdctl(node, "get", "big/k").stdout == ""


def test_nameserver_client_and_the_fencing_token_trailer(node: Cluster) -> None:
    with Client(node.endpoints, timeout_s=10) as client:
        client.put(b"client/k", b"v")
        assert [kv.value for kv in client.get(b"client/k").kvs] == [b"v"]
        lease = client.lease_grant(20)
        assert lease.fencing_token > 0
    stub = rpc_pb2_grpc.LeaseStub(node.channel(0))
    _, call = stub.LeaseGrant.with_call(rpc_pb2.LeaseGrantRequest(TTL=20), timeout=10)
    assert dict(call.trailing_metadata())["x-ml-fencing-token"].isdigit()


def test_auth_through_the_front(tmp_path: Path, front_binary: Path) -> None:
    with _go_node(tmp_path / "cluster") as c:
        etcdctl(c, "user", "add", "root", "--new-user-password", "rootpw")
        etcdctl(c, "auth", "enable")
        refused = etcdctl(c, "put", "auth/k", "v", check=False)
        assert refused.returncode != 0 and "user name is empty" in refused.stderr
        assert etcdctl(c, "put", "auth/k", "v", "--user", "root:rootpw").stdout.strip() == "OK"
        got = etcdctl(c, "get", "auth/k", "--user", "root:rootpw").stdout.splitlines()
        assert got == ["auth/k", "v"]
        wrong = etcdctl(c, "get", "auth/k", "--user", "root:nope", check=False)
        assert wrong.returncode != 0 and "authentication failed" in wrong.stderr


def test_tls_with_client_cert_auth_names_the_user_by_certificate_and_no_client_names_itself(
    tmp_path: Path, front_binary: Path
) -> None:
    """The front terminates TLS with the node's files; a client without a certificate is
    refused at the handshake; with auth on, a call without a token is the user its verified
    certificate's CN names ("client"), through the fast path (Put) and the proxied one
    (UserList); a client that sends the front's own metadata naming root gains nothing."""
    pki = Pki.make(tmp_path / "pki", nodes=1)
    flags = [*pki.serve_flags("n0"), "--bcrypt-cost=4", *GO_FRONT]
    with TlsCluster(tmp_path / "ml", 1, pki, flags) as c:
        c.wait_ready(60)
        (pid,) = front_pids(c, 0)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"--client-cert-auth" in cmdline and b"--identity-key-stdin" in cmdline
        ours = f"https://{c.nodes[0].client_addr}"

        def ctl(*args: str, user: str | None = None, cert: bool = True) -> tuple[int, str]:
            tls = pki.etcdctl_flags() if cert else [f"--cacert={pki.ca()}"]
            done = etcdctl_at(ours, *args, flags=tls + ([f"--user={user}"] if user else []))
            return done.returncode, done.stdout + done.stderr

        for args in (
            ["user", "add", "root:rootpw"],
            ["user", "add", "client", "--no-password"],
            ["role", "add", "r1"],
            ["role", "grant-permission", "r1", "readwrite", "foo/", "--prefix=true"],
            ["user", "grant-role", "client", "r1"],
            ["auth", "enable"],
        ):
            code, out = ctl(*args)
            assert code == 0, f"{args}: {out}"
        assert ctl("put", "foo/a", "1") == (0, "OK\n")  # as "client", by certificate
        code, out = ctl("put", "zzz", "1")
        assert code != 0 and "permission denied" in out
        code, out = ctl("user", "list")  # proxied: root only
        assert code != 0 and "permission denied" in out
        assert ctl("user", "list", user="root:rootpw")[0] == 0
        code, out = ctl("get", "foo/a", cert=False)
        assert code != 0  # no certificate: refused at the handshake

        spoof = (("x-ml-front-cn", "root"), ("x-ml-front-key", "0" * 32))
        with grpc.secure_channel(c.endpoints[0], pki.channel_credentials()) as ch:
            kv, auth = rpc_pb2_grpc.KVStub(ch), rpc_pb2_grpc.AuthStub(ch)
            with pytest.raises(grpc.RpcError) as put:
                kv.Put(rpc_pb2.PutRequest(key=b"zzz", value=b"1"), metadata=spoof, timeout=10)
            assert put.value.code() == grpc.StatusCode.PERMISSION_DENIED
            with pytest.raises(grpc.RpcError) as users:
                auth.UserList(rpc_pb2.AuthUserListRequest(), metadata=spoof, timeout=10)
            assert users.value.code() == grpc.StatusCode.PERMISSION_DENIED
            got = kv.Range(rpc_pb2.RangeRequest(key=b"foo/a"), metadata=spoof, timeout=10)
            assert [kv.value for kv in got.kvs] == [b"1"]  # still "client", who may read foo/


def test_a_killed_front_is_started_again_and_a_stopped_or_killed_node_leaves_none(
    tmp_path: Path, front_binary: Path
) -> None:
    with _go_node(tmp_path / "cluster") as c:
        (first,) = front_pids(c, 0)
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: len(front_pids(c, 0)) == 2, timeout=20, message="a second front")
        second = front_pids(c, 0)[1]
        assert second != first and is_front(second)

        def serves() -> bool:
            return etcdctl(c, "put", "again/k", "v", check=False).returncode == 0

        wait_until(serves, timeout=20, message="puts through the restarted front")
        assert "exited (-9); starting it again in 1 s" in c.log_text(0)
        assert front_metric(c, "starts") == 2
        assert c.stop(0) == 0
        wait_until(lambda: not is_front(second), timeout=5, message="the front gone")

        c.start(0)  # a node killed outright: its front reads EOF on stdin and exits
        c.wait_ready(60)
        (third,) = front_pids(c, 0)
        assert is_front(third)
        c.kill(0, signal.SIGKILL)
        wait_until(lambda: not is_front(third), timeout=10, message="the killed node's front gone")
