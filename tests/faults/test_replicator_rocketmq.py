"""The RocketMQ replicator under faults while sends go on: every message the source broker
acknowledged reaches the destination, each queue in its order.

Cluster "A" (one metaledger node, ``broker-a``) is the source; cluster "B" (a 3-node
metaledger cluster, ``broker-b``) the destination, whose metaledger also holds the job's
leases and committed offsets. Two ``metaledger replicate rocketmq`` workers share the job. A
producer sends numbered messages to the source's four queues, one at a time with a 1 s
deadline, recording which ones the broker acknowledged, while in turn:

1. B's metaledger leader is paused (SIGSTOP) past a lease's TTL, then killed, and comes back;
2. each worker in turn is killed (SIGKILL): the other takes its queues; it comes back;
3. the source broker is killed (SIGKILL) and started again on its data.

After each, replication must go on and what the destination holds is recorded. At the end
the job has committed the source's end, and the checker
(:mod:`tests.faults.replicator_checker`, each source queue a list) finds every acknowledged
message in the destination queue of the same number, first copies in send order (a message
may come twice: the replicator delivers at least once), nothing taken back.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from tests.conftest import _failed
from tests.faults.inject import pause_then_kill_leader
from tests.faults.replicator_checker import History, Kind, State
from tests.harness import Cluster, wait_until
from tests.integration.replicator.rocketmq.clusters import Message, RmqCluster, close_all
from tests.integration.replicator.rocketmq.process import Worker, caught_up
from tests.integration.replicator.rocketmq.test_failures import owners

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.faults, pytest.mark.slow]

QUEUES = 4


class Producer(threading.Thread):
    """Numbered messages to the queues in turn, each on its own, no retries after a failure
    (a message whose answer never came may be stored or not)."""

    def __init__(self, source: RmqCluster, topic: str, history: History) -> None:
        super().__init__(name="producer", daemon=True)
        self.source = source
        self.topic = topic
        self.history = history
        self.stopped = threading.Event()
        self.errors = 0

    def run(self) -> None:
        i = 0
        while not self.stopped.is_set():
            q = i % QUEUES
            i += 1
            name = f"queue:{q}"
            number = self.history.next_number(name, Kind.LIST)
            try:
                self.source.produce(self.topic, [Message(b"%d" % number, queue=q)], timeout=1)
            except Exception:  # refused, timed out, or the broker not there
                self.errors += 1
                self.stopped.wait(0.05)
                continue
            self.history.ack(name, number)
            self.stopped.wait(0.003)

    def stop(self) -> None:
        self.stopped.set()
        self.join(15)
        assert not self.is_alive(), "the producer did not stop"


def first_copies(numbers: list[int]) -> list[int]:
    """The numbers in the order they first came (later copies dropped: at least once)."""
    seen: set[int] = set()
    out = []
    for n in numbers:
        if n not in seen:
            seen.add(n)
            out.append(n)
    return out


def read_state(dest: RmqCluster, topic: str) -> State:
    return {
        f"queue:{q}": first_copies([int(m.body) for m in dest.pull_all(topic, q)])
        for q in range(QUEUES)
    }


def has_topic(dest: RmqCluster, topic: str) -> bool:
    try:
        return len(dest.route(topic).queues) > 0
    except Exception:  # no route yet
        return False


@pytest.fixture
def clusters(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[RmqCluster]]:
    """Source "A" (one node), destination "B" (three nodes)."""
    started: list[RmqCluster] = []
    nodes = [Cluster(tmp_path / "A" / "node", n=1), Cluster(tmp_path / "B" / "node", n=3)]
    try:  # the nodes boot together
        for name, node in zip("AB", nodes, strict=True):
            started.append(RmqCluster(tmp_path / name, name, node=node))
        nodes[1].wait_announced(30)
        yield started
    finally:
        failed = len(started) < 2 or _failed(request.node)
        close_all(started, failed)
        for node in nodes[len(started) :]:
            node.close(failed=failed)


def test_every_acknowledged_message_reaches_the_destination_through_faults(
    clusters: list[RmqCluster], tmp_path: Path
) -> None:
    a, b = clusters
    topic = a.topic("Faults", queues=QUEUES)
    job = "faults"
    dest_namesrv = ";".join(f"127.0.0.1:{n.remoting_port}" for n in b.node.nodes)
    history = History()
    producer = Producer(a, topic, history)
    workers = {
        w: Worker(tmp_path, a.namesrv, dest_namesrv, b.endpoints, job, w, "--topics", topic)
        for w in ("w1", "w2")
    }
    hold = threading.Event()  # never set: a fault lasts its time while the sends go on
    stored = [0]

    def goes_on(what: str) -> None:
        """New messages come into the destination; what it holds is recorded."""
        before = stored[0]

        def more() -> bool:
            state = read_state(b, topic)
            stored[0] = sum(len(v) for v in state.values() if isinstance(v, list))
            return stored[0] > before + 20

        wait_until(more, 30, what)
        history.observe(read_state(b, topic))

    def owned_by(worker: str) -> bool:
        held = owners(b, job)
        return len(held) == QUEUES and set(held.values()) == {worker}

    try:
        producer.start()
        wait_until(partial(has_topic, b, topic), 30, "the destination topic is created")
        goes_on("replicating")

        # 1. the destination's metaledger leader paused past a lease's TTL, then killed; back
        pause_then_kill_leader(b.node, 4, 2, goes_on)

        # 2. each worker killed in turn; the other takes its queues
        for dead, other in (("w1", "w2"), ("w2", "w1")):
            workers[dead].stop(signal.SIGKILL)
            wait_until(
                partial(owned_by, other),
                30,
                lambda o=other: (
                    f"{o} takes every queue: {owners(b, job)}\n" + workers[o].log()[-2000:]
                ),
            )
            goes_on(f"replicating through {other} alone")
            workers[dead].start()

        # 3. the source broker killed and started again
        a.stop_broker(signal.SIGKILL)
        hold.wait(1)
        a.start_broker()
        goes_on("replicating from the restarted source broker")

        producer.stop()
        wait_until(lambda: caught_up(a, b, job, topic), 60, "the job committed the source's end")
        problems = history.check(read_state(b, topic))
        total = sum(len(b.pull_all(topic, q)) for q in range(QUEUES))
        print(
            f"{history.acknowledged()} sends acknowledged, {producer.errors} unanswered, "
            f"{total} messages in the destination"
        )
        assert problems == [], problems[:20]
    finally:
        producer.stopped.set()
        for w in workers.values():
            w.stop()
