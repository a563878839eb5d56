"""``metaledger cluster up --nodes 1 --brokers 3``: a quorum-write broker group beside the node.

The group comes up at the contract's ports (replica j: remoting B+100+10j, HA +1, metrics
+3) with a 2-of-3 policy and every replica in the in-sync set; ``metaledger send`` and
``consume`` go through it; the master's process is killed (-9) and metaledger elects another
replica, which answers sends; ``cluster restart`` brings the old master back as a slave;
Ctrl-C stops every process the command started, the restarted replica included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from nameserver.cli import cluster as cluster_cmd
from nameserver.cli import cluster_brokers
from nameserver.client import Client
from tests.harness import free_ports, wait_until
from tests.integration.broker.conftest import cli_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _free_base_port() -> int:
    for _ in range(50):
        base = free_ports(1)[0] // 10 * 10
        if base + 130 > 65535:
            continue
        nodes = cluster_cmd.layout(1, base)
        brokers = cluster_brokers.broker_layout(3, base)
        if not cluster_cmd.busy_ports(nodes) and not cluster_brokers.busy_ports(brokers):
            return base
    raise AssertionError("no free ports for a node and a 3-replica group")


class Up:
    def __init__(self, data: Path, base: int) -> None:
        self.data = data
        self.node = cluster_cmd.layout(1, base)[0]
        self.brokers = cluster_brokers.broker_layout(3, base)
        self.env = cli_env(data.parent)
        self.env["METALEDGER_ENDPOINTS"] = self.node.client_endpoint
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "nameserver.cli", "cluster", "up", "--nodes", "1"),
                *("--brokers", "3", "--data-dir", str(data), "--base-port", str(base)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        self.restarted: list[int] = []
        self.banner = b""
        for line in self.proc.stdout:  # ends if cluster up exits (its startup timeout)
            self.banner += line
            if b"cluster up:" in line:
                break

    def ml(self, *argv: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "nameserver.cli", *argv],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=self.env,
            timeout=90,
        )

    def pids(self) -> list[int]:
        out = []
        for name in ("n0", *(b.id for b in self.brokers)):
            path = self.data / f"{name}.pid"
            if path.exists():
                out.append(int(path.read_text()))
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    cluster = Up(tmp_path / "data", _free_base_port())
    started = cluster.pids()
    try:
        yield cluster
    finally:
        cluster.stop()
        for pid in (
            started + cluster.restarted
        ):  # every process it started is gone (a killed one already was)
            wait_until(lambda pid=pid: not _alive(pid), 30, f"pid {pid} still running")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:1]
    except OSError:
        return False
    return state != ["Z"]


def test_a_quorum_group_comes_up_serves_and_survives_its_master(up: Up) -> None:
    addrs = ",".join(b.address for b in up.brokers)
    assert f"broker group broker-a: {addrs}".encode() in up.banner, up.banner
    with Client([up.node.client_endpoint], timeout_s=5.0) as client:
        g = client.replica_group("broker-a")
        assert g.policy.total_replicas == 3 and g.policy.in_sync_replicas == 2
        assert sorted(r.address for r in g.replicas) == sorted(b.address for b in up.brokers)
        wait_until(
            lambda: len(client.replica_group("broker-a").sync_state_set) == 3,
            30,
            "every replica in the in-sync set",
        )
        r = up.ml("route", "topic", "create", "Orders", "--broker", "broker-a")
        assert r.returncode == 0, r.stderr
        r = up.ml("send", "Orders", "first")
        assert r.returncode == 0 and r.stdout.startswith(b"SEND_OK"), r.stdout + r.stderr
        r = up.ml("consume", "Orders", "--group", "g", "--count", "1", "--wait", "20")
        assert r.returncode == 0 and b"first" in r.stdout, r.stdout + r.stderr

        master = next(b for b in up.brokers if b.address == g.master_address)
        with urllib.request.urlopen(f"http://127.0.0.1:{master.metrics_port}/metrics") as m:
            text = m.read().decode()
        assert 'metaledger_broker_role{group="broker-a",role="MASTER"} 1.0' in text

        os.kill(int((up.data / f"{master.id}.pid").read_text()), signal.SIGKILL)
        new = wait_until(
            lambda: (
                (x := client.replica_group("broker-a")).master_address != g.master_address
                and x.master_id
                and x
            ),
            40,
            "a new master elected",
        )
        assert new.master_epoch > g.master_epoch
        r = wait_until(
            lambda: (x := up.ml("send", "Orders", "second")).returncode == 0 and x,
            40,
            "a send through the new master",
        )
        assert r.stdout.startswith(b"SEND_OK"), r.stdout

        r = up.ml("cluster", "restart", master.id, "--data-dir", str(up.data))
        assert r.returncode == 0, r.stdout + r.stderr
        assert b"slave of broker-a" in r.stdout, r.stdout
        up.restarted.append(int((up.data / f"{master.id}.pid").read_text()))
        wait_until(
            lambda: len(client.replica_group("broker-a").sync_state_set) == 3,
            40,
            "the old master back in the in-sync set",
        )
