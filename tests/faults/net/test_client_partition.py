"""The client library across a partition (tests/faults/net/): a program's connection to
the node it talks to goes silent (every packet from the clients to that node dropped) and
its puts must go on through another node within seconds.

Without keepalive the black-holed connection gives no error: each put on it ran into its
deadline (DEADLINE_EXCEEDED does not fail over) and the next put took the same connection,
for as long as TCP kept retransmitting (minutes). With HTTP/2 keepalive pings on open
calls (nameserver/client/transport.py; the server allows them every 4 s) the connection
is closed once a ping goes unanswered, the calls fail UNAVAILABLE, and the transport fails
over."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.faults.net.netns import Net, unavailable_reason
from tests.faults.net.run import NetCluster, _env, stop_all

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]

#: keepalive 6 s + ping timeout 3 s + a failover, on 2 busy cores
FAILOVER_S = 15.0


def test_puts_fail_over_from_a_silent_node_within_seconds(tmp_path: Path) -> None:
    rows: list[list[float]] = []
    client: list[subprocess.Popen[bytes] | None] = []
    with Net(3) as net:
        cluster = NetCluster(net, tmp_path)
        try:
            for i in range(3):
                cluster.start(i)
            cluster.leader(60)
            cmd = [
                *net.exec_prefix(net.bridge_ns),
                sys.executable,
                "-m",
                "tests.faults.net.client",
                "failover",
                *cluster.endpoints,  # the client starts with n0
            ]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=_env(), start_new_session=True)
            client.append(proc)
            assert proc.stdout is not None
            out = proc.stdout

            def read() -> None:
                for line in out:
                    rows.append(json.loads(line))

            threading.Thread(target=read, daemon=True).start()
            deadline = time.monotonic() + 60
            while sum(1 for r in rows if r[2]) < 20:
                assert time.monotonic() < deadline, f"the client's puts did not go: {rows[-5:]}"
                time.sleep(0.05)
            net.cut_client(0)
            cut = time.monotonic()
            while not any(r[2] and r[0] > cut + 0.5 for r in rows):
                if time.monotonic() > cut + 60:
                    break
                time.sleep(0.05)
        finally:
            stop_all(client)
            cluster.close()
    first = min((r[1] for r in rows if r[2] and r[0] > cut + 0.5), default=None)
    assert first is not None, "no put went through after the client's node went silent"
    assert first - cut <= FAILOVER_S, f"the puts resumed {first - cut:.1f} s after the cut"
