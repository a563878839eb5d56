"""The Redis replicator under network partitions: each of a job's two workers in a network
namespace of its own (tests/faults/net/netns.py), beside a 3-node metaledger cluster
(members 0-2) and the broker (member 3); the Redis source, the writer and the oracle on the
bridge. With a lease TTL of 3 s, the nemesis cuts the active worker

1. off metaledger only (it still reaches Redis and the broker) for 8 s, past its lease;
2. off the broker only (it still reaches Redis and metaledger) for 8 s;
3. off everything for 8 s: the broker first, metaledger and Redis 0.5 s later (so it has
   sends in flight, unanswered in its sockets, when it loses the rest);

healing after each, while a writer writes numbered values to Redis (``SET``, ``RPUSH``,
``INCR``: tests/faults/replicator_checker.py) with 1 s deadlines. A watcher on the bridge
polls the job's election leader every 0.1 s (tests/faults/net/replicator_watch.py).

What must hold: replication goes on after every heal; when the active worker loses
metaledger, the other takes over within :data:`TAKEOVER_S` of the cut (TTL + 4 s); no
message from a worker is stored once another worker's term had begun (the broker stamps
each message with its sender's address, the bornHost, and its store time;
``replicator_checker.check_terms``); at the end the topic replayed into a second Redis
equals the source (``DEBUG DIGEST``), and no acknowledged write is missing, none twice
(after the replay's dedupe), none out of order, nothing taken back. After each heal
replication goes on within :data:`RECOVER_S`, and the cut-off worker's sockets hold no
byte for the broker within ``replicator_cuts.QUIET_S`` (``ss``: what they still hold lands whenever TCP
retransmits it).

What it found: the isolated worker kept its pass (and its sink's resends) until the heal,
and its socket's queue reached the broker 9 s into its successor's term (5 messages); a
send that timed out was sent again on the same stuck connection, so replication came back
5.6 s after a broker cut healed. Now a pass ends at its lease's deadline, a closed sink
resets its connections, and a timed-out send dials anew.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rmq.message import StoredMessage
from tests.faults.net.netns import CLIENT_IP, Net, unavailable_reason
from tests.faults.net.replicator_cuts import heal_at, isolated, off_metaledger
from tests.faults.net.run import REPO_ROOT, NetCluster, _env, spawn, stop_all
from tests.faults.net.test_ha_partition import Lines
from tests.faults.replicator_checker import (
    History,
    Written,
    check_terms,
    handover_margins,
    terms_from,
)
from tests.faults.test_replicator_redis import Destination, Writer, read_state
from tests.harness import wait_until
from tests.integration.replicator.redis.test_replicate import FAST, digest
from tests.redis_harness import RedisServer

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
    pytest.mark.timeout(300),
]

META = (0, 1, 2)
BROKER = 3
WORKERS = {"a": 4, "b": 5}
BROKER_PORT = 10911
LEASE_TTL_S = 3
#: from the cut of the active worker off metaledger to the other worker's term: the lease
#: runs out within its TTL of the last renewal, and the standby, blocked in its campaign,
#: wins as soon as the old leader key goes; 4 s for the lease sweep and 2 busy cores
TAKEOVER_S = LEASE_TTL_S + 4.0
#: after a heal, replication goes on within this (as the partition tests' nodes serve)
RECOVER_S = 5.0


class Sent(Destination):
    """The destination's oracle, also keeping who sent each message and when it was stored."""

    def __init__(self, addr: str, topic: str, target: RedisServer, senders: dict[str, str]):
        super().__init__(addr, topic, target)  # type: ignore[arg-type]
        self.senders = senders
        self.written: list[Written] = []

    def pulled_message(self, queue: int, message: StoredMessage) -> None:
        ip = message.born_host.ip
        self.written.append(
            Written(
                self.senders.get(ip, ip),
                message.store_timestamp / 1000,
                f"queue {queue} offset {message.queue_offset}",
            )
        )


