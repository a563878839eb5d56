"""``etcdctl lock`` and ``etcdctl elect`` (etcd's client-side recipes: KV txns, Lease and, when
they have to wait, Watch) against a 3-node metaledger, and their exclusion with metaledger's own
Lock and Election services, which run the same recipes server-side on the same keys.

etcdctl waits for a key's deletion with the Watch service (from a past revision): those tests
exercise metaledger's Watch too.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nameserver.client import Client, DeadlineExceeded
from tests.harness import Cluster, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]


@contextmanager
def etcdctl_background(c: Cluster, *args: str, node: int = 0) -> Iterator[subprocess.Popen[str]]:
    """``etcdctl args`` as a running process (SIGINT, then SIGKILL, when the block ends)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ETCDCTL_")}
    env["ETCDCTL_API"] = "3"
    cmd = ["etcdctl", f"--endpoints={c.endpoints[node]}", "--dial-timeout=5s", *args]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def holding_command(workdir: Path, tag: str) -> list[str]:
    """A command that records when it ran (and the lock env etcdctl gave it), then holds
    until the test creates ``<tag>.release``."""
    script = (
        f'echo "start $(date +%s.%N) $ETCD_LOCK_KEY" >> "{workdir}/{tag}.log"; '
        f'while [ ! -f "{workdir}/{tag}.release" ]; do sleep 0.05; done; '
        f'echo "end $(date +%s.%N)" >> "{workdir}/{tag}.log"'
    )
    return ["--", "sh", "-c", script]


def interval(log: Path) -> tuple[float, float, str]:
    lines = log.read_text().split("\n")
    start, key = lines[0].split(" ", 2)[1:]
    return float(start), float(lines[1].split()[1]), key


def keys_under(client: Client, prefix: str) -> list[bytes]:
    return [kv.key for kv in client.get(prefix, prefix=True).kvs]


def test_etcdctl_lock_excludes_the_lock_service(module_cluster: Cluster, tmp_path: Path) -> None:
    c = module_cluster
    name = "ctl-lock/a"
    with (
        Client(c.endpoints, timeout_s=10) as client,
        etcdctl_background(c, "lock", name, *holding_command(tmp_path, "one"), node=1) as proc,
    ):
        log = tmp_path / "one.log"
        wait_until(log.exists, 20, "etcdctl lock runs its command")
        [key] = keys_under(client, name + "/")
        assert log.read_text().split()[2] == key.decode()  # ETCD_LOCK_KEY is the owner key
        with pytest.raises(DeadlineExceeded):  # the Lock service waits behind etcdctl
            with client.lock(name, ttl_s=5, timeout_s=2):
                pass
        (tmp_path / "one.release").touch()
        assert proc.wait(20) == 0, proc.stderr.read() if proc.stderr else ""
        assert keys_under(client, name + "/") == []  # etcdctl unlocked
        with client.lock(name, ttl_s=5, timeout_s=10) as held:
            assert held.key.startswith(name.encode() + b"/")


def test_two_etcdctl_locks_are_serialized(module_cluster: Cluster, tmp_path: Path) -> None:
    c = module_cluster
    name = "ctl-lock/b"
    with (
        etcdctl_background(c, "lock", name, *holding_command(tmp_path, "one"), node=0) as p1,
        etcdctl_background(c, "lock", name, *holding_command(tmp_path, "two"), node=2) as p2,
    ):
        logs = {tag: tmp_path / f"{tag}.log" for tag in ("one", "two")}
        first = wait_until(
            lambda: [t for t, log in logs.items() if log.exists()], 20, "one etcdctl holds"
        )
        assert len(first) == 1
        second = "two" if first == ["one"] else "one"
        assert p1.poll() is None and p2.poll() is None
        assert not logs[second].exists()  # waiting while the first holds
        (tmp_path / f"{first[0]}.release").touch()
        wait_until(logs[second].exists, 20, "the second etcdctl gets the lock")
        (tmp_path / f"{second}.release").touch()
        assert p1.wait(20) == 0 and p2.wait(20) == 0
    (_, end1, key1), (start2, _, key2) = interval(logs[first[0]]), interval(logs[second])
    assert end1 <= start2, "the lock was held twice at once"
    assert key1 != key2


def test_etcdctl_elect_and_the_election_service(module_cluster: Cluster) -> None:
    c = module_cluster
    name = "ctl-elect/a"
    with (
        Client(c.endpoints, timeout_s=10) as client,
        etcdctl_background(c, "elect", name, "proposal-1", node=1) as proc,
    ):
        assert proc.stdout is not None
        key = proc.stdout.readline().strip()
        assert re.fullmatch(rf"{name}/[0-9a-f]+", key), key
        assert proc.stdout.readline().strip() == "proposal-1"
        election = client.election(name)
        leader = election.leader()
        assert leader is not None and (leader.key.decode(), leader.value) == (key, b"proposal-1")

        observed = election.observe(timeout_s=30)
        assert next(observed).value == b"proposal-1"
        contender = client.election(name)
        with pytest.raises(DeadlineExceeded):  # a campaign waits behind etcdctl's leadership
            contender.campaign("proposal-2", ttl_s=5, timeout_s=2)
        proc.send_signal(signal.SIGINT)  # etcdctl resigns
        assert proc.wait(20) == 0
        contender.campaign("proposal-2", ttl_s=5, timeout_s=20)
        assert next(observed).value == b"proposal-2"
        observed.close()
        contender.resign()


def test_etcdctl_elect_listen_observes_leaders(module_cluster: Cluster) -> None:
    c = module_cluster
    name = "ctl-elect/b"
    with (
        Client(c.endpoints, timeout_s=10) as client,
        etcdctl_background(c, "elect", "-l", name, node=2) as listener,
    ):
        election = client.election(name)
        leader = election.campaign("first", ttl_s=5, timeout_s=10)
        assert listener.stdout is not None
        assert listener.stdout.readline().strip() == leader.key.decode()
        assert listener.stdout.readline().strip() == "first"
        election.proclaim("second")
        assert listener.stdout.readline().strip() == leader.key.decode()
        assert listener.stdout.readline().strip() == "second"
        election.resign()
