"""A full disk is a state, not a death (issue 14, "Transient errors are transient").

One real node with its Raft log (``raft/``) or its change log (``log/``) on a small tmpfs,
each path in turn: puts until the disk is full, then the
node refuses writes with etcd's error (RESOURCE_EXHAUSTED "mvcc: database space
exceeded"), ``/health`` and ``etcdctl alarm list`` say NOSPACE, reads keep working; space
is freed and the node commits again without a restart, with every acknowledged write
there, a handful of log lines and no traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest

from protos.etcdserverpb import rpc_pb2
from tests.faults.inject import small_tmpfs
from tests.harness import Cluster, grpc_code, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.faults,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]

TMPFS_BYTES = 8 * 1024 * 1024
#: what the puts may use once the filler file is in: a few dozen puts fill it
HEADROOM_BYTES = 1536 * 1024
VALUE = b"v" * 16 * 1024


def health(c: Cluster) -> tuple[int, dict[str, str]]:
    url = f"http://127.0.0.1:{c.nodes[0].metrics_port}/health"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def metric(c: Cluster, sample: str) -> float:
    """The value of ``sample`` (name and labels as rendered) in node 0's metrics."""
    url = f"http://127.0.0.1:{c.nodes[0].metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            name, _, value = line.rpartition(" ")
            if name == sample:
                return float(value)
    raise AssertionError(f"no {sample} in the metrics")


def etcdctl(c: Cluster, *args: str) -> str:
    done = subprocess.run(
        ["etcdctl", f"--endpoints={c.endpoints[0]}", "--command-timeout=10s", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "ETCDCTL_API": "3"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def put(c: Cluster, key: bytes, timeout: float = 3.0) -> grpc.StatusCode | None:
    """None if acknowledged, else the error's code (RESOURCE_EXHAUSTED: refused)."""
    try:
        c.stub(0).Put(rpc_pb2.PutRequest(key=key, value=VALUE), timeout=timeout)
    except grpc.RpcError as exc:
        code = grpc_code(exc)
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            assert "etcdserver: mvcc: database space exceeded" in str(exc.details())
        return code
    return None


@pytest.mark.parametrize(
    ("subdir", "source"),
    [("raft", "Raft log"), ("log", "change log")],
    ids=["raft-log", "change-log"],
)
def test_full_disk_refuses_writes_then_recovers_without_restart(
    tmp_path: Path, subdir: str, source: str
) -> None:
    c = Cluster(tmp_path, n=1, start=False)
    data = c.data_dir(0) / subdir
    with small_tmpfs(data, TMPFS_BYTES):
        try:
            c.start(0)
            c.wait_ready()
            acknowledged = [f"before/{i}".encode() for i in range(5)]
            for key in acknowledged:
                assert put(c, key) is None
            assert health(c) == (200, {"health": "true", "reason": ""})

            st = os.statvfs(data)
            filler = data / "filler"
            filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - HEADROOM_BYTES))
            log_lines_before = len(c.log_text(0).splitlines())

            refused = False
            for i in range(400):  # 1.5 MiB / 16 KiB values (WAL + change log): ~50 puts
                key = f"fill/{i}".encode()
                code = put(c, key)
                if code is None:
                    acknowledged.append(key)
                elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    refused = True
                    break
                # else: the put that met the full disk times out (it waits in the WAL)
            assert refused, "the node never refused a write on a full disk\n" + c.log_tail(0)

            status, body = health(c)
            assert status == 503 and f"NOSPACE (ENOSPC) on the {source}" in body["reason"], body
            assert metric(c, 'metaledger_alarm_nospace{node="n0"}') == 1
            assert metric(c, 'metaledger_degraded{cause="nospace",node="n0"}') == 1
            alarms = etcdctl(c, "alarm", "list")
            assert "alarm:NOSPACE" in alarms and "memberID:" in alarms, alarms
            # reads keep working (serializable: from this node's image)
            got = c.stub(0).Range(
                rpc_pb2.RangeRequest(key=b"before/0", serializable=True), timeout=5
            )
            assert got.kvs and got.kvs[0].value == VALUE

            freed = time.monotonic()
            filler.unlink()
            wait_until(lambda: health(c)[0] == 200, 30, lambda: f"/health: {health(c)}")
            left_nospace_s = time.monotonic() - freed
            print(f"\nleft NOSPACE {left_nospace_s:.2f}s after space returned")
            wait_until(
                lambda: put(c, b"after/0") is None,
                30,
                lambda: "the node commits again\n" + c.log_tail(0),
            )
            acknowledged.append(b"after/0")
            assert etcdctl(c, "alarm", "list").strip() == ""
            assert metric(c, 'metaledger_alarm_nospace{node="n0"}') == 0
            assert metric(c, 'metaledger_degraded{cause="nospace",node="n0"}') == 0

            for key in acknowledged:  # linearizable reads of every acknowledged write
                got = c.stub(0).Range(rpc_pb2.RangeRequest(key=key), timeout=10)
                assert got.kvs and got.kvs[0].value == VALUE, key

            episode = c.log_text(0).splitlines()[log_lines_before:]
            text = "\n".join(episode)
            assert "Traceback" not in text, text
            assert len(episode) < 20, text
            print(f"{len(episode)} log lines for the whole episode:\n{text}")
        finally:
            c.close()