def test_the_active_worker_cut_off_stops_writing_and_the_standby_takes_over(
    tmp_path: Path,
) -> None:
    procs: list[subprocess.Popen[bytes] | None] = []
    with Net(6) as net, net.entered(net.bridge_ns):
        cluster = NetCluster(net, tmp_path, n=len(META))
        eps = ",".join(cluster.endpoints)
        broker_addr = f"{net.ips[BROKER]}:{BROKER_PORT}"
        topic, job = "redis-net", "net"
        source = target = None
        writer: Writer | None = None
        try:
            for i in META:
                cluster.start(i)
            broker_args = [
                "nameserver.cli", "broker", "--group", "broker-a",
                "--data-dir", str(tmp_path / "broker"), "--listen", broker_addr,
                "--listen-grpc", "off", "--endpoints", eps,
            ]  # fmt: skip
            procs.append(spawn(net, net.members[BROKER], tmp_path, "broker", broker_args))
            # (protected mode refuses other addresses than loopback without a password)
            source = RedisServer(
                tmp_path, {**FAST, "protected-mode": "no"}, name="source", host=CLIENT_IP
            )
            target = RedisServer(tmp_path, {"enable-debug-command": "yes"}, name="target")
            helper = [sys.executable, "-m", "tests.faults.net.replicator_watch"]
            made = subprocess.run(
                [*helper, "topic", "--endpoints", eps, "--topic", topic],
                capture_output=True, env=_env(), cwd=REPO_ROOT, timeout=120, check=False,
            )  # fmt: skip
            assert made.returncode == 0, (made.stdout, made.stderr[-2000:])

            def start_worker(w: str) -> None:
                args = [
                    "nameserver.cli", "replicate", "redis", "--source", source.url,
                    "--topic", topic, "--job", job, "--worker", w, "--endpoints", eps,
                    "--lease-ttl", str(LEASE_TTL_S),
                ]  # fmt: skip
                procs.append(spawn(net, net.members[WORKERS[w]], tmp_path, f"worker-{w}", args))

            start_worker("a")
            watcher = subprocess.Popen(
                [*helper, "watch", "--endpoints", eps, "--job", job],
                stdout=subprocess.PIPE, env=_env(), cwd=REPO_ROOT, start_new_session=True,
            )  # fmt: skip
            procs.append(watcher)
            looks = Lines(watcher)
            wait_until(lambda: looks.last().get("leader") == "a", 60, "a is active")
            start_worker("b")

            history = History()
            writer = Writer(source, history)
            senders = {net.ips[i]: w for w, i in WORKERS.items()}
            oracle = Sent(broker_addr, topic, target, senders)

            def goes_on(what: str) -> None:
                oracle.catch_up()  # what was sent before the fault is not "going on"
                before = oracle.total()
                wait_until(
                    lambda: (
                        oracle.catch_up() >= 0 and oracle.total() > before + 20 and oracle.settled()
                    ),
                    30,
                    what,
                )
                history.observe(read_state(target, history))

            def active() -> str:
                leader = looks.last().get("leader")
                assert leader in WORKERS, looks.rows[-5:]
                return str(leader)

            takeovers: list[float] = []
            recoveries: list[float] = []
            timeline: list[str] = []
            began = time.time()

            def cut(what: str, how: Callable[[int], None], takeover: bool) -> None:
                old = active()
                started = time.time()
                how(WORKERS[old])
                if takeover:
                    other = next(w for w in WORKERS if w != old)
                    wait_until(
                        lambda: looks.last().get("leader") == other,
                        TAKEOVER_S + 10,
                        f"{other} takes over when {old} is {what}",
                    )
                    took = next(
                        float(r["t"])
                        for r in looks.rows
                        if r["t"] > started and r.get("leader") == other
                    )
                    takeovers.append(took - started)
                healed, again = heal_at(
                    net, started, WORKERS[old], broker_addr, f"{old} {what}", goes_on
                )
                timeline.append(
                    f"{old} {what} at {started - began:.1f} s, healed at {healed - began:.1f} s, "
                    f"replicating again {again:.1f} s after"
                )
                recoveries.append(again)

            writer.start()
            goes_on("replicating")
            cut("cut off metaledger", off_metaledger(net, META), True)
            cut("cut off the broker", lambda i: net.cut(i, BROKER), False)
            cut("isolated", isolated(net, BROKER), True)

            writer.stop()

            def caught_up() -> bool:
                info = source.client().info("replication")  # type: ignore[union-attr]
                last = looks.last()
                return bool(
                    last.get("replid") == info["master_replid"]
                    and last.get("confirmed_offset") == info["master_repl_offset"]
                )

            wait_until(
                caught_up, 60, lambda: f"the job confirms the source's offset: {looks.last()}"
            )
            wait_until(
                lambda: oracle.catch_up() >= 0 and digest(target) == digest(source),
                60,
                "the replayed topic equals the source (DEBUG DIGEST)",
            )
            # for a look afterwards: who wrote what when, and what the watcher saw
            (tmp_path / "written.jsonl").write_text(
                "".join(json.dumps([w.worker, w.stored, w.where]) + "\n" for w in oracle.written)
            )
            (tmp_path / "looks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in looks.rows))
            problems = history.check(read_state(target, history))
            terms = terms_from(looks.rows)
            problems += check_terms(terms, oracle.written)
            slow = [round(s, 2) for s in takeovers if s > TAKEOVER_S]
            print(*timeline, sep="\n")
            print(
                f"{history.acknowledged()} writes acknowledged, {writer.errors} unanswered, "
                f"{oracle.total()} messages, {oracle.replayer.duplicates} duplicates, "
                f"terms {[(t.worker, t.token) for t in terms]}, "
                f"takeovers {[round(s, 2) for s in takeovers]} s, the old worker's last message "
                f"stored {handover_margins(terms, oracle.written)} s before the new term"
            )
            if slow:
                problems.append(f"takeovers slower than {TAKEOVER_S} s: {slow}")
            late = [round(s, 2) for s in recoveries if s > RECOVER_S]
            if late:
                problems.append(f"replicating again later than {RECOVER_S} s after a heal: {late}")
            assert problems == [], problems[:20]
        finally:
            if writer is not None:
                writer.stopped.set()
            stop_all(list(reversed(procs)))
            cluster.close()
            for server in (source, target):
                if server is not None:
                    server.close()
