"""etcd's auth through the real etcdctl, side by side with a real etcd 3.4: the same command
sequence (users, roles, prefix permissions, auth enable/disable, allowed and denied reads
and writes, a wrong password) against both, the same exit codes, stdout and error lines.

etcdctl's client logs a JSON warning line per failed attempt (with a timestamp and a random
target id): those are dropped before comparing; the ``Error: ...`` line is compared as is.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from nameserver.client import Client
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from tests.etcd_harness import EtcdServer, etcdctl
from tests.harness import running_cluster
from tests.tls_harness import Pki, TlsCluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("etcd") is None or shutil.which("etcdctl") is None,
        reason="etcd 3.4 and etcdctl are not installed",
    ),
]

ROOT = ["--user=root:rootpw"]
ALICE = ["--user=alice:alicepw"]

#: (etcdctl flags, arguments): the sequence run against both servers
SEQUENCE: list[tuple[list[str], list[str]]] = [
    ([], ["user", "add", "root:rootpw"]),
    ([], ["user", "add", "alice:alicepw"]),
    ([], ["role", "add", "r1"]),
    ([], ["role", "grant-permission", "r1", "readwrite", "foo/", "--prefix=true"]),
    ([], ["role", "grant-permission", "r1", "read", "bar"]),
    ([], ["role", "grant-permission", "r1", "write", "w", "--from-key"]),
    ([], ["user", "grant-role", "alice", "r1"]),
    ([], ["auth", "enable"]),
    ([], ["put", "foo/a", "1"]),  # no user: "user name is empty"
    ([], ["watch", "foo/a"]),  # a watch create refused in band: "watch was canceled (...)"
    (ALICE, ["watch", "bar", "--prefix"]),  # "bar" is read only: the prefix is not
    (["--user=alice:wrong"], ["watch", "foo/a"]),
    ([], ["get", "foo/a"]),
    (ALICE, ["put", "foo/a", "1"]),
    (ALICE, ["get", "foo/a"]),
    (ALICE, ["get", "foo/", "--prefix"]),
    (ALICE, ["put", "bar", "1"]),  # read only
    (ALICE, ["get", "bar"]),
    (ALICE, ["get", "zzz"]),
    (ALICE, ["put", "wz", "1"]),  # write from "w" on
    (ALICE, ["get", "wz"]),
    (ALICE, ["del", "foo/", "--prefix"]),
    (ALICE, ["txn"]),  # a txn touching bar (read only): denied whole
    (["--user=alice:wrong"], ["get", "foo/a"]),
    (["--user=nobody:x"], ["get", "foo/a"]),
    (ALICE, ["user", "list"]),
    (ALICE, ["user", "get", "alice"]),
    (ALICE, ["role", "get", "r1"]),
    (ALICE, ["role", "add", "r2"]),
    (ROOT, ["user", "list"]),
    (ROOT, ["role", "list"]),
    (ROOT, ["role", "get", "r1"]),
    (ROOT, ["user", "get", "alice"]),
    (ROOT, ["user", "get", "nobody"]),
    (ROOT, ["role", "revoke-permission", "r1", "bar"]),
    (ROOT, ["role", "revoke-permission", "r1", "bar"]),
    (ROOT, ["user", "revoke-role", "alice", "r9"]),
    (ROOT, ["user", "grant-role", "alice", "nope"]),
    (ROOT, ["user", "delete", "root"]),
    (ROOT, ["role", "delete", "root"]),
    (ROOT, ["user", "revoke-role", "root", "root"]),
    (ROOT, ["user", "add", "alice:x"]),
    (ROOT, ["role", "add", "r1"]),
    (ROOT, ["put", "anything", "v"]),
    (ROOT, ["get", "anything"]),
    (ALICE, ["get", "bar"]),  # the permission was revoked
    (ROOT, ["user", "passwd", "alice", "--interactive=false"]),
    (ALICE, ["get", "foo/a"]),  # the old password no longer works
    (["--user=alice:newpw"], ["get", "foo/a"]),
    (ROOT, ["role", "delete", "r1"]),
    (["--user=alice:newpw"], ["get", "foo/a"]),
    (ROOT, ["user", "delete", "alice"]),
    (ROOT, ["auth", "disable"]),
    ([], ["get", "foo/a"]),
    ([], ["auth", "disable"]),
    ([], ["role", "list"]),
    ([], ["user", "list"]),
]

#: stdin of the commands that read it
STDIN = {
    ("txn",): 'val("foo/a") = "1"\n\nput foo/b 2\n\nput bar 3\n\n',
    ("user", "passwd", "alice", "--interactive=false"): "newpw\n",
}


def normalised(stderr: str) -> list[str]:
    """The client's JSON retry warnings dropped (timestamps, random targets)."""
    return [line for line in stderr.splitlines() if not line.startswith('{"level"')]


