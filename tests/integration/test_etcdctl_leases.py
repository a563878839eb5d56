"""Leases through the real etcdctl against a 3-node cluster (DESIGN.md §5): grant, attach
a key, time-to-live with keys, keep-alive, revoke; and expiry of a lease nobody keeps
alive, decided by the leader and written to the log."""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest

from tests.harness import Cluster, wait_until
from tests.integration.test_etcdctl import etcdctl

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]


def grant(c: Cluster, ttl_s: int, node: int = 0) -> str:
    out = etcdctl(c, "lease", "grant", str(ttl_s), node=node).stdout
    m = re.fullmatch(rf"lease ([0-9a-f]+) granted with TTL\({ttl_s}s\)\s*", out)
    assert m, out
    return m.group(1)


def test_grant_attach_keepalive_revoke(module_cluster: Cluster) -> None:
    c = module_cluster
    lease = grant(c, 5, node=1)
    assert etcdctl(c, "put", f"--lease={lease}", "lease/k", "v", node=2).stdout.strip() == "OK"

    ttl = etcdctl(c, "lease", "timetolive", lease, "--keys", node=0).stdout
    m = re.fullmatch(
        rf"lease {lease} granted with TTL\(5s\), remaining\((\d+)s\), attached keys\(\[(.*)\]\)\s*",
        ttl,
    )
    assert m, ttl
    assert 0 < int(m.group(1)) <= 5 and m.group(2) == "lease/k"

    got = json.loads(etcdctl(c, "get", "lease/k", "-w", "json").stdout)
    assert got["kvs"][0]["lease"] == int(lease, 16)
    assert lease in etcdctl(c, "lease", "list", node=2).stdout

    alive = etcdctl(c, "lease", "keep-alive", "--once", lease, node=2).stdout
    assert alive.strip() == f"lease {lease} keepalived with TTL(5)", alive

    assert etcdctl(c, "lease", "revoke", lease, node=1).stdout.strip() == f"lease {lease} revoked"
    for node in range(c.n):
        assert etcdctl(c, "get", "lease/k", node=node).stdout == ""
    gone = etcdctl(c, "lease", "timetolive", lease).stdout
    assert "already expired" in gone, gone
    again = etcdctl(c, "lease", "revoke", lease, check=False)
    assert again.returncode != 0 and "requested lease not found" in again.stderr


def test_put_with_an_unknown_lease_is_not_found(module_cluster: Cluster) -> None:
    result = etcdctl(module_cluster, "put", "--lease=1234abcd", "lease/unknown", "v", check=False)
    assert result.returncode != 0
    assert "requested lease not found" in result.stderr, result.stderr


def test_a_lease_not_kept_alive_expires_with_its_key(module_cluster: Cluster) -> None:
    c = module_cluster
    ttl_s = 2
    lease = grant(c, ttl_s)
    granted = time.monotonic()
    etcdctl(c, "put", f"--lease={lease}", "lease/expiring", "v", node=1)
    assert etcdctl(c, "get", "lease/expiring", node=2).stdout != ""

    def gone() -> bool:
        return all(etcdctl(c, "get", "lease/expiring", node=n).stdout == "" for n in range(c.n))

    wait_until(gone, ttl_s + 5, "the key of an expired lease vanishes on every node", 0.2)
    assert time.monotonic() - granted >= ttl_s - 0.5  # not expired early
    assert "already expired" in etcdctl(c, "lease", "timetolive", lease).stdout
    alive = etcdctl(c, "lease", "keep-alive", "--once", lease, check=False)
    assert alive.returncode != 0 or "TTL(0)" in alive.stdout or "expired" in alive.stderr


def test_keep_alive_extends_a_lease_past_its_ttl(module_cluster: Cluster) -> None:
    c = module_cluster
    lease = grant(c, 2)
    etcdctl(c, "put", f"--lease={lease}", "lease/kept", "v")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # through a follower and the leader in turn
        for node in (1, 0):
            out = etcdctl(c, "lease", "keep-alive", "--once", lease, node=node).stdout
            assert "TTL(2)" in out, out
            time.sleep(0.4)
    assert etcdctl(c, "get", "lease/kept", "--print-value-only").stdout.strip() == "v"
    etcdctl(c, "lease", "revoke", lease)
