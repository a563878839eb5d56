"""One active replicator per job, against a real metaledger node: the election's lease and
token fence the checkpoint commits; a worker whose lease expired (its keeper stopped, as a
paused process's would be) can neither pass ``check()`` nor commit, and the standby that
takes over resumes from the last committed checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nameserver.client import Client, FailedPrecondition, LeaseLost, NotFound
from replicator.lease import ActiveRole, Fence
from replicator.redis.checkpoint import Checkpoint, CheckpointStore
from replicator.status import StatusPublisher, read_statuses
from tests.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster

R = "f" * 40


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    with Cluster(tmp_path / "node", n=1) as c:
        c.wait_ready(30)
        with Client(c.endpoints, timeout_s=10) as cl:
            yield cl


def test_standby_takes_over_and_the_old_active_is_fenced(client: Client) -> None:
    a = ActiveRole(client, "redis", "job1", "worker-a", ttl_s=2)
    b = ActiveRole(client, "redis", "job1", "worker-b", ttl_s=2)
    fa = a.acquire(timeout_s=10)
    a.check()
    assert b.active_worker() == "worker-a"
    store_a = CheckpointStore(client, "job1")
    assert store_a.load() is None
    store_a.commit(Checkpoint(R, 100, db=2), fa.lease_id, fa.token)

    got: list[Fence] = []
    t = threading.Thread(target=lambda: got.append(b.acquire(timeout_s=30)), daemon=True)
    t.start()
    t.join(0.5)
    assert t.is_alive(), "the standby must wait while the active holds the lease"

    # the active is "paused": its keeper stops renewing (nothing revokes the lease)
    keeper = a._election.keeper
    assert keeper is not None
    keeper.stop()
    wait_until(lambda: not t.is_alive(), 20, "the standby became active")
    fb = got[0]
    assert b.active_worker() == "worker-b"

    with pytest.raises(LeaseLost):
        a.check()  # its local deadline passed: it must not send
    with pytest.raises((NotFound, FailedPrecondition)):
        store_a.commit(Checkpoint(R, 200, db=2), fa.lease_id, fa.token)

    # only the active worker's status is written
    pub = StatusPublisher(client, "redis", "job1")
    assert not pub.publish(fa, {"replid": R})
    assert pub.publish(fb, {"replid": R, "acked": 100})
    (doc,) = read_statuses(client, "redis")
    assert doc["job"] == "job1" and doc["acked"] == 100 and doc["kind"] == "redis"

    # ... and what `metaledger replicate status` prints
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nameserver.cli",
            "replicate",
            "status",
            "--endpoints",
            ",".join(client.endpoints),
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert [(d["job"], d["acked"]) for d in json.loads(out)] == [("job1", 100)]
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "nameserver.cli",
            "replicate",
            "status",
            "--endpoints",
            ",".join(client.endpoints),
            "--job",
            "nope",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 4 and "no running job 'nope'" in missing.stderr

    store_b = CheckpointStore(client, "job1")
    assert store_b.load() == Checkpoint(R, 100, db=2)
    store_b.commit(Checkpoint(R, 150, db=2), fb.lease_id, fb.token)
    assert CheckpointStore(client, "job1").load() == Checkpoint(R, 150, db=2)
    b.release()
    assert b.active_worker() is None
    assert read_statuses(client) == []  # gone with the lease
