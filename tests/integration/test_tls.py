"""TLS on one node, side by side with a real etcd 3.4 on the same certificates (issue 20, item
3): the same ``etcdctl --cacert --cert --key`` commands get the same output and exit codes; a
client without a certificate is refused by both under ``--client-cert-auth``; the remoting
and metrics ports serve TLS and refuse a client without a valid certificate; garbage and
cut-short handshakes on every TLS port (client, remoting, metrics, peer) close that
connection only: the node keeps serving, and logs no traceback and nothing at ERROR.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from nameserver.client import Client, Unavailable
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from tests.etcd_harness import EtcdServer, etcdctl
from tests.harness import NodeSpec
from tests.remoting_client import call
from tests.tls_harness import Pki, TlsCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"), nodes=1)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsCluster]:
    """One metaledger node with TLS and client-cert-auth on every port, the peer port too."""
    cluster = TlsCluster(tmp_path_factory.mktemp("ml"), 1, pki, pki.serve_flags("n0", peer=True))
    with cluster:
        cluster.wait_ready()
        yield cluster


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[EtcdServer]:
    with EtcdServer(
        tmp_path_factory.mktemp("etcd"), extra=pki.etcd_flags(), scheme="https"
    ) as server:
        server.wait_ready(pki.etcdctl_flags())
        yield server


def _spec(node: TlsCluster) -> NodeSpec:
    return node.nodes[0]


def _both(node: TlsCluster, etcd: EtcdServer) -> dict[str, str]:
    return {"etcd": etcd.endpoint, "metaledger": f"https://{_spec(node).client_addr}"}


def _no_errors_logged(node: TlsCluster) -> None:
    text = node.log_text(0)
    assert "Traceback" not in text, node.log_tail(0)
    assert " ERROR [" not in text, node.log_tail(0)


def test_etcdctl_put_get_del_over_tls_as_etcd(node: TlsCluster, etcd: EtcdServer, pki: Pki) -> None:
    flags = pki.etcdctl_flags()
    for args in (
        ("put", "tls/a", "1"),
        ("put", "tls/b", "2"),
        ("get", "tls/a"),
        ("get", "tls/", "--prefix", "--keys-only"),
        ("del", "tls/b"),
        ("get", "tls/b"),
    ):
        got = {name: etcdctl(ep, *args, flags=flags) for name, ep in _both(node, etcd).items()}
        assert got["metaledger"].returncode == got["etcd"].returncode == 0, got
        assert got["metaledger"].stdout == got["etcd"].stdout, (args, got)


@pytest.mark.parametrize(
    "case",
    ["no client certificate", "certificate of another CA", "plain text"],
)
def test_a_client_without_a_valid_certificate_is_refused_by_both(
    node: TlsCluster, etcd: EtcdServer, pki: Pki, case: str
) -> None:
    if case == "no client certificate":
        flags = [f"--cacert={pki.ca()}"]
    elif case == "certificate of another CA":
        flags = pki.etcdctl_flags("intruder", which="other")
    else:
        flags = []
    got = {}
    for name, ep in _both(node, etcd).items():
        if case == "plain text":
            ep = ep.replace("https://", "http://")
        got[name] = etcdctl(ep, "get", "tls/a", flags=flags, command_timeout_s=1)
    assert got["metaledger"].returncode == got["etcd"].returncode == 1, got
    for result in got.values():
        assert result.stdout == ""
        assert result.stderr.splitlines()[-1] == "Error: context deadline exceeded", got


def test_client_library_and_cli_flags(node: TlsCluster, pki: Pki) -> None:
    endpoint = _spec(node).client_addr
    with Client([endpoint], timeout_s=5.0, **pki.client_files()) as client:
        client.put(b"tls/lib", b"x")
        assert [kv.value for kv in client.get(b"tls/lib").kvs] == [b"x"]
    with Client([endpoint], timeout_s=1.0, cacert=Path(pki.ca()).read_bytes()) as bare:
        with pytest.raises(Unavailable):
            bare.get(b"tls/lib")
    cli = [sys.executable, "-m", "nameserver.cli", "--endpoints", endpoint, "--timeout", "2"]
    files = pki.client_files()
    tls = ["--cacert", files["cacert"], "--cert", files["cert"], "--key", files["key"]]
    ok = subprocess.run([*cli, *tls, "get", "tls/lib"], capture_output=True, text=True)
    assert (ok.returncode, ok.stdout) == (0, "tls/lib\nx\n"), ok
    put = subprocess.run([*cli, "put", "tls/cli", "y", *tls], capture_output=True, text=True)
    assert put.returncode == 0, put
    bare_cli = subprocess.run([*cli, "--cacert", files["cacert"], "get", "tls/lib"],
                              capture_output=True, text=True)  # fmt: skip
    assert bare_cli.returncode != 0 and "unavailable" in bare_cli.stderr, bare_cli


def _route_request() -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)


def test_remoting_over_tls(node: TlsCluster, pki: Pki) -> None:
    address = f"127.0.0.1:{_spec(node).remoting_port}"
    reply = call(address, _route_request(), timeout=10.0, ssl_context=pki.ssl_context())
    assert reply.code == ResponseCode.SUCCESS
    for refused in (pki.ssl_context(None), pki.ssl_context("intruder", which="other")):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            call(address, _route_request(), timeout=10.0, ssl_context=refused)
    with pytest.raises((ConnectionError, TimeoutError, OSError)):
        call(address, _route_request(), timeout=3.0)  # plain text: no answer, closed


def _get(url: str, ctx: ssl.SSLContext | None) -> tuple[int, str]:
    with urllib.request.urlopen(url, context=ctx, timeout=10) as resp:
        return resp.status, resp.read().decode()


def test_metrics_over_tls(node: TlsCluster, pki: Pki) -> None:
    url = f"https://127.0.0.1:{_spec(node).metrics_port}"
    status, body = _get(url + "/metrics", pki.ssl_context())
    assert status == 200 and "metaledger_term" in body
    assert _get(url + "/health", pki.ssl_context()) == (200, '{"health":"true","reason":""}\n')
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        _get(url + "/health", pki.ssl_context(None))
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        _get(url.replace("https://", "http://") + "/health", None)


#: The start of a TLS 1.2 ClientHello record, cut short.
CUT_HELLO = bytes.fromhex("16030100a5010000a10303") + b"\x00" * 10


def _abuse(port: int) -> None:
    """Garbage, a handshake cut short, a bare connect, and a full handshake that stops."""
    for payload in (
        b"GET / HTTP/1.1\r\n\r\n" * 4,
        CUT_HELLO,
        b"\x16\x03\x01\xff\xff" + b"\x00" * 64,
        b"",
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            if payload:
                sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(2)
            try:
                while sock.recv(4096):
                    pass
            except (TimeoutError, ConnectionError):
                pass


def test_garbage_and_cut_handshakes_on_every_tls_port_leave_the_node_serving(
    node: TlsCluster, pki: Pki
) -> None:
    spec = _spec(node)
    for port in (spec.client_port, spec.remoting_port, spec.metrics_port, spec.peer_port):
        _abuse(port)
    # a TLS client of another CA on the peer port: refused, the node goes on
    with pytest.raises((ssl.SSLError, ConnectionError)):
        with socket.create_connection(("127.0.0.1", spec.peer_port), timeout=5) as raw:
            ctx = pki.ssl_context("intruder", which="other")
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"\x00\x00\x00\x04junk")
                if not tls.recv(1):
                    raise ConnectionError("closed")
    ep = f"https://{spec.client_addr}"
    assert etcdctl(ep, "put", "tls/after", "ok", flags=pki.etcdctl_flags()).returncode == 0
    assert etcdctl(ep, "get", "tls/after", flags=pki.etcdctl_flags()).stdout == "tls/after\nok\n"
    reply = call(f"127.0.0.1:{spec.remoting_port}", _route_request(), ssl_context=pki.ssl_context())
    assert reply.code == ResponseCode.SUCCESS
    assert _get(f"https://127.0.0.1:{spec.metrics_port}/health", pki.ssl_context())[0] == 200
    assert node.is_running(0)
    _no_errors_logged(node)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--cert-file", "{ca}/n0.pem", "--key-file", "{ca}/client-key.pem"], "--key-file"),
        (["--cert-file", "/nonexistent.pem", "--key-file", "{ca}/n0-key.pem"], "--cert-file"),
        (
            [
                "--peer-cert-file",
                "{ca}/n0.pem",
                "--peer-key-file",
                "{ca}/n0-key.pem",
                "--consensus",
                "pysyncobj",
            ],
            "--peer-cert-file",
        ),
    ],
)
def test_serve_refuses_unusable_tls_files_naming_the_flag(
    tmp_path: Path, pki: Pki, flags: list[str], named: str
) -> None:
    ca = str(Path(pki.ca()).parent)
    argv = [sys.executable, "-m", "nameserver.cli", "serve", "--id", "n0"]
    argv += ["--data-dir", str(tmp_path / "d"), "--cluster-password", "pw"]
    out = subprocess.run(
        [*argv, *(f.format(ca=ca) for f in flags)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2, out  # ExitCode.USAGE, as every configuration error
    assert out.stderr.count("\n") == 1 and named in out.stderr, out.stderr
    assert not (tmp_path / "d").exists()


def _curl(url: str, body: str, pki: Pki, name: str | None = "client") -> tuple[int, str]:
    """``curl --cacert [--cert --key] -X POST url -d body``: (exit code, stdout)."""
    flags = ["--cacert", pki.ca()]
    if name is not None:
        flags += ["--cert", pki.cert(name), "--key", pki.key(name)]
    done = subprocess.run(
        ["curl", "-s", "-X", "POST", *flags, url, "-d", body],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.returncode, done.stdout


def test_the_json_gateway_over_tls_answers_as_etcd_does(
    node: TlsCluster, pki: Pki, etcd: EtcdServer
) -> None:
    """etcd serves its gateway on its TLS client port, metaledger on its TLS HTTP port: the
    same ``curl`` with the client's certificate puts and reads the same, and without a
    certificate both refuse the handshake (client-cert-auth)."""
    ours = f"https://127.0.0.1:{_spec(node).metrics_port}"
    answers = []
    for base in (etcd.endpoint, ours):
        put = _curl(base + "/v3/kv/put", '{"key": "Z3ctdGxz", "value": "YmFy"}', pki)
        got = _curl(base + "/v3/kv/range", '{"key": "Z3ctdGxz"}', pki)
        refused = _curl(base + "/v3/kv/range", '{"key": "Z3ctdGxz"}', pki, name=None)
        assert put[0] == 0 and got[0] == 0 and refused[0] != 0, (base, put, got, refused)
        kv = json.loads(got[1])["kvs"][0]
        answers.append(
            (sorted(json.loads(put[1])["header"]), kv["key"], kv["value"], kv["version"])
        )
    assert answers[1] == answers[0]