def test_the_same_etcdctl_auth_sequence_answers_as_etcd_does(tmp_path: Path) -> None:
    with (
        EtcdServer(tmp_path / "etcd") as etcd,
        running_cluster(tmp_path / "ml", 1, extra_args=["--bcrypt-cost=4"]) as cluster,
    ):
        etcd.wait_ready()
        ours = cluster.endpoints[0]
        for flags, args in SEQUENCE:
            stdin = STDIN.get(tuple(args))
            theirs_r = etcdctl(etcd.endpoint, *args, flags=flags, stdin=stdin)
            ours_r = etcdctl(ours, *args, flags=flags, stdin=stdin)
            what = f"etcdctl {' '.join(flags + args)}"
            assert ours_r.returncode == theirs_r.returncode, (
                f"{what}: exit {ours_r.returncode}, etcd {theirs_r.returncode}\n"
                f"ours: {ours_r.stderr}\netcd: {theirs_r.stderr}"
            )
            assert ours_r.stdout == theirs_r.stdout, f"{what}: stdout differs"
            assert normalised(ours_r.stderr) == normalised(theirs_r.stderr), (
                f"{what}: errors differ\nours: {ours_r.stderr}\netcd: {theirs_r.stderr}"
            )


T_USER = ["--user=test-user:pass"]
TXN_OK = 'val("foo") = "bar"\n\nput key3 v\n\nput key4 v\n\n'
TXN_READ_DENIED = 'val("x") = "1"\n\nput foo v\n\n\n'
TXN_WRITE_DENIED = "\nput x 1\n\n"

#: etcd's own e2e sequence (tests/e2e/ctl_v3_auth_test.go, as far as etcdctl 3.4 goes):
#: (flags, arguments, stdin). ``{lease}`` is the lease the last ``lease grant`` printed on
#: that server, ``{dir}`` a directory of that server's own.
E2E_SEQUENCE: list[tuple[list[str], list[str], str | None]] = [
    ([], ["auth", "enable"], None),  # authEnableTest: no root user yet
    ([], ["user", "add", "root:rootpw"], None),
    ([], ["auth", "enable"], None),  # etcdctl grants root the root role first
    (ROOT, ["user", "add", "test-user:pass"], None),
    (ROOT, ["role", "add", "test-role"], None),
    (ROOT, ["role", "grant-permission", "test-role", "readwrite", "foo"], None),
    (ROOT, ["role", "grant-permission", "test-role", "readwrite", "key", "--prefix=true"], None),
    (ROOT, ["role", "grant-permission", "test-role", "readwrite", "z", "--from-key"], None),
    (ROOT, ["user", "grant-role", "test-user", "test-role"], None),
    (T_USER, ["put", "foo", "bar"], None),  # authCredWriteKeyTest
    (["--user=test-user:wrong"], ["put", "foo", "bar"], None),
    (T_USER, ["put", "key1", "v"], None),  # authTestPrefixPerm
    (T_USER, ["put", "key/2", "v"], None),
    (T_USER, ["get", "key", "--prefix"], None),
    (T_USER, ["put", "ke", "v"], None),
    (T_USER, ["put", "zzz", "v"], None),  # authTestFromKeyPerm
    (T_USER, ["get", "z", "--from-key"], None),
    (T_USER, ["get", "y", "--from-key"], None),
    (T_USER, ["del", "z", "--from-key"], None),
    (T_USER, ["del", "key", "--prefix"], None),
    (T_USER, ["txn"], TXN_OK),  # authTestTxn
    (T_USER, ["txn"], TXN_READ_DENIED),
    (T_USER, ["txn"], TXN_WRITE_DENIED),
    (T_USER, ["lease", "grant", "100"], None),  # authLeaseTest*
    (T_USER, ["put", "foo", "v", "--lease={lease}"], None),
    (T_USER, ["lease", "keep-alive", "--once", "{lease}"], None),
    (T_USER, ["lease", "timetolive", "{lease}", "--keys"], None),
    (T_USER, ["lease", "list"], None),
    (ROOT, ["put", "x", "v", "--lease={lease}"], None),
    (T_USER, ["lease", "revoke", "{lease}"], None),  # a key of the lease it may not write
    (T_USER, ["put", "key5", "v", "--lease={lease}"], None),
    (ROOT, ["lease", "revoke", "{lease}"], None),
    (ROOT, ["get", "x"], None),
    (T_USER, ["get", "foo"], None),
    (T_USER, ["member", "add", "m2", "--peer-urls=http://127.0.0.1:1"], None),  # authTestMember*
    (T_USER, ["member", "remove", "1234"], None),
    (T_USER, ["member", "update", "1234", "--peer-urls=http://127.0.0.1:1"], None),
    (T_USER, ["defrag"], None),  # authTestDefrag
    (ROOT, ["defrag"], None),
    ([], ["defrag"], None),
    (T_USER, ["snapshot", "save", "{dir}/snap.db"], None),  # authTestSnapshot
    (ROOT, ["snapshot", "save", "{dir}/snap.db"], None),
    (T_USER, ["endpoint", "hashkv"], None),
    (T_USER, ["endpoint", "health"], None),  # authTestEndpointHealth
    (T_USER, ["role", "get", "test-role"], None),  # authTestRoleGet / UserGet / RoleList
    (T_USER, ["user", "get", "test-user"], None),
    (T_USER, ["user", "get", "root"], None),
    (T_USER, ["role", "list"], None),
    (T_USER, ["auth", "disable"], None),
    (ROOT, ["auth", "enable"], None),  # enabled already: etcd ignores it
    (T_USER, ["user", "passwd", "test-user", "--interactive=false"], "pass2\n"),
    (ROOT, ["user", "add", "nopw", "--no-password"], None),
    (ROOT, ["user", "get", "nopw"], None),
    (["--user=nopw:x"], ["get", "foo"], None),
    (ROOT, ["role", "delete", "root"], None),  # authTestInvalidMgmt
    (ROOT, ["user", "revoke-role", "root", "root"], None),
    (ROOT, ["role", "revoke-permission", "test-role", "foo"], None),  # authTestRevokeWithDelete
    (T_USER, ["get", "foo"], None),
    (ROOT, ["role", "delete", "test-role"], None),
    (T_USER, ["put", "key6", "v"], None),
    (ROOT, ["user", "delete", "test-user"], None),  # authUserDeleteDuringOpsTest
    (T_USER, ["get", "foo"], None),
    (ROOT, ["auth", "disable"], None),  # authDisableTest
    ([], ["put", "foo", "v"], None),
]


