"""Watch through the real etcdctl (etcd 3.4 client) against a 3-node cluster (DESIGN.md §5):
live prefix watches, replay from a past revision, prev_kv, the DELETE events of keys whose
lease was revoked, and etcd's compacted error for a revision below the change log."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.test_snapshots import SnapshotCluster
from tests.harness import Cluster, wait_until
from tests.integration.test_etcdctl import etcdctl

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]


class EtcdctlWatch:
    """A running ``etcdctl watch``: its stdout lines arrive on a queue (read by a thread)."""

    def __init__(self, c: Cluster, *args: str, node: int = 0) -> None:
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ETCDCTL_")}
        env["ETCDCTL_API"] = "3"
        for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            env.pop(proxy, None)
        self.proc = subprocess.Popen(
            ["etcdctl", f"--endpoints={c.endpoints[node]}", "--dial-timeout=5s", "watch", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def read(self, n: int, timeout: float = 20.0) -> list[str]:
        """The next ``n`` stdout lines (fails after ``timeout`` with what arrived)."""
        got: list[str] = []
        deadline = time.monotonic() + timeout
        while len(got) < n:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"after {timeout}s only {got}") from None
            if line is None:
                raise AssertionError(f"etcdctl watch ended after {got}: {self.stop()}")
            got.append(line)
        return got

    def stop(self) -> str:
        """Stop it; returns its stderr."""
        if self.proc.poll() is None:
            self.proc.kill()
        _, err = self.proc.communicate(timeout=10)
        return err


@pytest.fixture
def watches() -> Iterator[list[EtcdctlWatch]]:
    started: list[EtcdctlWatch] = []
    yield started
    for w in started:
        w.stop()


def revision(c: Cluster, node: int = 0) -> int:
    out = json.loads(etcdctl(c, "get", "nothing-here", "-w", "json", node=node).stdout)
    return int(out["header"]["revision"])


def test_watch_prefix_sees_puts_and_deletes_as_they_happen(
    module_cluster: Cluster, watches: list[EtcdctlWatch]
) -> None:
    c = module_cluster
    rev = revision(c, node=1)
    # from the next revision on: no race between the watch starting and the first put
    w = EtcdctlWatch(c, "--prefix", "--rev", str(rev + 1), "wp/", node=1)
    watches.append(w)
    etcdctl(c, "put", "wp/a", "1", node=0)
    etcdctl(c, "put", "other", "x", node=2)  # not under the prefix
    etcdctl(c, "put", "wp/b", "2", node=2)
    etcdctl(c, "del", "wp/a", node=0)
    assert w.read(9) == ["PUT", "wp/a", "1", "PUT", "wp/b", "2", "DELETE", "wp/a", ""]


def test_watch_from_a_past_revision_replays_then_follows(
    module_cluster: Cluster, watches: list[EtcdctlWatch]
) -> None:
    c = module_cluster
    first = json.loads(etcdctl(c, "put", "wr/a", "1", "-w", "json").stdout)["header"]["revision"]
    etcdctl(c, "put", "wr/b", "2", node=1)
    etcdctl(c, "put", "wr/a", "3", node=2)
    for node in range(c.n):  # every node replays the same history from its own segments
        w = EtcdctlWatch(c, "--prefix", "--rev", str(first), "wr/", node=node)
        watches.append(w)
        assert w.read(9) == ["PUT", "wr/a", "1", "PUT", "wr/b", "2", "PUT", "wr/a", "3"]
    etcdctl(c, "put", "wr/c", "4")
    for w in watches:
        assert w.read(3) == ["PUT", "wr/c", "4"]


def test_watch_prev_kv_on_replayed_and_live_events(
    module_cluster: Cluster, watches: list[EtcdctlWatch]
) -> None:
    c = module_cluster
    etcdctl(c, "put", "wk", "v1")
    second = json.loads(etcdctl(c, "put", "wk", "v2", "-w", "json").stdout)["header"]["revision"]
    w = EtcdctlWatch(c, "--prev-kv", "--rev", str(second), "wk", node=2)
    watches.append(w)
    # etcdctl prints the previous key-value before the new one
    assert w.read(5) == ["PUT", "wk", "v1", "wk", "v2"]
    etcdctl(c, "del", "wk", node=1)
    assert w.read(5) == ["DELETE", "wk", "v2", "wk", ""]


def test_keys_of_a_revoked_lease_vanish_as_delete_events(
    module_cluster: Cluster, watches: list[EtcdctlWatch]
) -> None:
    c = module_cluster
    out = etcdctl(c, "lease", "grant", "60").stdout
    lease = out.split()[1]
    etcdctl(c, "put", f"--lease={lease}", "wl/a", "1")
    etcdctl(c, "put", f"--lease={lease}", "wl/b", "2")
    rev = revision(c)
    w = EtcdctlWatch(c, "--prefix", "--rev", str(rev + 1), "wl/", node=1)
    watches.append(w)
    etcdctl(c, "lease", "revoke", lease, node=2)
    assert w.read(6) == ["DELETE", "wl/a", "", "DELETE", "wl/b", ""]


def test_bad_watch_range_is_refused_with_etcds_error(module_cluster: Cluster) -> None:
    # etcdctl watch KEY RANGE_END with RANGE_END before KEY: the server cancels the watch
    result = subprocess.run(
        ["etcdctl", f"--endpoints={module_cluster.endpoints[0]}", "watch", "b", "a"],
        capture_output=True,
        text=True,
        env={**os.environ, "ETCDCTL_API": "3"},
        timeout=20,
    )
    assert result.returncode != 0
    assert "mvcc: watcher range is empty" in result.stderr, result.stderr


@pytest.fixture
def compacting_cluster(tmp_path: Path) -> Iterator[SnapshotCluster]:
    """Nodes that snapshot every 20 items, keep one snapshot and roll 4 KiB segments: the
    change log's head is deleted after a few hundred writes."""
    c = SnapshotCluster(
        tmp_path / "cluster",
        3,
        ["--snapshot-every-items", "20", "--snapshot-keep", "1", "--segment-max-bytes", "4096"],
    )
    try:
        c.wait_ready(30)
        c.wait_announced(30)
        yield c
    finally:
        c.close()


