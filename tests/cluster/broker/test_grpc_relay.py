"""RocketMQ 5 clients on a slave reach the master's Telemetry (broker/grpc/forward.py's
Relay): three real replicas (SYNC_MASTER, in-sync 2), the master's gRPC front the
highest-sorted address, so the 5.x Python client (given only the lowest, a slave) opens its
Telemetry streams on slaves only (``RpcEndpoints.facade`` sorts the addresses and gRPC's
pick_first connects to the first). Through the slave: the producers' checker is asked by the
master and its COMMIT makes the message visible once; the producers' heartbeats (forwarded,
with the settings the master got from the relayed stream) are OK. Then
the master is killed: a half prepared before the kill, left open by the checker until then,
is checked by the new master through the re-attached stream and committed once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client
from tests.cluster.broker.failover_procs import Replica
from tests.cluster.broker.failover_support import TOPIC, pull_all, setup_group, until
from tests.harness import free_ports, running_cluster
from tests.integration.broker.test_transactions import FAST_CHECKS

CLIENT = str(Path(__file__).with_name("relay_client.py"))
#: apache.rocketmq.v2.Code.OK
OK = 20000


def lines(path: Path) -> dict[str, Any]:
    text = path.read_text() if path.exists() else ""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if line.startswith("{") and line.endswith("}"):
            out.update(json.loads(line))
    return out


async def scenario(root: Path, endpoints: list[str], rocketmq5_python: Path) -> None:
    call = asyncio.to_thread
    group = "relay-grpc"
    # the master (replica 0) gets the highest-sorted front, the client the lowest
    ports = sorted(free_ports(3), key=lambda p: f"127.0.0.1:{p}", reverse=True)
    flags = [*FAST_CHECKS, "--transaction-check-max", "200"]
    reps = [
        Replica(root, endpoints, group, i, "--listen-grpc", f"127.0.0.1:{ports[i]}", *flags)
        for i in range(3)
    ]
    client = Client(endpoints, timeout_s=5.0)
    out, go = root / "client.jsonl", root / "go"
    proc: subprocess.Popen[bytes] | None = None
    try:
        await setup_group(reps, client, group)
        master = reps[0]
        assert (await call(client.replica_group, group)).master_address == master.addr
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["HOME"] = str(root)  # the client logs under $HOME/logs
        with open(out, "wb") as sink, open(root / "client.log", "wb") as log:
            proc = subprocess.Popen(
                [str(rocketmq5_python), CLIENT, f"127.0.0.1:{ports[2]}", TOPIC, str(go)],
                stdout=sink, stderr=log, env=env, cwd=root, start_new_session=True,
            )  # fmt: skip

        def client_said(key: str) -> Any:
            if proc is not None and proc.poll() not in (None, 0):
                raise AssertionError((root / "client.log").read_text()[-3000:])
            return lines(out).get(key)

        sent = await until(lambda: client_said("sent"), 60, "the client's sends")
        checked = await until(lambda: client_said("heartbeats"), 90, "the check and heartbeats")
        said = lines(out)
        assert said["checked"] == [sent["checked"]], said
        assert checked and set(checked) == {OK}, checked  # every heartbeat, through the slave

        bodies = await pull_all(master.addr)
        assert [bodies.count(b) for b in (b"plain", b"checked", b"after-kill")] == [1, 1, 0]

        assert master.proc is not None
        os.kill(master.proc.pid, signal.SIGKILL)
        master.proc.wait(10)
        new = await until(
            lambda: (
                (a := client.replica_group(group).master_address) not in ("", master.addr) and a
            ),
            60,
            "a new master",
        )
        go.touch()  # the checker commits "after-kill" from now on: only a new master's check
        after = await until(lambda: client_said("after_kill"), 120, "the check after the kill")
        assert after, "after-kill was never committed by a check"
        assert await call(proc.wait, 60) == 0, (root / "client.log").read_text()[-3000:]

        async def committed() -> list[bytes]:
            got = await pull_all(new)
            return got if b"after-kill" in got else []

        bodies = await until(committed, 30, "after-kill committed on the new master")
        await asyncio.sleep(1.5)  # and nothing twice
        bodies = await pull_all(new)
        assert [bodies.count(b) for b in (b"plain", b"checked", b"after-kill")] == [1, 1, 1]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for r in reps:
            r.stop()
        client.close()


@pytest.mark.cluster
def test_a_5x_client_on_a_slave_is_checked_by_the_master_before_and_after_a_kill(
    tmp_path: Path, rocketmq5_python: Path
) -> None:
    started = time.monotonic()
    with running_cluster(tmp_path / "ml", n=1) as node:
        asyncio.run(asyncio.wait_for(scenario(tmp_path, node.endpoints, rocketmq5_python), 400))
    print(
        f"5.x client on a slave: checked before and after a master kill, {time.monotonic() - started:.1f} s"
    )