def _shape_of(text: str, endpoint: str, root: Path) -> str:
    """Output with what legitimately differs between two servers made equal: the endpoint,
    the output directory, ids (leases, members), durations."""
    text = text.replace(endpoint, "ENDPOINT").replace(str(root), "DIR")
    text = re.sub(r"\b[0-9a-f]{16}\b", "ID", text)
    text = re.sub(r"took = [0-9.]+[a-zµ]+", "took = T", text)
    text = re.sub(r"remaining\(\d+s\)", "remaining(Ns)", text)
    return "\n".join(normalised(text))


def _run_e2e(endpoint: str, root: Path) -> list[tuple[int, str, str]]:
    root.mkdir(parents=True, exist_ok=True)
    values = {"dir": str(root), "lease": ""}
    results = []
    for flags, args, stdin in E2E_SEQUENCE:
        argv = [a.format(**values) for a in args]
        r = etcdctl(endpoint, *argv, flags=flags, stdin=stdin)
        granted = re.match(r"lease ([0-9a-f]+) granted", r.stdout)
        if granted:
            values["lease"] = granted.group(1)
        out, err = _shape_of(r.stdout, endpoint, root), _shape_of(r.stderr, endpoint, root)
        results.append((r.returncode, out, err))
    return results


def _jwt_flag(root: Path) -> str:
    """etcd's ``--auth-token`` for RS256 JWTs with a fresh key pair (both servers take it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(65537, 2048)
    priv, pub = root / "jwt.key", root / "jwt.pub"
    priv.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pub.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return f"--auth-token=jwt,pub-key={pub},priv-key={priv},sign-method=RS256,ttl=5m"


@pytest.mark.parametrize("tokens", ["simple", "jwt"])
def test_etcds_own_e2e_auth_sequence_answers_the_same(tmp_path: Path, tokens: str) -> None:
    """With simple tokens and with JWTs (etcd's e2e runs Txn, Watch, Lease, Snapshot with
    both: configJWT)."""
    token_flags = [_jwt_flag(tmp_path)] if tokens == "jwt" else []
    with (
        EtcdServer(tmp_path / "etcd", extra=token_flags) as etcd,
        running_cluster(
            tmp_path / "ml", 1, extra_args=["--bcrypt-cost=4", *token_flags]
        ) as cluster,
    ):
        etcd.wait_ready()
        theirs = _run_e2e(etcd.endpoint, tmp_path / "out-etcd")
        ours = _run_e2e(cluster.endpoints[0], tmp_path / "out-ml")
    diffs = [
        f"etcdctl {' '.join(flags + args)}:\n  ours {o}\n  etcd {t}"
        for (flags, args, _), o, t in zip(E2E_SEQUENCE, ours, theirs, strict=True)
        if o != t
    ]
    assert not diffs, "\n".join(diffs)


def _watch_stream(endpoint: str, user: str, password: str) -> list[rpc_pb2.WatchResponse]:
    """On ONE Watch stream as ``user``: a create on a key the user may not read, then one on
    a key it may, then a put of that key: the responses up to its event (or a stream error)."""
    target = endpoint.removeprefix("http://")
    with grpc.insecure_channel(target) as channel:
        auth = rpc_pb2_grpc.AuthStub(channel)
        token = auth.Authenticate(
            rpc_pb2.AuthenticateRequest(name=user, password=password), timeout=10
        ).token
        md = (("token", token),)
        creates = [
            rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=b"bar")),
            rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=b"foo/w")),
        ]
        sent = threading.Event()

        def requests() -> Iterator[rpc_pb2.WatchRequest]:
            yield from creates
            sent.wait(20)  # the stream stays open (half-closing it would end etcd's)

        responses: list[rpc_pb2.WatchResponse] = []
        stream = rpc_pb2_grpc.WatchStub(channel).Watch(requests(), metadata=md, timeout=20)
        try:
            for r in stream:
                responses.append(r)
                if r.created and not r.canceled:
                    kv = rpc_pb2_grpc.KVStub(channel)
                    kv.Put(rpc_pb2.PutRequest(key=b"foo/w", value=b"1"), metadata=md, timeout=10)
                if r.events:
                    break
        finally:
            sent.set()
            stream.cancel()
        return responses


def _shape(r: rpc_pb2.WatchResponse) -> tuple[object, ...]:
    return (
        r.created,
        r.canceled,
        r.cancel_reason,
        r.watch_id,
        [(e.type, e.kv.key, e.kv.value) for e in r.events],
    )


def test_a_watch_the_user_may_not_read_is_cancelled_and_the_stream_stays_open(
    tmp_path: Path,
) -> None:
    """etcd 3.4 (v3rpc/watch.go) answers a refused create with created+canceled, watch id
    -1 and the reason, and the stream serves the user's other watches."""
    setup = [
        ["user", "add", "root:rootpw"],
        ["user", "add", "alice:alicepw"],
        ["role", "add", "r1"],
        ["role", "grant-permission", "r1", "readwrite", "foo/", "--prefix=true"],
        ["user", "grant-role", "alice", "r1"],
        ["auth", "enable"],
    ]
    with (
        EtcdServer(tmp_path / "etcd") as etcd,
        running_cluster(tmp_path / "ml", 1, extra_args=["--bcrypt-cost=4"]) as cluster,
    ):
        etcd.wait_ready()
        shapes = []
        for ep in (etcd.endpoint, cluster.endpoints[0]):
            for args in setup:
                assert etcdctl(ep, *args).returncode == 0, (ep, args)
            shapes.append([_shape(r) for r in _watch_stream(ep, "alice", "alicepw")])
        assert shapes[0] == [
            (
                True,
                True,
                "rpc error: code = PermissionDenied desc = etcdserver: permission denied",
                -1,
                [],
            ),
            (True, False, "", 0, []),
            (False, False, "", 0, [(0, b"foo/w", b"1")]),
        ]
        assert shapes[1] == shapes[0]


