"""The RocketMQ replicator when things break (issue 19, "What must hold"):

- kill -9 of a worker while messages flow: every source message reaches the destination, and
  the only duplicates are messages at or above the committed offset at the kill;
- worker failover by lease: a standby takes the dead worker's queues from the stored
  offsets; a worker paused (SIGSTOP) past its lease wakes and sends and commits nothing;
- destination down: the commit stalls at the first unsent message, nothing is lost when it
  comes back;
- destination rejecting: without a dismiss policy the commit stalls; with ``--dismiss log``
  each refused message is counted, reported and passed;
- source retention below the checkpoint: resume at the earliest offset with an alarm.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path

import pytest

from replicator.rocketmq.client import ClusterClient
from tests.harness import wait_until
from tests.integration.replicator.rocketmq.clusters import (
    Message,
    RmqCluster,
    Stored,
    running_clusters,
)
from tests.integration.replicator.rocketmq.process import (
    Worker,
    caught_up,
    committed,
    dumps,
    ids,
    queue_statuses,
)

pytestmark = [pytest.mark.integration]


def owners(dest: RmqCluster, job: str) -> dict[str, str]:
    return {
        p: str(q["worker"])
        for p, q in queue_statuses(dest.routes, job).items()
        if not q.get("heartbeat")
    }


def test_kill9_loses_nothing(two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path) -> None:
    a, b = two_clusters
    topic = a.topic("Kill", queues=4)
    job = "kill"
    produced: list[Stored] = []
    done = threading.Event()

    def produce() -> None:
        for batch in range(40):
            msgs = [Message(f"k{batch}-{i}".encode() * 8) for i in range(100)]
            produced.extend(a.produce(topic, msgs))
        done.set()

    producer = threading.Thread(target=produce, daemon=True)
    extra = ("--topics", topic, "--max-in-flight", "256", "--heartbeat-interval", "0")
    w1 = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w1", *extra)
    w2 = None
    producer.start()
    try:
        wait_until(
            lambda: sum(c.next_offset for c in committed(b.routes, job).values()) >= 800,
            90,
            lambda: w1.log()[-3000:],
        )
        assert w1.stop(signal.SIGKILL) == -signal.SIGKILL
        at_kill = {p: c.next_offset for p, c in committed(b.routes, job).items()}
        w2 = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w2", *extra)
        producer.join(120)
        assert done.is_set()
        wait_until(lambda: caught_up(a, b, job, topic), 120, lambda: w2.log()[-3000:])
        got = ids(b.all_messages(topic))
        missing = [s for s in produced if got[s.msg_id] == 0]
        assert not missing, missing[:5]
        dups = {s.msg_id: s for s in produced if got[s.msg_id] > 1}
        for s in dups.values():
            floor = at_kill[f"{topic}/{a.broker_name}/{s.queue}"]
            assert s.offset >= floor, (s, floor)
        print(f"kill -9: {len(produced)} messages, {len(dups)} duplicates, at kill {at_kill}")
    finally:
        producer.join(120)
        w1.stop(signal.SIGKILL)
        if w2 is not None:
            assert w2.stop() == 0, w2.log()[-3000:]


def test_kill9_between_ack_and_commit(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    """Everything stored at the destination, nothing committed yet (a 60 s commit interval):
    kill -9, and the next worker sends it all again; every message at least once, and the
    duplicates are exactly the messages above the commit at the kill."""
    a, b = two_clusters
    topic = a.topic("AckedUncommitted", queues=2)
    job = "acked"
    stored = a.produce(topic, [Message(f"u{i}".encode()) for i in range(50)])
    extra = ("--topics", topic, "--heartbeat-interval", "0")
    w1 = Worker(
        tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w1", *extra, "--commit-interval", "60"
    )
    w2 = None
    try:
        wait_until(lambda: len(b.all_messages(topic)) == 50, 60, lambda: w1.log()[-3000:])
        at_kill = {p: c.next_offset for p, c in committed(b.routes, job).items()}
        assert set(at_kill.values()) == {0}, at_kill  # acked, not committed
        assert w1.stop(signal.SIGKILL) == -signal.SIGKILL
        w2 = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w2", *extra)
        wait_until(lambda: caught_up(a, b, job, topic), 60, lambda: w2.log()[-3000:])
        got = ids(b.all_messages(topic))
        assert {s.msg_id: got[s.msg_id] for s in stored} == {s.msg_id: 2 for s in stored}
    finally:
        w1.stop(signal.SIGKILL)
        if w2 is not None:
            assert w2.stop() == 0, w2.log()[-3000:]


def test_kill9_between_pull_and_send(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    """The destination frozen: the worker has pulled messages it cannot get stored; kill -9
    there, and the next worker delivers every one of them."""
    a, b = two_clusters
    topic = a.topic("PulledUnsent", queues=2)
    job = "pulled"
    extra = ("--topics", topic, "--heartbeat-interval", "0")
    w1 = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w1", *extra)
    w2 = None
    try:
        first = a.produce(topic, [Message(f"v{i}".encode()) for i in range(10)])
        wait_until(lambda: caught_up(a, b, job, topic), 60, lambda: w1.log()[-3000:])
        b.pause_broker()
        try:
            second = a.produce(topic, [Message(f"w{i}".encode()) for i in range(30)])

            def pulled() -> bool:
                qs = queue_statuses(b.routes, job)
                return sum(q["pulled_offset"] - q["committed_offset"] for q in qs.values()) == 30

            wait_until(pulled, 60, lambda: dumps(queue_statuses(b.routes, job)))
            assert w1.stop(signal.SIGKILL) == -signal.SIGKILL
        finally:
            b.resume_broker()
        w2 = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w2", *extra)
        wait_until(lambda: caught_up(a, b, job, topic), 90, lambda: w2.log()[-3000:])
        got = ids(b.all_messages(topic))
        assert all(got[s.msg_id] >= 1 for s in first + second)
    finally:
        w1.stop(signal.SIGKILL)
        if w2 is not None:
            assert w2.stop() == 0, w2.log()[-3000:]


def test_lease_failover_and_paused_worker(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    a, b = two_clusters
    topic = a.topic("Lease", queues=4)
    job = "lease"
    extra = ("--topics", topic, "--heartbeat-interval", "0")
    w1 = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w1", *extra, lease_ttl=3)
    w2 = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w2", *extra, lease_ttl=3)
    total = 0

    def produce(tag: str) -> None:
        nonlocal total
        a.produce(topic, [Message(f"{tag}-{i}".encode()) for i in range(100)])
        total += 100

    def exactly(n: int) -> bool:
        return caught_up(a, b, job, topic) and sum(ids(b.all_messages(topic)).values()) == n

    try:
        wait_until(
            lambda: set(owners(b, job).values()) == {"w1", "w2"} and len(owners(b, job)) == 4,
            60,
            lambda: f"{owners(b, job)}\n{w1.log()[-2000:]}\n{w2.log()[-2000:]}",
        )
        produce("one")
        wait_until(lambda: exactly(total), 60, lambda: dumps(queue_statuses(b.routes, job)))
        w1.send(signal.SIGSTOP)
        paused = time.monotonic()
        wait_until(
            lambda: set(owners(b, job).values()) == {"w2"} and len(owners(b, job)) == 4,
            30,
            lambda: f"{owners(b, job)}\n{w2.log()[-3000:]}",
        )
        print(f"w2 took all queues {time.monotonic() - paused:.1f} s after w1 paused (ttl 3 s)")
        produce("two")
        wait_until(lambda: exactly(total), 60, lambda: w2.log()[-3000:])
        before = committed(b.routes, job)
        w1.send(signal.SIGCONT)
        wait_until(lambda: "lease" in w1.log().lower(), 30, lambda: w1.log()[-3000:])
        produce("three")
        # nothing the paused worker had pulled was sent: exactly one copy of each message
        wait_until(lambda: exactly(total), 60, lambda: w1.log()[-3000:] + w2.log()[-3000:])
        after = committed(b.routes, job)
        assert all(after[p].next_offset >= c.next_offset for p, c in before.items())
    finally:
        for w in (w1, w2):
            w.send(signal.SIGCONT)
            assert w.stop() == 0, w.log()[-3000:]


def test_destination_timing_out_or_down_stalls_then_delivers(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    a, b = two_clusters
    topic = a.topic("Outage", queues=2)
    job = "outage"
    w = Worker(
        tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w1", "--topics", topic,
        "--heartbeat-interval", "0",
    )  # fmt: skip
    try:
        first = a.produce(topic, [Message(f"o{i}".encode()) for i in range(20)])
        wait_until(lambda: caught_up(a, b, job, topic), 60, lambda: w.log()[-3000:])
        stalled = {p: c.next_offset for p, c in committed(b.routes, job).items()}
        b.pause_broker()  # sends time out
        try:
            second = a.produce(topic, [Message(f"p{i}".encode()) for i in range(20)])
            wait_until(
                lambda: all(q["max_offset"] == 20 for q in queue_statuses(b.routes, job).values()),
                60,
                lambda: dumps(queue_statuses(b.routes, job)),
            )
            # the sink times out and sends again from the first unconfirmed message
            wait_until(lambda: "attempt 2 of" in w.log(), 60, lambda: w.log()[-3000:])
            assert {p: c.next_offset for p, c in committed(b.routes, job).items()} == stalled
        finally:
            b.resume_broker()
        wait_until(lambda: caught_up(a, b, job, topic), 90, lambda: w.log()[-3000:])
        # now stopped: no route, connections refused
        stalled = {p: c.next_offset for p, c in committed(b.routes, job).items()}
        b.stop_broker()
        try:
            passes = w.log().count("pass ended")
            third = a.produce(topic, [Message(f"q{i}".encode()) for i in range(20)])
            wait_until(lambda: w.log().count("pass ended") >= passes + 2, 60, w.log)
            assert {p: c.next_offset for p, c in committed(b.routes, job).items()} == stalled
        finally:
            b.start_broker()
        wait_until(lambda: caught_up(a, b, job, topic), 90, lambda: w.log()[-3000:])
        got = ids(b.all_messages(topic))
        assert all(got[s.msg_id] >= 1 for s in first + second + third)
    finally:
        assert w.stop() == 0, w.log()[-3000:]


def oversized(i: int) -> Message:
    """A message whose properties the source takes (32,762 bytes, RocketMQ's limit is 32,767)
    but the destination refuses (MESSAGE_ILLEGAL) once the replicator adds its 29-byte
    ``ROCKETMQ_REPLICATOR_SOURCE=A``."""
    # pad 0x01 value 0x02 + UNIQ_KEY 0x01 <32> 0x02 + WAIT 0x01 true 0x02 = L + 57 bytes
    return Message(f"big{i}".encode(), properties={"pad": "x" * 32705, "UNIQ_KEY": f"{i:032d}"})


def test_refused_messages_stall_the_commit_or_are_dismissed(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    a, b = two_clusters
    topic = a.topic("Refused", queues=1)
    job = "refused"
    extra = ("--topics", topic, "--heartbeat-interval", "0")
    a.produce(topic, [Message(b"ok-0"), oversized(1), Message(b"ok-2"), oversized(3)])
    w = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w1", *extra)
    try:
        # without a dismiss policy the commit stops at the first refused message (offset 1)
        wait_until(lambda: w.log().count("pass ended") >= 2, 60, lambda: w.log()[-3000:])
        assert [c.next_offset for c in committed(b.routes, job).values()] == [1]
        assert "MESSAGE_ILLEGAL" in w.log() or "code 13" in w.log() or "13" in w.log()
    finally:
        assert w.stop() == 0, w.log()[-3000:]
    w = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w2", *extra, "--dismiss", "log")
    try:
        wait_until(lambda: caught_up(a, b, job, topic), 90, lambda: w.log()[-3000:])
        assert [c.dismissed for c in committed(b.routes, job).values()] == [2]
        assert w.log().count("dismissed the message at offset") == 2, w.log()[-3000:]
        (row,) = queue_statuses(b.routes, job).values()
        assert row["dismissed"] == 2
        bodies = [m.body for m in b.all_messages(topic)]
        assert bodies == [b"ok-0", b"ok-2"], bodies
    finally:
        assert w.stop() == 0, w.log()[-3000:]


def test_retention_below_checkpoint_resumes_at_earliest_with_alarm(tmp_path: Path) -> None:
    small_log = (
        "--segment-size-bytes", "65536", "--retention-bytes", "131072",
        "--retention-check-interval-ms", "200",
    )  # fmt: skip
    # only the source keeps a small log (the destination keeps everything it got)
    with (
        running_clusters(tmp_path / "a", ("RA",), small_log) as (a,),
        running_clusters(tmp_path / "b", ("RB",)) as (b,),
    ):
        topic = a.topic("Retained", queues=1)
        job = "retained"
        extra = ("--topics", topic, "--heartbeat-interval", "0")
        w = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w1", *extra)
        try:
            a.produce(topic, [Message(b"early" * 200) for _ in range(20)])
            wait_until(lambda: caught_up(a, b, job, topic), 60, lambda: w.log()[-3000:])
        finally:
            assert w.stop() == 0, w.log()[-3000:]
        (checkpoint,) = [c.next_offset for c in committed(b.routes, job).values()]
        a.produce(topic, [Message(b"late" * 256 + i.to_bytes(4, "big")) for i in range(400)])
        wait_until(
            lambda: source_min_offset(a, topic) > checkpoint,
            60,
            f"the source kept offset {checkpoint} (retention did not run)",
        )
        earliest = source_min_offset(a, topic)
        w = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, job, "w2", *extra)
        try:
            wait_until(lambda: caught_up(a, b, job, topic), 90, lambda: w.log()[-3000:])
            assert "ALARM offset_lost" in w.log()
            (row,) = [q for q in queue_statuses(b.routes, job).values() if not q["heartbeat"]]
            assert any("offset_lost" in a for a in row["alarms"]), row
            # everything the source still has (retention goes on deleting) arrived
            kept = a.pull_all(topic, 0, source_min_offset(a, topic))
            got = ids(b.all_messages(topic))
            assert kept and all(got[m.properties["UNIQ_KEY"]] >= 1 for m in kept)
            assert earliest > checkpoint
        finally:
            assert w.stop() == 0, w.log()[-3000:]


def source_min_offset(cluster: RmqCluster, topic: str) -> int:
    async def go() -> int:
        async with ClusterClient(cluster.namesrv) as c:
            (q,) = await c.read_queues(topic)
            return await c.min_offset(q)

    return asyncio.run(go())
