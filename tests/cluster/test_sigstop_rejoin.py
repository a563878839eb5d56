"""A leader frozen (SIGSTOP) until its peers gave up on it, then thawed: it steps down and
rejoins within a second or two, without closing the connections its peers kept sending
on while it was stopped (real processes, issue 14).

The peer idle timeout is short here (1.5 s) so that the freeze outlasts it, as a 30 s
freeze outlasts the default: the others close the frozen node's connections (right: it
sent nothing), and the thawed node must not do the same to theirs, whose frames waited
unread in its socket buffers (its first sweep after the stall used to run before those
frames were read, and closed every inbound connection as "sent no frame in time")."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Cluster, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.faults]

IDLE_MS = 1500
CLOSED = "closed a Raft peer connection that sent no frame in time"


class ShortIdleCluster(Cluster):
    def command(self, i: int) -> list[str]:
        cmd = super().command(i)
        assert "serve" in cmd, "this test needs the CLI launcher (serve flags)"
        return [*cmd, "--peer-idle-timeout-ms", str(IDLE_MS)]


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = ShortIdleCluster(tmp_path / "cluster", 3)
    failed = True
    try:
        c.wait_ready(30)
        yield c
        failed = any(
            getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
            for when in ("setup", "call")
        )
    finally:
        c.close(failed=failed)


def test_a_leader_thawed_after_its_peers_gave_up_on_it_rejoins_at_once(cluster: Cluster) -> None:
    old = cluster.leader()
    others = [i for i in range(cluster.n) if i != old]
    acked = {b"before": b"0"}
    cluster.put(old, b"before", b"0")
    cluster.kill(old, signal.SIGSTOP)
    try:
        new = cluster.wait_ready(30, nodes=others)
        for k in range(20):
            key = b"during/%02d" % k
            cluster.put_retrying(new, key, b"v", timeout=10)
            acked[key] = b"v"
        wait_until(  # frozen past the idle timeout: both others closed its connections
            lambda: all(CLOSED in cluster.log_text(i) for i in others),
            30,
            "the others did not close the frozen node's connections",
        )
        mark = len(cluster.log_text(old))
    finally:
        cluster.kill(old, signal.SIGCONT)
    thawed = time.monotonic()
    cluster.put_retrying(old, b"after", b"1", timeout=10)  # forwarded to the new leader
    acked[b"after"] = b"1"
    assert cluster.wait_ready(10) == new
    took = time.monotonic() - thawed
    assert took < 5.0, f"the thawed node took {took:.1f} s to rejoin"
    cluster.wait_converged(timeout=20)
    got = cluster.range_all(old, serializable=True)
    assert {k: got[k][0] for k in acked if k in got} == acked
    after = cluster.log_text(old)[mark:]
    assert CLOSED not in after, f"the thawed node closed its peers' connections:\n{after}"


def test_a_leader_whose_followers_freeze_steps_down_and_names_their_silence(
    cluster: Cluster,
) -> None:
    """Check quorum (§6.2) in a real process, and the line it leaves: which members went
    silent, and for how long (the campaign's unexplained stalls left no line at all)."""
    leader = cluster.leader()
    others = [i for i in range(cluster.n) if i != leader]
    mark = len(cluster.log_text(leader))
    for i in others:
        cluster.kill(i, signal.SIGSTOP)
    try:
        line = wait_until(
            lambda: next(
                (
                    ln
                    for ln in cluster.log_text(leader)[mark:].splitlines()
                    if "stepped down: a majority did not answer within 2.0 s" in ln
                ),
                None,
            ),
            30,
            "the leader did not say it stepped down",
        )
    finally:
        for i in others:
            cluster.kill(i, signal.SIGCONT)
    for i in others:
        said = re.search(rf"{cluster.nodes[i].id} answered (\d+\.\d) s ago", line)
        assert said and float(said.group(1)) >= 2.0, line
    cluster.wait_ready(30)