#: TLS with client-cert-auth and auth together: (--user or None, arguments). Without a
#: token, both servers take the user from the client certificate's CN ("client").
TLS_SEQUENCE: list[tuple[str | None, list[str]]] = [
    (None, ["user", "add", "root:rootpw"]),
    (None, ["user", "add", "alice:alicepw"]),
    (None, ["role", "add", "r1"]),
    (None, ["role", "grant-permission", "r1", "readwrite", "foo/", "--prefix=true"]),
    (None, ["user", "grant-role", "alice", "r1"]),
    (None, ["auth", "enable"]),
    ("alice:alicepw", ["put", "foo/a", "1"]),
    ("alice:alicepw", ["get", "foo/a"]),
    ("alice:alicepw", ["put", "bar", "1"]),
    ("alice:wrong", ["get", "foo/a"]),
    (None, ["get", "foo/a"]),  # CN "client": no such user
    ("root:rootpw", ["user", "add", "client", "--no-password"]),
    ("root:rootpw", ["user", "grant-role", "client", "r1"]),
    (None, ["get", "foo/a"]),  # CN "client" may read foo/
    (None, ["put", "foo/b", "2"]),
    (None, ["put", "zzz", "1"]),
    (None, ["user", "list"]),
    (None, ["watch", "zzz"]),
    ("client:x", ["get", "foo/a"]),  # a user without a password cannot authenticate
    ("root:rootpw", ["get", "", "--prefix", "--keys-only"]),
]


