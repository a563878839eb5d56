"""A byte flipped in a message body in the running master's commit log (a quorum-write
group of three replicas): the broker must not hand the damaged message to a consumer (its
body CRC no longer matches), nor replicate it.

The broker checks each record it reads for a pull or for replication (broker.store.verify):
the pull is answered SYSTEM_ERROR naming the file and byte, and the replica exits (70)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from broker.store.segments import list_segments
from nameserver.client import Client
from rmq.message import MalformedMessage
from tests.cluster.broker.failover_procs import Replica
from tests.cluster.broker.failover_support import Producer, pull_all, setup_group, until
from tests.faults.inject import flip_byte
from tests.harness import running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.faults, pytest.mark.slow]

GROUP = "flip-group"


async def _scenario(reps: list[Replica], endpoints: list[str]) -> list[bytes]:
    client = Client(endpoints, timeout_s=5.0)
    producer = Producer(client, GROUP)
    try:
        await setup_group(reps, client, GROUP)
        producer.start(reps[0].addr)
        await until(lambda: len(producer.acked) >= 200, 60, "200 acknowledged sends")
        await producer.halt()
        acked = {body for body, _, _ in producer.acked}
        (_, path), *_ = list_segments(str(reps[0].data_dir / "store" / "commitlog"))
        data = Path(path).read_bytes()
        at = data.index(b"m0000050|") + 100  # inside the body, past the unique prefix
        flip_byte(Path(path), at)
        try:
            got = await pull_all(reps[0].addr)
        except MalformedMessage as exc:  # our decoder checks the body CRC; not every client does
            return [f"a record the client refused: {exc}".encode()]
        except AssertionError as exc:  # the broker refused the pull: SYSTEM_ERROR, no bytes
            assert "damaged store" in str(exc) and "body CRC" in str(exc), exc
            assert path in str(exc), exc
            return []
        return [b for b in got if b not in acked]
    finally:
        await producer.halt()
        await producer.close()
        client.close()


def test_a_flipped_body_in_the_running_masters_commit_log_is_not_served(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        node = stack.enter_context(running_cluster(tmp_path / "ml", n=1))
        reps = [Replica(tmp_path, node.endpoints, GROUP, i) for i in range(3)]
        for r in reps:
            stack.callback(r.stop)
        damaged = asyncio.run(asyncio.wait_for(_scenario(reps, node.endpoints), 100))
        assert not damaged, f"the master served {len(damaged)} damaged bodies: {damaged[0][:20]!r}"
        proc = reps[0].proc
        assert proc is not None
        assert proc.wait(30) == 70, reps[0].log_tail()  # the damaged replica leaves
        log = reps[0].log_path.read_text()
        assert "commit log damaged" in log and "00000000000000000000: byte " in log, log[-2000:]
