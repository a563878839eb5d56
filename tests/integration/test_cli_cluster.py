"""``metaledger`` against a real ``cluster up``: status with no ``--endpoints``, every member
reported and a down one named (exit 8), ``cluster restart`` of a killed node that rejoins,
``put`` of 1 MiB from stdin and from a file, ``leader transfer n1``, ``get --rev``'s one-prefix
error, an endpoint without a port; and ``scripts/demo.sh`` then ``metaledger status``.

Every process is started in its own session and stopped by its pid at the end.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nameserver.cli import cluster as cluster_cmd
from nameserver.cli import cluster_brokers, cluster_restart
from nameserver.cli.exitcodes import ExitCode
from tests.harness import REPO_ROOT, free_ports, wait_until

NODES = 3


def _free_base_port() -> int:
    for _ in range(50):
        base = free_ports(1)[0] // 10 * 10
        nodes = cluster_cmd.layout(NODES, base) if base + 10 * NODES < 65536 else []
        if nodes and not cluster_cmd.busy_ports(nodes):
            return base
    raise AssertionError("no free ports for a 3-node cluster")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "METALEDGER_ENDPOINTS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGINT (as Ctrl-C), then SIGKILL of its process group at the deadline."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


class Up:
    """A running ``metaledger cluster up``; :meth:`ml` runs the CLI with METALEDGER_ENDPOINTS
    set to node n0 only (as the default endpoint is for the default ports)."""

    def __init__(self, data: Path, base: int) -> None:
        self.data = data
        self.nodes = cluster_cmd.layout(NODES, base)
        self.env = _env(METALEDGER_ENDPOINTS=self.nodes[0].client_endpoint)
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "nameserver.cli", "cluster", "up"),
                *("--data-dir", str(data), "--base-port", str(base)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        out = b""
        for line in self.proc.stdout:  # ends if cluster up exits (its startup timeout: 60 s)
            out += line
            if b"cluster up:" in line:
                break
        assert b"cluster up: 3 nodes" in out, out

    def ml(self, *argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "nameserver.cli", *argv],
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            env=self.env,
            timeout=90,
        )

    def status(self) -> tuple[int, list[dict[str, object]], str]:
        r = self.ml("status", "-w", "json", "--timeout", "2")
        nodes = json.loads(r.stdout)["nodes"] if r.stdout else []
        return r.returncode, nodes, r.stderr.decode()

    def pid(self, node: str) -> int:
        return int((self.data / f"{node}.pid").read_text())


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    cluster = Up(tmp_path_factory.mktemp("up") / "data", _free_base_port())
    try:
        yield cluster
    finally:
        _stop(cluster.proc)
        for stream in (cluster.proc.stdout, cluster.proc.stderr):
            if stream:
                stream.close()


def test_status_without_endpoints_reports_every_member(up: Up) -> None:
    code, nodes, err = up.status()
    assert code == ExitCode.OK, err
    assert sorted(str(n["id"]) for n in nodes) == ["n0", "n1", "n2"]
    table = up.ml("status")
    assert table.returncode == 0 and len(table.stdout.decode().splitlines()) == 1 + NODES


def test_put_a_mebibyte_from_stdin_and_from_a_file(up: Up, tmp_path: Path) -> None:
    big = os.urandom(1 << 20)
    path = tmp_path / "big"
    path.write_bytes(big)
    r = up.ml("put", "big/stdin", stdin=big)
    assert r.returncode == 0 and r.stdout == b"OK\n", r.stderr
    r = up.ml("put", "big/dash", "-", stdin=big)
    assert r.returncode == 0, r.stderr
    r = up.ml("put", "big/file", "--from-file", str(path))
    assert r.returncode == 0, r.stderr
    for key in ("big/stdin", "big/dash", "big/file"):
        doc = json.loads(up.ml("get", key, "-w", "json").stdout)
        assert base64.b64decode(doc["kvs"][0]["value"]) == big


def test_get_at_a_future_revision_is_refused_with_one_prefix(up: Up) -> None:
    up.ml("put", "rev/k", "1")
    r = up.ml("put", "rev/k", "2")
    assert r.returncode == 0
    r = up.ml("get", "rev/k", "--rev", "999999999")
    err = r.stderr.decode()
    assert r.returncode != 0 and err.count("metaledger:") == 1, err
    assert "future revision" in err


def test_an_endpoint_without_a_port_is_a_usage_error(up: Up) -> None:
    r = up.ml("get", "k", "--endpoints", "127.0.0.1")
    assert r.returncode == ExitCode.USAGE
    assert r.stderr.decode().strip() == (
        "metaledger: --endpoints: endpoint '127.0.0.1' is not HOST:PORT (e.g. 127.0.0.1:9877)"
    )


def test_leader_transfer_takes_the_member_positionally(up: Up) -> None:
    _, nodes, _ = up.status()
    leader = next(str(n["id"]) for n in nodes if n["role"] == "leader")
    target = next(n for n in ("n1", "n2", "n0") if n != leader)
    r = up.ml("leader", "transfer", target)
    assert r.returncode == 0, r.stderr
    assert f"to {target}" in r.stdout.decode()


def test_a_killed_node_is_down_in_status_and_cluster_restart_brings_it_back(up: Up) -> None:
    os.kill(up.pid("n1"), signal.SIGKILL)
    _, nodes, err = wait_until(
        lambda: (s := up.status())[0] == ExitCode.MEMBER_DOWN and s,
        30,
        "status exits 8 while n1 is down",
    )
    assert "member n1 (" in err and "is down" in err, err
    assert {str(n["id"]): n["role"] for n in nodes}["n1"] == "down"
    assert up.ml("put", "while/down", "x").returncode == 0  # the two others go on

    r = up.ml("cluster", "restart", "n1", "--data-dir", str(up.data))
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().startswith("n1 restarted (pid ")
    new_pid = up.pid("n1")
    argv = Path(f"/proc/{new_pid}/cmdline").read_bytes().split(b"\0")
    recorded = json.loads((up.data / "cluster.json").read_text())["nodes"]["n1"]["argv"]
    assert [a.decode() for a in argv[3:] if a] == recorded  # the flags it was started with

    def rejoined() -> bool:
        code, nodes, _ = up.status()
        offsets = {int(str(n["apply_offset"])) for n in nodes}
        return code == ExitCode.OK and len(nodes) == NODES and len(offsets) == 1

    wait_until(rejoined, 30, "n1 rejoins and catches up")
    r = up.ml("get", "while/down", "--serializable", "--endpoints", up.nodes[1].client_endpoint)
    assert r.stdout.decode().splitlines() == ["while/down", "x"]

    # a running node: restart stops it first, then starts it again
    r = up.ml("cluster", "restart", "n1", "--data-dir", str(up.data))
    assert r.returncode == 0, r.stderr
    assert up.pid("n1") != new_pid and not cluster_restart.is_node(new_pid, "n1")


def test_cluster_up_stops_a_restarted_node_on_ctrl_c(tmp_path: Path) -> None:
    cluster = Up(tmp_path / "data", _free_base_port())
    try:
        r = cluster.ml("cluster", "restart", "n2", "--data-dir", str(cluster.data))
        assert r.returncode == 0, r.stderr
        restarted = cluster.pid("n2")
    finally:
        _stop(cluster.proc)
        for stream in (cluster.proc.stdout, cluster.proc.stderr):
            if stream:
                stream.close()
    assert cluster.proc.returncode == ExitCode.OK
    wait_until(lambda: not cluster_restart.is_node(restarted, "n2"), 15, "the restarted n2 stops")


def _default_ports_free() -> bool:
    nodes, brokers = cluster_cmd.layout(NODES), cluster_brokers.broker_layout(3, 9877)
    return not cluster_cmd.busy_ports(nodes) and not cluster_brokers.busy_ports(brokers)


@pytest.mark.skipif(not _default_ports_free(), reason="the default ports 9877.. are in use")
def test_demo_then_status_with_no_flags(tmp_path: Path) -> None:
    """``bash scripts/demo.sh`` then ``metaledger status``: no --endpoints, no env; the demo's
    real RocketMQ client sent and received its message through the broker group."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # the demo's `pip install -e .` is not run here: the tree under test is on PYTHONPATH
    (bin_dir / "python3").write_text(
        f'#!/bin/sh\n[ "$1" = -m ] && [ "$2" = pip ] && exit 0\nexec {sys.executable} "$@"\n'
    )
    (bin_dir / "metaledger").write_text(
        f'#!/bin/sh\nexec {sys.executable} -m nameserver.cli "$@"\n'
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = _env(METALEDGER_DATA=str(tmp_path / "data"))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    demo = subprocess.Popen(
        ["bash", str(REPO_ROOT / "scripts" / "demo.sh")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        assert demo.stdout is not None
        out = b""
        deadline = time.monotonic() + 150
        for line in demo.stdout:
            out += line
            if b"etcdctl works too" in line or time.monotonic() > deadline:
                break  # the demo's last line (cluster up's banner also says "Ctrl-C to stop")
        assert b"Ctrl-C to stop" in out.split(b"etcdctl works too")[-1], out
        assert b"--endpoints" not in out.split(b"(etcdctl")[0], out
        assert b"sent: status=OK" in out and b"received: 'hello from a RocketMQ client'" in out
        r = subprocess.run(
            [str(bin_dir / "metaledger"), "status"],
            capture_output=True,
            env={k: v for k, v in env.items() if k != "METALEDGER_ENDPOINTS"},
            timeout=30,
        )
        assert r.returncode == 0, r.stderr
        assert len(r.stdout.decode().splitlines()) == 1 + NODES
    finally:
        _stop_group(demo)  # Ctrl-C in the demo's terminal: the demo and its cluster
        if demo.stdout:
            demo.stdout.close()


def _stop_group(leader: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGINT to every process of ``leader``'s group, then SIGKILL if any is left at the
    deadline; returns once the group is empty (the leader reaped)."""
    deadline = time.monotonic() + timeout
    signum: int = signal.SIGINT
    while True:
        leader.poll()  # reap it: a zombie still counts as a member of the group
        try:
            os.killpg(leader.pid, signum)
        except ProcessLookupError:
            return
        if time.monotonic() >= deadline + 10:
            raise AssertionError(f"process group {leader.pid} does not go away")
        signum = signal.SIGKILL if time.monotonic() >= deadline else 0
        time.sleep(0.2)
