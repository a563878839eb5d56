"""Three real nodes, each behind its Go gRPC front (``--grpc-front go``): followers forward
writes to the leader through its front, and when the leader stops (its front with it),
nameserver.client's puts go on against the two left."""

from __future__ import annotations

from pathlib import Path

import pytest

from nameserver.client import Client
from tests.go_front import GO_FRONT, front_binary, front_pids, is_front
from tests.harness import running_cluster, wait_until

__all__ = ["front_binary"]  # the fixture, used by name

pytestmark = pytest.mark.cluster


def test_puts_go_on_when_the_leader_stops(tmp_path: Path, front_binary: Path) -> None:
    with running_cluster(tmp_path / "cluster", n=3, timeout=60, extra_args=GO_FRONT) as c:
        c.wait_announced(30)
        fronts = {i: front_pids(c, i)[-1] for i in range(3)}
        assert all(is_front(pid) for pid in fronts.values())
        leader = c.leader()
        with Client(c.endpoints, timeout_s=20) as client:
            for k in range(20):
                client.put(b"go/before/%02d" % k, b"v")
            c.stop(leader)
            wait_until(
                lambda: not is_front(fronts[leader]), timeout=5, message="the leader's front gone"
            )
            for k in range(20):  # the client fails over; the survivors elect a leader
                client.put(b"go/after/%02d" % k, b"v")
            got = client.get(b"go/", prefix=True).kvs
        assert len(got) == 40
        survivors = [i for i in range(3) if i != leader]
        new_leader = c.wait_ready(30, nodes=survivors)
        assert new_leader in survivors
        for i in survivors:  # every survivor's front answers; each applied all 40 puts
            with Client([c.endpoints[i]], timeout_s=10) as one:

                def applied(one: Client = one) -> bool:
                    return one.get(b"go/", prefix=True, serializable=True).count == 40

                wait_until(applied, timeout=10, message=f"node {i} applied all 40 puts")