def test_etcdctl_with_tls_and_auth_together_answers_as_etcd_does(tmp_path: Path) -> None:
    pki = Pki.make(tmp_path / "pki", nodes=1)
    flags = [*pki.serve_flags("n0"), "--bcrypt-cost=4"]
    with (
        EtcdServer(tmp_path / "etcd", extra=pki.etcd_flags(), scheme="https") as etcd,
        TlsCluster(tmp_path / "ml", 1, pki, flags) as cluster,
    ):
        etcd.wait_ready(pki.etcdctl_flags())
        cluster.wait_ready()
        ours = f"https://{cluster.nodes[0].client_addr}"
        for user, args in TLS_SEQUENCE:
            tls = pki.etcdctl_flags() + ([f"--user={user}"] if user else [])
            theirs_r = etcdctl(etcd.endpoint, *args, flags=tls)
            ours_r = etcdctl(ours, *args, flags=tls)
            what = f"etcdctl --user={user} {' '.join(args)}"
            assert (ours_r.returncode, ours_r.stdout) == (theirs_r.returncode, theirs_r.stdout), (
                f"{what}: ours exit {ours_r.returncode} {ours_r.stdout!r} {ours_r.stderr}\n"
                f"etcd exit {theirs_r.returncode} {theirs_r.stdout!r} {theirs_r.stderr}"
            )
            assert normalised(ours_r.stderr) == normalised(theirs_r.stderr), (
                f"{what}: errors differ\nours: {ours_r.stderr}\netcd: {theirs_r.stderr}"
            )


def metaledger(cluster_endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``metaledger`` command (this tree) against one endpoint."""
    argv = [sys.executable, "-m", "nameserver.cli", "--endpoints", cluster_endpoint, *args]
    env = {k: v for k, v in os.environ.items() if k != "METALEDGER_USER"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def test_metaledgers_client_and_commands_authenticate_and_renew_a_lost_token(
    tmp_path: Path,
) -> None:
    with running_cluster(tmp_path, 1, extra_args=["--bcrypt-cost=4"]) as cluster:
        ep = cluster.endpoints[0]
        for args in (
            ["user", "add", "root:rootpw"],
            ["user", "add", "alice:alicepw"],
            ["role", "add", "app"],
            ["role", "grant-permission", "app", "readwrite", "app/", "--prefix=true"],
            ["user", "grant-role", "alice", "app"],
            ["auth", "enable"],
        ):
            assert etcdctl(ep, *args).returncode == 0, args

        ok = metaledger(ep, "put", "app/x", "1", "--user", "alice:alicepw")
        assert ok.returncode == 0, ok.stderr
        got = metaledger(ep, "get", "app/x", "--user", "alice", "--password", "alicepw")
        assert got.returncode == 0 and "1" in got.stdout, got.stderr
        denied = metaledger(ep, "put", "other", "1", "--user", "alice:alicepw")
        assert denied.returncode != 0
        assert "permission_denied: etcdserver: permission denied" in denied.stderr
        anonymous = metaledger(ep, "get", "app/x")
        assert anonymous.returncode != 0 and "user name is empty" in anonymous.stderr
        wrong = metaledger(ep, "get", "app/x", "--user", "alice:nope")
        assert wrong.returncode != 0 and "authentication failed" in wrong.stderr

        with Client([ep], user="alice", password="alicepw", timeout_s=20) as client:
            client.put(b"app/y", b"2")
            cluster.restart(0)  # simple tokens live in the node's memory: this one is gone
            cluster.wait_ready()
            client.put(b"app/y", b"3")  # UNAUTHENTICATED once, then authenticated again
            assert client.get(b"app/y").kvs[0].value == b"3"
