"""Locks with fencing across real processes (3 server nodes plus a lock holder of its own).

The holder takes a lock with a short TTL and keeps its lease alive; it is frozen (SIGSTOP) past
the TTL, the leader expires its lease, which deletes its lock key; a second client takes the
lock; the holder is thawed (SIGCONT) and its write guarded by its old fencing token (a txn
comparing its lock key's create revision with the token) is rejected, and so is its replicator
offset commit fenced by the same lease and token, while the new holder's guarded write and
commit went through. The keeper of a lease fails over when the node it talks to dies.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client, DeadlineExceeded, Op
from nameserver.client.locks import acquire
from tests.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster

WORKTREE = Path(__file__).resolve().parents[2]
TTL_S = 2


class Holder:
    """The lock holder process (tests/cluster/lock_holder.py) and its JSON lines."""

    def __init__(self, endpoints: list[str], name: str, ttl_s: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(WORKTREE)}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.cluster.lock_holder",
                ",".join(endpoints),
                name,
                str(ttl_s),
            ],
            cwd=WORKTREE,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def next(self, timeout: float) -> dict[str, Any]:
        try:
            return dict(json.loads(self.lines.get(timeout=timeout)))
        except queue.Empty:
            raise AssertionError(f"the holder said nothing within {timeout}s") from None

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def lock_keys(client: Client, name: str) -> list[bytes]:
    return [kv.key for kv in client.get(name + "/", prefix=True).kvs]


def test_a_frozen_holder_loses_the_lock_and_its_fenced_write_is_rejected(cluster: Cluster) -> None:
    name, resource = "fencing/lock", "fencing/resource"
    holder = Holder(cluster.endpoints[:2], name, TTL_S)
    try:
        first = holder.next(30)
        with Client(cluster.endpoints[1:], timeout_s=10) as client:
            assert lock_keys(client, name) == [first["key"].encode()]
            assert client.get(first["key"]).kvs[0].create_revision == first["token"]
            holder.send("commit fencing-job p0 10")
            assert holder.next(30) == {"committed": True, "error": ""}

            # while the holder lives, a waiter that gives up withdraws its key
            waiter = client.lease_grant(30)
            with pytest.raises(DeadlineExceeded):
                acquire(client, name, waiter.id, timeout_s=3 * TTL_S)
            wait_until(
                lambda: lock_keys(client, name) == [first["key"].encode()],
                10,
                "the abandoned waiter key is deleted",
            )
            client.lease_revoke(waiter.id)

            os.kill(holder.proc.pid, signal.SIGSTOP)
            frozen = time.monotonic()
            with client.lock(name, ttl_s=10, timeout_s=30) as second:
                waited = time.monotonic() - frozen
                assert waited >= TTL_S - 0.5, f"the lock moved {waited:.1f}s after the freeze"
                assert second.token > first["token"]
                ok = client.txn([second.is_owner()], success=[Op.put(resource, "second")])
                assert ok.succeeded
                client.offsets_commit(
                    "fencing-job",
                    "p0",
                    b"20",
                    lease_id=second.lease_id,
                    fencing_token=second.token,
                    position=20,
                )

                os.kill(holder.proc.pid, signal.SIGCONT)
                holder.send(f"write {resource} first")
                verdict = holder.next(30)
                assert verdict["succeeded"] is False, verdict
                assert verdict["lost"] is True, verdict  # its keeper told it
                assert client.get(resource).kvs[0].value == b"second"
                holder.send("commit fencing-job p0 30")
                refused = holder.next(30)
                assert refused["committed"] is False, refused
                assert "requested lease not found" in refused["error"], refused
                committed = client.offsets_fetch("fencing-job", "p0")
                assert (committed.offset, committed.position) == (b"20", 20)
                assert committed.fencing_token == second.token
                assert lock_keys(client, name) == [second.key]
            assert lock_keys(client, name) == []
    finally:
        holder.close()
    assert holder.proc.returncode == 0


def test_the_keeper_fails_over_when_its_node_dies(cluster: Cluster) -> None:
    with Client(cluster.endpoints, timeout_s=10) as client:
        lease = client.lease_grant(5)
        lost: list[str] = []
        with client.keep_alive(lease.id, on_lost=lost.append) as keeper:
            streamed_to = cluster.endpoints.index(client.endpoints[client._current])
            renewals = keeper.renewals
            cluster.kill(streamed_to)
            wait_until(
                lambda: keeper.renewals >= renewals + 3, 30, "renewals continue on another node"
            )
            assert not lost and keeper.alive
            assert client.lease_time_to_live(lease.id).exists
        assert not lost
        client.lease_revoke(lease.id)
