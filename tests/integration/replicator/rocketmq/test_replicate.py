"""The RocketMQ replicator end to end: real clusters (a metaledger node and a broker each),
real ``metaledger replicate rocketmq`` workers, messages read back from the destination
broker byte for byte.

- bodies stay bytes (all 256 byte values, invalid UTF-8, empty, 4 MiB), tags, keys, flag,
  message id and user properties are kept, ``ROCKETMQ_REPLICATOR_SOURCE`` names the source,
  queue i goes to queue i in order; the destination topic is created like the source's;
- loops: A→B and B→A at once, and A→B→AB→A (one name contains another): a cluster never
  gets back a message that passed through it, and each gets exactly the copies the
  topology's paths give;
- topology: 8 source queues into 4 destination queues (i → i mod 4), and queues added at
  the source mid-run: nothing lost;
- retry and DLQ topics: skipped by a pattern unless asked for;
- ``metaledger replicate status`` shows each queue.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import pytest

from tests.harness import wait_until
from tests.integration.broker.conftest import cli_env
from tests.integration.replicator.rocketmq.clusters import (
    Message,
    ProduceError,
    RmqCluster,
    close_all,
    start_clusters,
)
from tests.integration.replicator.rocketmq.process import (
    Worker,
    caught_up,
    dumps,
    ids,
    queue_statuses,
    set_order_conf,
    update_topic,
)

pytestmark = [pytest.mark.integration]

SOURCE = "ROCKETMQ_REPLICATOR_SOURCE"
BIG = os.urandom(4 * 1024 * 1024 - 4096)


def test_every_message_kept_byte_exact(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    a, b = two_clusters
    topic = a.topic("Orders", queues=4)
    special = [bytes(range(256)), b"\xff\xfe\x80\xc3\x28 not utf-8", b"", BIG]
    msgs = [Message(body, queue=i % 4) for i, body in enumerate(special)]
    msgs += [
        Message(
            os.urandom(64) + i.to_bytes(4, "big"),
            tags=f"TAG{i % 3}",
            keys=f"order-{i} customer-{i % 7}",
            properties={"seq": str(i), "note": "δ ünïcode ✓"},
            queue=i % 4,
            flag=i % 5,
        )
        for i in range(200)
    ]
    stored = a.produce(topic, msgs)
    w = Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, "kept", "w1", "--topics", topic)
    try:
        wait_until(
            lambda: caught_up(a, b, "kept", topic),
            90,
            lambda: f"not caught up: {dumps(queue_statuses(b.routes, 'kept'))}\n{w.log()[-3000:]}",
        )
        route = b.route(topic)
        assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queues] == [
            (4, 4, 6)
        ]
        for q in range(4):
            src = a.pull_all(topic, q)
            dst = b.pull_all(topic, q)
            assert len(dst) == len(src), (q, len(src), len(dst))
            for s, d in zip(src, dst, strict=True):
                assert d.body == s.body
                assert d.flag == s.flag
                assert d.tags == s.tags
                sp = {k: v for k, v in s.properties.items() if k not in ("WAIT",)}
                dp = {k: v for k, v in d.properties.items() if k not in ("WAIT", SOURCE)}
                assert dp == sp
                assert d.properties[SOURCE] == "A"
        assert sorted(s.msg_id for s in stored) == sorted(ids(b.all_messages(topic)))
        qs = queue_statuses(b.routes, "kept")
        assert {p for p, q in qs.items() if not q["heartbeat"]} == {
            f"{topic}/{a.broker_name}/{i}" for i in range(4)
        }
        out = subprocess.run(
            [sys.executable, "-m", "nameserver.cli", "replicate", "status", "--job", "kept",
             "--endpoints", ",".join(b.endpoints)],
            env=cli_env(tmp_path), capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        text = out.stdout.decode()
        assert "COMMITTED" in text and f"{topic}/{a.broker_name}/3" in text, text
    finally:
        assert w.stop() == 0, w.log()[-3000:]


def copies(edges: list[tuple[str, str]], born: str) -> Counter[str]:
    """How many copies of a message born in ``born`` each cluster ends with: one per path
    that never revisits a cluster (loop prevention's promise)."""
    out: Counter[str] = Counter({born: 1})

    def walk(at: str, seen: list[str]) -> None:
        for src, dst in edges:
            if src == at and dst not in seen:
                out[dst] += 1
                walk(dst, [*seen, dst])

    walk(born, [born])
    return out


def test_loops_never_come_back(make_clusters: object, tmp_path: Path) -> None:
    a, b, ab = make_clusters("A", "B", "AB")  # type: ignore[operator]
    by_name = {c.name: c for c in (a, b, ab)}
    topic = "Loop"
    for c in (a, b, ab):
        c.topic(topic, queues=2)
    edges = [("A", "B"), ("B", "A"), ("B", "AB"), ("AB", "A")]

    def worker(s: str, d: str) -> Worker:
        src, dst = by_name[s], by_name[d]
        extra = ("--topics", topic, "--heartbeat-interval", "0")
        return Worker(tmp_path, src.namesrv, dst.namesrv, dst.endpoints, f"{s}-{d}", "w", *extra)

    workers = [worker(s, d) for s, d in edges]
    n = 20
    born: dict[str, str] = {}
    for c in (a, b, ab):
        for s in c.produce(topic, [Message(f"{c.name}-{i}".encode()) for i in range(n)]):
            born[s.msg_id] = c.name
    expected: dict[str, Counter[str]] = {c: Counter() for c in by_name}
    for name in by_name:
        for where, k in copies(edges, name).items():
            expected[where][name] += k * n

    def counts() -> dict[str, Counter[str]]:
        return {
            c.name: Counter(born[m.properties["UNIQ_KEY"]] for m in c.all_messages(topic))
            for c in (a, b, ab)
        }

    def settled() -> bool:
        return (
            all(caught_up(by_name[s], by_name[d], f"{s}-{d}", topic) for s, d in edges)
            and counts() == expected
        )

    try:
        wait_until(settled, 120, lambda: f"{counts()} != {expected}")
        for c in (a, b, ab):
            for m in c.all_messages(topic):
                trail = m.properties.get(SOURCE, "")
                assert c.name not in trail.split(","), (c.name, trail)
                if born[m.properties["UNIQ_KEY"]] == c.name:
                    assert not trail, trail  # its own messages never come back
        # the substring trap: "A" is inside "AB", and AB→A still delivers AB's messages
        assert expected["A"]["AB"] == n and counts()["A"]["AB"] == n
    finally:
        for w in workers:
            assert w.stop() == 0, w.log()[-3000:]


def test_queue_remapping_and_growth(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    a, b = two_clusters
    topic = a.topic("Wide", queues=8)
    b.topic("Wide", queues=4)  # exists with fewer queues: remapped i → i mod 4
    first = a.produce(topic, [Message(f"w{i}".encode(), queue=i % 8) for i in range(80)])
    w = Worker(
        tmp_path, a.namesrv, b.namesrv, b.endpoints, "wide", "w1",
        "--topics", topic, "--no-config-sync",
    )  # fmt: skip
    try:
        wait_until(lambda: caught_up(a, b, "wide", topic), 90, lambda: w.log()[-3000:])
        for dq in range(4):
            got = [m.body for m in b.pull_all(topic, dq)]
            want = [s.body for q in (dq, dq + 4) for s in a.pull_all(topic, q)]
            assert sorted(got) == sorted(want)
            for q in (dq, dq + 4):  # each source queue's order kept inside its dest queue
                src_order = [s.body for s in a.pull_all(topic, q)]
                assert [x for x in got if x in set(src_order)] == src_order
        # the source grows to 12 queues mid-run: the new ones are found and replicated
        update_topic(a, topic, 12)
        more = a.produce(topic, [Message(f"x{i}".encode(), queue=i % 12) for i in range(48)])
        wait_until(lambda: caught_up(a, b, "wide", topic), 90, lambda: w.log()[-3000:])
        want_ids = sorted(s.msg_id for s in first + more)
        assert sorted(ids(b.all_messages(topic))) == want_ids
    finally:
        assert w.stop() == 0, w.log()[-3000:]


def test_pattern_skips_retry_and_dlq_unless_asked(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    a, b = two_clusters
    for t in ("pat-one", "pat-two", "%RETRY%pat-group", "%DLQ%pat-group"):
        a.topic(t, queues=1)
        a.produce(t, [Message(t.encode())])
    w = Worker(
        tmp_path, a.namesrv, b.namesrv, b.endpoints, "pat", "w1",
        "--topic-pattern", "(%RETRY%|%DLQ%)?pat-.*", "--include-dlq",
    )  # fmt: skip
    try:
        wait_until(
            lambda: caught_up(a, b, "pat", "pat-one", "pat-two", "%DLQ%pat-group"),
            90,
            lambda: w.log()[-3000:],
        )
        topics = set(b.routes.route_topics().topics)
        assert {"pat-one", "pat-two", "%DLQ%pat-group"} <= topics
        assert "%RETRY%pat-group" not in topics
        assert [m.body for m in b.all_messages("%DLQ%pat-group")] == [b"%DLQ%pat-group"]
    finally:
        assert w.stop() == 0, w.log()[-3000:]


def test_dest_read_only_for_producers(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    """``--dest-read-only``: the destination topic refuses a producer's send (NO_PERMISSION)
    while the replicated messages keep coming."""
    a, b = two_clusters
    topic = a.topic("Mirror", queues=2)
    w = Worker(
        tmp_path, a.namesrv, b.namesrv, b.endpoints, "mirror", "w1",
        "--topics", topic, "--dest-read-only",
    )  # fmt: skip
    try:
        first = a.produce(topic, [Message(f"m{i}".encode()) for i in range(10)])
        wait_until(lambda: caught_up(a, b, "mirror", topic), 60, lambda: w.log()[-3000:])
        with pytest.raises(ProduceError) as refused:
            b.produce(topic, [Message(b"written at the replica")], timeout=5)
        assert refused.value.code == 16, refused.value
        second = a.produce(topic, [Message(f"n{i}".encode()) for i in range(10)])
        wait_until(lambda: caught_up(a, b, "mirror", topic), 60, lambda: w.log()[-3000:])
        assert sorted(ids(b.all_messages(topic))) == sorted(s.msg_id for s in first + second)
    finally:
        assert w.stop() == 0, w.log()[-3000:]


def test_hash_mapping_keeps_keys_together_and_orderly_topics_keep_queues(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    """``--queue-map hash``: a key's messages land in one destination queue (crc32 of the
    key mod n), in their source order; an orderly topic maps queue i to queue i anyway."""
    a, b = two_clusters
    keyed = a.topic("Keyed", queues=4)
    fifo = a.topic("Fifo", queues=4, order=True)
    set_order_conf(a, fifo, f"{a.broker_name}:4")  # as mqadmin updateTopic -o true does
    keys = [f"user-{k}" for k in range(7)]
    keyed_msgs = [
        Message(f"{keys[i % 7]}:{i}".encode(), keys=keys[i % 7], queue=i % 4) for i in range(56)
    ]
    a.produce(keyed, keyed_msgs)
    fifo_stored = a.produce(
        fifo, [Message(f"f{i}".encode(), keys=keys[i % 7], queue=i % 4) for i in range(40)]
    )
    w = Worker(
        tmp_path, a.namesrv, b.namesrv, b.endpoints, "hashed", "w1",
        "--topics", f"{keyed},{fifo}", "--queue-map", "hash",
    )  # fmt: skip
    try:
        wait_until(lambda: caught_up(a, b, "hashed", keyed, fifo), 90, lambda: w.log()[-3000:])
        for q in range(4):
            got = [m.body.decode() for m in b.pull_all(keyed, q)]
            for body in got:
                key = body.split(":")[0]
                assert zlib.crc32(key.encode()) % 4 == q, (body, q)
            for key in keys:  # a key's messages of one source queue keep their order
                mine = [int(x.split(":")[1]) for x in got if x.startswith(key + ":")]
                for sq in range(4):
                    from_sq = [i for i in mine if i % 4 == sq]
                    assert from_sq == sorted(from_sq), (key, sq, from_sq)
        assert sum(len(b.pull_all(keyed, q)) for q in range(4)) == 56
        assert [q.order for q in b.route(fifo).queues] == [True]
        assert b.route(fifo).order_topic_conf, "the destination's nameserver marks it orderly"
        for q in range(4):
            want = [s.msg_id for s in fifo_stored if s.queue == q]
            assert [m.properties["UNIQ_KEY"] for m in b.pull_all(fifo, q)] == want
    finally:
        assert w.stop() == 0, w.log()[-3000:]


def test_rename_sends_a_topic_under_another_name(
    two_clusters: tuple[RmqCluster, RmqCluster], tmp_path: Path
) -> None:
    a, b = two_clusters
    topic = a.topic("Original", queues=2)
    stored = a.produce(topic, [Message(f"r{i}".encode()) for i in range(12)])
    w = Worker(
        tmp_path, a.namesrv, b.namesrv, b.endpoints, "renamed", "w1",
        "--topics", topic, "--rename", f"{topic}=Original-dr",
    )  # fmt: skip
    try:
        wait_until(lambda: caught_up(a, b, "renamed", topic), 60, lambda: w.log()[-3000:])
        assert "Original" not in b.routes.route_topics().topics
        assert sorted(ids(b.all_messages("Original-dr"))) == sorted(s.msg_id for s in stored)
        qs = queue_statuses(b.routes, "renamed")
        assert {q["dest_topic"] for q in qs.values() if not q["heartbeat"]} == {"Original-dr"}
    finally:
        assert w.stop() == 0, w.log()[-3000:]


def test_two_default_clusters_replicate_both_ways(tmp_path: Path) -> None:
    """Both sides of two fresh deployments are named ``DefaultCluster``: loop prevention
    names each by its nameserver, so A→B and B→A at once deliver every message once and
    none comes back. The same cluster on both sides (one nameserver under two addresses) is
    one line and exit 2, no traceback."""
    (a,) = start_clusters(tmp_path / "one", ["DefaultCluster"])
    clusters = [a]
    workers: list[Worker] = []
    try:
        (b,) = start_clusters(tmp_path / "two", ["DefaultCluster"])
        clusters.append(b)
        topic = "Both"
        for c in (a, b):
            c.topic(topic, queues=2)
        extra = ("--topics", topic, "--heartbeat-interval", "0")
        workers = [
            Worker(tmp_path, a.namesrv, b.namesrv, b.endpoints, "a-b", "w", *extra),
            Worker(tmp_path, b.namesrv, a.namesrv, a.endpoints, "b-a", "w", *extra),
        ]
        n = 10
        mine = {
            c.namesrv: {s.msg_id for s in c.produce(topic, [Message(b"%d" % i) for i in range(n)])}
            for c in (a, b)
        }

        def settled() -> bool:
            return (
                caught_up(a, b, "a-b", topic)
                and caught_up(b, a, "b-a", topic)
                and all(len(c.all_messages(topic)) == 2 * n for c in (a, b))
            )

        wait_until(settled, 120, lambda: "\n".join(w.log()[-2000:] for w in workers))
        for c, other in ((a, b), (b, a)):
            got = ids(c.all_messages(topic))
            assert set(got) == mine[a.namesrv] | mine[b.namesrv] and max(got.values()) == 1
            for m in c.all_messages(topic):
                if m.properties["UNIQ_KEY"] in mine[other.namesrv]:
                    assert m.properties[SOURCE] == f"DefaultCluster@{other.namesrv}"
        port = a.namesrv.rpartition(":")[2]
        same = Worker(tmp_path, a.namesrv, f"localhost:{port}", a.endpoints, "same", "w", *extra)
        assert same.proc is not None and same.proc.wait(60) == 2, same.log()
        assert "Traceback" not in same.log(), same.log()
        last = same.log().strip().splitlines()[-1]
        assert last.startswith("metaledger: replicate rocketmq: --source-namesrv"), last
        assert "same RocketMQ cluster 'DefaultCluster'" in last, last
    finally:
        try:
            codes = [(w.stop(), w.log()[-3000:]) for w in workers]
        finally:
            close_all(clusters)  # the clusters go even when a worker would not stop
        for code, log in codes:
            assert code == 0, log
