"""The delay fault on its own (tests/faults/net/netns.py ``Net.delay``, with the queueing
helper tests/faults/net/nfqdelay.py, since this kernel has no netem): a TCP ping-pong
between two member namespaces takes at least the delay while it holds (both ways: twice
it) and well under it once healed; packets held at the heal go at once; a helper killed
outright leaves no packet behind its rule (``--queue-bypass``). The delay under load, with
the checkers, is one of the faults of test_partitions.py and test_broker_partitions.py.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.net.netns import Net, unavailable_reason
from tests.harness import stop_processes

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.faults,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
    pytest.mark.timeout(120),
]

REPO_ROOT = Path(__file__).resolve().parents[3]
PORT = 7000  # inside the member's namespace: no other process listens there
DELAY_MS, JITTER_MS = 100, 20


def _pingpong(net: Net, member: int, *args: str) -> list[str]:
    """tests/faults/net/pingpong.py with ``args`` in ``member``'s namespace."""
    prefix = net.exec_prefix(net.members[member])
    return [*prefix, sys.executable, "-m", "tests.faults.net.pingpong", *args]


def _ping(net: Net, count: int) -> list[float]:
    cmd = _pingpong(net, 0, "ping", "--to", f"{net.ips[1]}:{PORT}", "--count", str(count))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    rtts: list[float] = json.loads(out.stdout)
    return rtts


def test_delay_holds_round_trips_and_heal_lets_them_go(tmp_path: Path) -> None:
    with Net(2) as net:
        server = subprocess.Popen(
            _pingpong(net, 1, "serve", "--listen", f"{net.ips[1]}:{PORT}", "--max-s", "100"),
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            before = _ping(net, 10)
            net.delay(0, 1, DELAY_MS, JITTER_MS, seed=1)
            delayed = _ping(net, 10)
            net.heal()
            healed = _ping(net, 10)
            assert len(net.delay_reports) == 2 and all(
                r.startswith("held ") and not r.startswith("held 0 ") for r in net.delay_reports
            ), net.delay_reports
            # both directions held DELAY_MS +- JITTER_MS: a round trip at least 2 x 80 ms
            assert min(delayed) >= DELAY_MS, (before, delayed, healed)
            assert statistics.median(healed) < DELAY_MS / 4, (before, delayed, healed)

            # held at the heal: with 2 s each way the connection alone takes 4 s; healed
            # once the pinger is seen held, it is through at once
            net.delay(0, 1, 2000, seed=2)
            start = time.monotonic()
            pinger = subprocess.Popen(
                _pingpong(net, 0, "ping", "--to", f"{net.ips[1]}:{PORT}", "--count", "1"),
                cwd=REPO_ROOT,
                stdout=subprocess.DEVNULL,
            )
            with pytest.raises(subprocess.TimeoutExpired):
                pinger.wait(1.0)  # held (it starts in well under 1 s)
            net.heal()
            assert pinger.wait(30) == 0
            took = time.monotonic() - start
            assert took < 3.0, took
            # n1 held the pinger's SYN (n0 had nothing to hold yet)
            assert not net.delay_reports[-2].startswith("held 0 "), net.delay_reports

            # a helper killed outright: its packets go through unheld (--queue-bypass)
            net.delay(0, 1, 1000, seed=3)
            for pid in net.delay_helpers().values():
                os.kill(pid, signal.SIGKILL)
            killed_deadline = time.monotonic() + 10
            while time.monotonic() < killed_deadline and any(
                os.path.exists(f"/proc/{pid}") and _alive(pid)
                for pid in net.delay_helpers().values()
            ):
                time.sleep(0.05)  # a condition with a deadline: the kill taking effect
            after_kill = _ping(net, 5)
            assert max(after_kill) < 500, after_kill
            net.heal()
        finally:
            stop_processes([server])


def _alive(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
