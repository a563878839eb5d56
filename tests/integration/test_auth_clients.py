"""metaledger's own programs as clients of a cluster with auth or TLS on (docs/auth.md
"Brokers and replicators", docs/tls.md).

A real ``metaledger broker`` given ``--user`` with a role that covers exactly the keys
docs/auth.md lists registers, becomes its group's master and serves a send; the same broker
without credentials is refused (the refusal in its log, the process still running and
retrying, not a silent crash loop). A Redis replicator commits its offsets under auth as a
user whose role covers its job's offsets, election and status keys. Under TLS a broker given
``--cacert --cert --key`` registers with a TLS-only node.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from nameserver.client import Client, NotFound, QueueData, SessionCredentials, remoting_tls
from replicator.rocketmq.client import ClusterClient
from replicator.rocketmq.errors import RocketMQError
from tests.etcd_harness import etcdctl
from tests.harness import Cluster, free_ports, running_cluster, wait_until
from tests.integration.broker.conftest import BrokerProcess, cli_env, metaledger
from tests.tls_harness import Pki, TlsCluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]

ROOT = ("root", "rootpw")
GROUP = "broker-a"
TOPIC = "AuthTopic"

#: what a broker of group broker-a needs (docs/auth.md "Brokers and replicators")
BROKER_GRANTS = [
    ("readwrite", f"/_metaledger/broker/{GROUP}"),
    ("readwrite", f"/_metaledger/replica_group/{GROUP}"),
    ("readwrite", f"/brokers/{GROUP}/", "--prefix=true"),
    ("read", "/_metaledger/topic/", "--prefix=true"),
]


def job_grants(job: str) -> list[tuple[str, ...]]:
    """What a Redis replicator of ``job`` needs (docs/auth.md)."""
    return [
        ("readwrite", f"/_metaledger/offset/{job}/", "--prefix=true"),
        ("readwrite", f"replicators/redis/{job}/", "--prefix=true"),  # the election
        ("readwrite", f"/replicators/redis/{job}/", "--prefix=true"),  # the status
        ("read", "/_metaledger/topic/", "--prefix=true"),  # the sink's routes
    ]


def set_up_auth(
    endpoint: str,
    role: str,
    grants: Sequence[tuple[str, ...]],
    user: str,
    flags: Sequence[str] = (),
) -> None:
    """root, a role with ``grants``, ``user`` (password ``pw``) holding it; auth enabled."""
    steps: list[list[str]] = [
        ["user", "add", f"{ROOT[0]}:{ROOT[1]}"],
        ["user", "grant-role", "root", "root"],
        ["role", "add", role],
    ]
    steps += [["role", "grant-permission", role, *g] for g in grants]
    steps += [["user", "add", f"{user}:pw"], ["user", "grant-role", user, role]]
    steps += [["auth", "enable"]]
    for args in steps:
        r = etcdctl(endpoint, *args, flags=flags)
        assert r.returncode == 0, f"etcdctl {args}: {r.stderr}"


@pytest.fixture
def auth_node(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(tmp_path / "node", 1, extra_args=["--bcrypt-cost=4"]) as cluster:
        set_up_auth(cluster.endpoints[0], "broker-a", BROKER_GRANTS, "broker-a")
        yield cluster


def is_master(client: Client) -> bool:
    try:
        group = client.replica_group(GROUP)
    except NotFound:
        return False
    return group.master_id > 0


def test_a_broker_with_credentials_registers_becomes_master_and_serves(
    tmp_path: Path, auth_node: Cluster
) -> None:
    ep = auth_node.endpoints[0]
    broker = BrokerProcess(tmp_path, [ep], GROUP, "--user", "broker-a", "--password", "pw")
    try:
        with Client([ep], user=ROOT[0], password=ROOT[1], timeout_s=10) as root:
            wait_until(lambda: root.route_cluster_info().brokers, 30, "registration")
            wait_until(lambda: is_master(root), 30, "a master")
            root.route_topic_create(TOPIC, [QueueData(GROUP, 2, 2, 6)])
        r = metaledger(tmp_path, "send", TOPIC, "hello", "--endpoints", ep, "--user", "root:rootpw")
        assert r.returncode == 0, r.stderr.decode() + broker.log_tail()
        assert r.stdout.decode().startswith("SEND_OK")
        assert "permission denied" not in broker.log_tail(400)
    finally:
        assert broker.stop() in (0, None)


@pytest.mark.parametrize(
    ("flags", "why"),
    [([], "user name is empty"), (["--user", "broker-a:wrong"], "authentication failed")],
)
def test_a_broker_without_valid_credentials_is_refused_and_says_so(
    tmp_path: Path, auth_node: Cluster, flags: list[str], why: str
) -> None:
    ep = auth_node.endpoints[0]
    broker = BrokerProcess(tmp_path, [ep], GROUP, *flags, start=False)
    try:
        broker.start()
        wait_until(lambda: why in broker.log_tail(400), 30, f"{why!r} in the broker's log")
        refused = "ERROR broker: metaledger refused this broker"
        wait_until(lambda: refused in broker.log_tail(400), 30, "one ERROR line that says why")
        assert broker.proc is not None and broker.proc.poll() is None  # still running, retrying
        with Client([ep], user=ROOT[0], password=ROOT[1], timeout_s=10) as root:
            assert not root.route_cluster_info().brokers
            assert not is_master(root)
    finally:
        assert broker.stop() in (0, None)


def test_a_broker_registers_with_a_tls_only_node(tmp_path: Path) -> None:
    pki = Pki.make(tmp_path / "pki", nodes=1)
    node = TlsCluster(tmp_path / "node", 1, pki, pki.serve_flags("n0"))
    try:
        node.wait_ready(30)
        ep = node.endpoints[0]
        files = pki.client_files()
        tls = ["--cacert", files["cacert"], "--cert", files["cert"], "--key", files["key"]]
        broker = BrokerProcess(tmp_path, [ep], GROUP, *tls)
        try:
            with Client([ep], timeout_s=10, **files) as client:
                wait_until(lambda: client.route_cluster_info().brokers, 30, "registration")
                wait_until(lambda: is_master(client), 30, "a master")
        finally:
            assert broker.stop() in (0, None)
    finally:
        node.close()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
def test_a_redis_replicator_commits_its_offsets_under_auth(tmp_path: Path) -> None:
    job = "job1"
    with running_cluster(tmp_path / "node", 1, extra_args=["--bcrypt-cost=4"]) as cluster:
        ep = cluster.endpoints[0]
        set_up_auth(ep, "replicator-job1", job_grants(job), "repl")
        redis_port = free_ports(1)[0]
        redis = subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(tmp_path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        log = tmp_path / "replicator.log"
        worker: subprocess.Popen[bytes] | None = None
        try:
            with log.open("ab") as out:
                worker = subprocess.Popen(
                    [sys.executable, "-m", "nameserver.cli", "replicate", "redis",
                     "--source", f"redis://127.0.0.1:{redis_port}", "--topic", "T",
                     "--job", job, "--sink", "file", "--sink-file", str(tmp_path / "out.jsonl"),
                     "--endpoints", ep, "--user", "repl:pw"],
                    env=cli_env(tmp_path), stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
            with Client([ep], user=ROOT[0], password=ROOT[1], timeout_s=10) as root:

                def committed() -> bool:
                    subprocess.run(
                        ["redis-cli", "-p", str(redis_port), "set", "k", "v"],
                        capture_output=True, timeout=10, check=False,
                    )  # fmt: skip
                    try:
                        return bool(root.offsets_fetch(job, "redis").offset)
                    except NotFound:
                        return False

                wait_until(committed, 60, lambda: "a committed offset:\n" + log.read_text())
            assert "permission denied" not in log.read_text()
        finally:
            for proc in (worker, redis):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(20)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(10)


def test_cluster_up_tls_with_a_broker(tmp_path: Path) -> None:
    """``cluster up --tls --brokers 1``: the replica gets the cluster's client certificate
    (``--cacert --cert --key``) and its group has a master."""
    from nameserver.cli import certs, cluster_brokers
    from nameserver.cli import cluster as cluster_cmd

    for _ in range(50):
        base = free_ports(1)[0] // 10 * 10
        node, brokers = cluster_cmd.layout(1, base), cluster_brokers.broker_layout(1, base)
        if base + 110 < 65535 and not cluster_cmd.busy_ports(node) + (
            cluster_brokers.busy_ports(brokers)
        ):
            break
    data = tmp_path / "up"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nameserver.cli", "cluster", "up", "--tls", "--nodes", "1",
         "--brokers", "1", "--data-dir", str(data), "--base-port", str(base)],
        env=cli_env(tmp_path), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        out = b""
        for line in proc.stdout:  # ends if cluster up exits
            out += line
            if b"cluster up: 1 nodes" in line:
                break
        assert b"cluster up: 1 nodes" in out, out.decode()
        assert proc.poll() is None
        files = certs.client_files(str(data / certs.TLS_DIR))
        with Client([node[0].client_endpoint], timeout_s=10, **files) as client:
            assert client.replica_group("broker-a").master_id > 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def test_the_rocketmq_replicators_nameserver_client_signs_writes_and_speaks_tls(
    tmp_path: Path,
) -> None:
    """The RocketMQ replicator's remoting client of a destination nameserver that is a
    metaledger node with TLS and auth on: with ``--dest-namesrv-tls`` and
    ``--access-key/--secret-key`` its PUT_KV_CONFIG (a topic's order config) is served;
    unsigned it is refused NO_PERMISSION; route reads work over TLS either way."""
    pki = Pki.make(tmp_path / "pki", nodes=1)
    node = TlsCluster(tmp_path / "node", 1, pki, [*pki.serve_flags("n0"), "--bcrypt-cost=4"])
    try:
        node.wait_ready(30)
        files = pki.client_files()
        grants = [("readwrite", "/_metaledger/kvconfig/ORDER_TOPIC_CONFIG/", "--prefix=true")]
        flags = pki.etcdctl_flags()
        set_up_auth(f"https://{node.endpoints[0]}", "replicator", grants, "repl", flags)
        with Client(node.endpoints, timeout_s=10, user=ROOT[0], password=ROOT[1], **files) as root:
            root.user_set_secret_key("repl", "repl-secret")
        namesrv = f"127.0.0.1:{node.nodes[0].remoting_port}"
        tls = remoting_tls(files)

        async def order_conf(credentials: SessionCredentials | None) -> str:
            async with ClusterClient(namesrv, credentials=credentials, namesrv_tls=tls) as c:
                try:
                    await c.set_order_conf("T", "broker-a:4")
                except RocketMQError as exc:
                    return str(exc)
                return "OK"

        assert "No accessKey is configured" in asyncio.run(order_conf(None))
        wrong = SessionCredentials("repl", "not-the-secret")
        assert "Check signature failed" in asyncio.run(order_conf(wrong))
        assert asyncio.run(order_conf(SessionCredentials("repl", "repl-secret"))) == "OK"
        with Client(node.endpoints, timeout_s=10, user=ROOT[0], password=ROOT[1], **files) as root:
            assert root.kvconfig_get("ORDER_TOPIC_CONFIG", "T") == "broker-a:4"
        with pytest.raises(NotFound):  # the blocking route read, over TLS too
            ClusterClient(namesrv, namesrv_tls=tls).route_get("NoSuchTopic")
    finally:
        node.close()