def first_segment_offset(c: Cluster, node: int) -> int:
    segs = sorted(int(p.stem) for p in (c.data_dir(node) / "log").glob("*.seg"))
    return segs[0] if segs else 0


def test_compacted_revision_gives_etcds_compacted_error(
    compacting_cluster: SnapshotCluster,
) -> None:
    c = compacting_cluster
    for i in range(300):
        c.put_retrying(i % 3, b"wc/%03d" % i, b"v" * 100)
    wait_until(lambda: first_segment_offset(c, 0) > 10, timeout=30, message="segments deleted")
    result = subprocess.run(
        ["etcdctl", f"--endpoints={c.endpoints[0]}", "watch", "--rev", "2", "wc/000"],
        capture_output=True,
        text=True,
        env={**os.environ, "ETCDCTL_API": "3"},
        timeout=20,
    )
    assert result.returncode != 0
    assert "required revision has been compacted" in result.stderr, result.stderr


def test_metaledger_watch_cli_prints_like_etcdctl(module_cluster: Cluster) -> None:
    c = module_cluster
    first = json.loads(etcdctl(c, "put", "wcli/a", "1", "-w", "json").stdout)["header"]["revision"]
    etcdctl(c, "put", "wcli/a", "2", node=1)
    etcdctl(c, "del", "wcli/a", node=2)
    cmd = [sys.executable, "-m", "nameserver.cli", "--endpoints", ",".join(c.endpoints)]
    cwd = Path(__file__).resolve().parents[2]
    table = subprocess.run(
        [*cmd, "watch", "wcli/", "--prefix", "--rev", str(first), "--prev-kv", "--max-events", "3"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
    )
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines() == [
        "PUT",
        "wcli/a",
        "1",
        "PUT",
        "wcli/a",
        "1",
        "wcli/a",
        "2",
        "DELETE",
        "wcli/a",
        "2",
        "wcli/a",
        "",
    ]
    js = subprocess.run(
        [*cmd, "-w", "json", "watch", "wcli/a", "--rev", str(first), "--max-events", "2"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
    )
    assert js.returncode == 0, js.stderr
    docs = [json.loads(line) for line in js.stdout.splitlines()]
    assert [(d["type"], d["revision"], d["kv"]["value"]) for d in docs] == [
        ("PUT", first, "1"),
        ("PUT", first + 1, "2"),
    ]
    bad = subprocess.run(
        [*cmd, "watch", "b", "a"], capture_output=True, text=True, timeout=30, cwd=cwd
    )
    assert bad.returncode == 6 and "mvcc: watcher range is empty" in bad.stderr, bad.stderr
