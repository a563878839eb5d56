"""The RocketMQ replicator under a network partition: its two workers of one job each in a
network namespace of their own (tests/faults/net/netns.py), beside the destination cluster
"B" (a 3-node metaledger cluster, members 0-2, which also holds the job's leases, claims and
offsets; ``broker-b``, member 3) and the source cluster "A" (one metaledger node, member 4;
``broker-a``, member 5); the producer and the reader on the bridge. Lease TTL 3 s.

A producer sends numbered messages to the source's four queues, one at a time with a 1 s
deadline. Once both workers hold queues, the one holding queue 0 is cut off B's metaledger
(it still reaches both brokers and A's metaledger) for 8 s, past its lease, then healed;
once both hold queues again, the one holding queue 0 is isolated for 8 s (off ``broker-b``
first, so it has sends in flight, and 0.5 s later off everything: B's metaledger, both
brokers, A's metaledger). A watcher polls the queues' claims every 0.1 s
(tests/faults/net/replicator_watch.py).

What must hold, after each: the other worker claims every queue within :data:`TAKEOVER_S`
of the cut; replication goes on after the heal; the cut worker's sockets hold no byte for
``broker-b`` within ``replicator_cuts.QUIET_S`` (``Net.unsent``). Over the whole run: no message from a
worker is stored in a destination queue once another worker's claim on it had begun
(bornHost and store time against the claims seen: ``replicator_checker.check_terms``, per
queue); at the end every acknowledged message is in the destination queue of the same
number, first copies in send order, nothing taken back (a message may come twice: at least
once).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from raftlog.native.auth import create_password_file
from rmq.connection import RemotingConnection
from tests.faults.net.netns import Net, unavailable_reason
from tests.faults.net.replicator_cuts import heal_at, isolated, off_metaledger
from tests.faults.net.run import (
    CLIENT_PORT,
    PEER_PORT,
    REMOTING_PORT,
    REPO_ROOT,
    NetCluster,
    _env,
    serve_args,
    spawn,
    stop_all,
)
from tests.faults.net.test_ha_partition import Lines
from tests.faults.replicator_checker import History, Kind, State, Term, Written, check_terms
from tests.faults.test_replicator_rocketmq import first_copies
from tests.harness import wait_until
from tests.integration.replicator.broker_env import pull_all
from tests.integration.replicator.rocketmq.clusters import Message, RmqCluster
from tests.integration.replicator.rocketmq.process import FAST

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
    pytest.mark.timeout(300),
]

META, DEST_BROKER, SOURCE_META, SOURCE_BROKER = (0, 1, 2), 3, 4, 5
WORKERS = {"w1": 6, "w2": 7}
BROKER_PORT = 10911
QUEUES = 4
TOPIC = "NetFaults"
LEASE_TTL_S = 3
#: the cut worker's lease runs out within its TTL; the other claims its queues at its next
#: refresh (1 s) after the claims went with the lease; 4 s for the sweep and 2 busy cores
TAKEOVER_S = LEASE_TTL_S + 1 + 4.0


class Producer(threading.Thread):
    """Numbered messages to the source's queues in turn, each on its own with a 1 s
    deadline, no retries (a message whose answer never came may be stored or not)."""

    def __init__(self, broker_addr: str, history: History) -> None:
        super().__init__(name="producer", daemon=True)
        self.addr = broker_addr
        self.history = history
        self.stopped = threading.Event()
        self.errors = 0

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        host, _, port = self.addr.rpartition(":")
        # RmqCluster's send needs only the broker's name from its cluster
        cluster = SimpleNamespace(broker_name="broker-a")
        conn: RemotingConnection | None = None
        i = 0
        while not self.stopped.is_set():
            q = i % QUEUES
            i += 1
            name = f"queue:{q}"
            number = self.history.next_number(name, Kind.LIST)
            try:
                if conn is None or not conn.usable:
                    conn = await RemotingConnection.connect(host, int(port), timeout_s=1)
                send = RmqCluster._send(  # type: ignore[arg-type]
                    cluster, conn, TOPIC, q, QUEUES, Message(b"%d" % number, queue=q),
                    time.monotonic() + 1,
                )  # fmt: skip
                await asyncio.wait_for(send, 1)
            except Exception:  # refused, timed out, or the broker not there
                self.errors += 1
                if conn is not None:
                    conn.close()
                    conn = None
                await asyncio.sleep(0.05)
                continue
            self.history.ack(name, number)
            await asyncio.sleep(0.003)
        if conn is not None:
            await conn.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join(15)
        assert not self.is_alive(), "the producer did not stop"


def claim_terms(looks: list[dict[str, object]], queue: int) -> list[Term]:
    """The claims of source queue ``queue`` as the watcher saw them, as lease terms."""
    terms: list[Term] = []
    last_t, last_token = float("-inf"), None
    for look in looks:
        claims = look.get("claims")
        if not isinstance(claims, dict):
            continue
        t = float(str(look["t"]))
        held = claims.get(f"{TOPIC}/broker-a/{queue}")
        token = None if held is None else held[1]
        if held is not None and token != last_token:
            terms.append(Term(str(held[0]), int(token), last_t, t))
        last_t, last_token = t, token
    return terms


def owners(looks: Lines) -> dict[str, str]:
    """Who holds each of the topic's queues now (the heartbeat partition left out)."""
    claims = looks.last().get("claims")
    if not isinstance(claims, dict):
        return {}
    return {p: str(v[0]) for p, v in claims.items() if p.startswith(f"{TOPIC}/")}


def test_a_worker_cut_off_or_isolated_stops_and_the_other_takes_its_queues(
    tmp_path: Path,
) -> None:
    procs: list[subprocess.Popen[bytes] | None] = []
    with Net(8) as net, net.entered(net.bridge_ns):
        dest = NetCluster(net, tmp_path, n=len(META))
        dest_eps = ",".join(dest.endpoints)
        source_ip = net.ips[SOURCE_META]
        source_eps = f"{source_ip}:{CLIENT_PORT}"
        broker_a = f"{net.ips[SOURCE_BROKER]}:{BROKER_PORT}"
        broker_b = f"{net.ips[DEST_BROKER]}:{BROKER_PORT}"
        job = "netrmq"
        producer: Producer | None = None
        try:
            for i in META:
                dest.start(i)
            password = tmp_path / "source-password"
            create_password_file(password)
            initial = f"a0={source_ip}:{PEER_PORT}"
            meta_args = serve_args("a0", source_ip, tmp_path / "a0", initial, password)
            procs.append(spawn(net, net.members[SOURCE_META], tmp_path, "a0", meta_args))
            for member, name, cluster, addr, eps in (
                (SOURCE_BROKER, "broker-a", "A", broker_a, source_eps),
                (DEST_BROKER, "broker-b", "B", broker_b, dest_eps),
            ):
                args = [
                    "nameserver.cli", "broker", "--group", name, "--cluster", cluster,
                    "--data-dir", str(tmp_path / name), "--listen", addr,
                    "--listen-grpc", "off", "--endpoints", eps,
                ]  # fmt: skip
                procs.append(spawn(net, net.members[member], tmp_path, name, args))
            helper = [sys.executable, "-m", "tests.faults.net.replicator_watch"]
            for eps, cluster, name, topic in (
                (source_eps, "A", "broker-a", TOPIC),
                (dest_eps, "B", "broker-b", ""),
            ):
                made = subprocess.run(
                    [*helper, "topic", "--endpoints", eps, "--cluster", cluster,
                     "--broker", name, "--topic", topic],
                    capture_output=True, env=_env(), cwd=REPO_ROOT, timeout=120, check=False,
                )  # fmt: skip
                assert made.returncode == 0, (made.stdout, made.stderr[-2000:])
            dest_namesrv = ";".join(f"{net.ips[i]}:{REMOTING_PORT}" for i in META)
            for w, member in WORKERS.items():
                args = [
                    "nameserver.cli", "replicate", "rocketmq",
                    "--source-namesrv", f"{source_ip}:{REMOTING_PORT}",
                    "--dest-namesrv", dest_namesrv, "--job", job, "--worker", w,
                    "--endpoints", dest_eps, "--lease-ttl", str(LEASE_TTL_S), *FAST,
                    "--topics", TOPIC,
                ]  # fmt: skip
                procs.append(spawn(net, net.members[member], tmp_path, f"worker-{w}", args))
            watcher = subprocess.Popen(
                [*helper, "watch", "--endpoints", dest_eps, "--kind", "rocketmq", "--job", job],
                stdout=subprocess.PIPE, env=_env(), cwd=REPO_ROOT, start_new_session=True,
            )  # fmt: skip
            procs.append(watcher)
            looks = Lines(watcher)

            def both_hold_queues() -> bool:
                held = owners(looks)
                return len(held) == QUEUES and len(set(held.values())) == 2

            wait_until(both_hold_queues, 60, lambda: f"both workers hold queues: {looks.last()}")
            history = History()
            producer = Producer(broker_a, history)

            def read_state() -> State:
                return {
                    f"queue:{q}": first_copies([int(m.body) for m in pull_all(broker_b, TOPIC, q)])
                    for q in range(QUEUES)
                }

            stored = [0]

            def goes_on(what: str) -> None:
                before = sum(len(pull_all(broker_b, TOPIC, q)) for q in range(QUEUES))

                def more() -> bool:
                    stored[0] = sum(len(pull_all(broker_b, TOPIC, q)) for q in range(QUEUES))
                    return stored[0] > before + 20

                wait_until(more, 30, what)
                history.observe(read_state())

            timeline: list[str] = []
            took: list[float] = []

            def cut(what: str, how: Callable[[int], None]) -> None:
                since = time.time()
                wait_until(both_hold_queues, 60, lambda: f"both hold queues: {looks.last()}")
                timeline.append(f"both workers held queues {time.time() - since:.1f} s later")
                old = next(w for p, w in owners(looks).items() if p.endswith("/0"))
                other = next(w for w in WORKERS if w != old)
                started = time.time()
                how(WORKERS[old])
                wait_until(
                    lambda: set(owners(looks).values()) == {other} and len(owners(looks)) == QUEUES,
                    TAKEOVER_S + 10,
                    lambda: f"{other} claims every queue when {old} is {what}: {looks.last()}",
                )
                took.append(time.time() - started)
                _, again = heal_at(net, started, WORKERS[old], broker_b, f"{old} {what}", goes_on)
                timeline.append(
                    f"{old} {what}: {other} claimed every queue {took[-1]:.2f} s after the cut; "
                    f"replicating again {again:.2f} s after the heal"
                )

            producer.start()
            goes_on("replicating")
            cut("cut off B's metaledger", off_metaledger(net, META))
            # off broker-b first, then B's metaledger, both brokers, A's metaledger (and all)
            cut("isolated", isolated(net, DEST_BROKER))
            producer.stop()
            wait_until(
                lambda: history.check(read_state()) == [],
                60,
                lambda: (
                    f"every acknowledged message in the destination: {history.check(read_state())[:5]}"
                ),
            )
            problems = history.check(read_state())
            senders = {net.ips[i]: w for w, i in WORKERS.items()}
            rows = list(looks.rows)
            for q in range(QUEUES):
                written = [
                    Written(
                        senders.get(m.born_host.ip, m.born_host.ip),
                        m.store_timestamp / 1000,
                        f"queue {q} offset {m.queue_offset}",
                    )
                    for m in pull_all(broker_b, TOPIC, q)
                ]
                problems += check_terms(claim_terms(rows, q), written)
            print(*timeline, sep="\n")
            print(
                f"{history.acknowledged()} sends acknowledged, {producer.errors} unanswered, "
                f"{stored[0]} messages; claims of queue 0: "
                f"{[(t.worker, t.token) for t in claim_terms(rows, 0)]}"
            )
            slow = [round(s, 2) for s in took if s > TAKEOVER_S]
            if slow:
                problems.append(f"takeovers slower than {TAKEOVER_S} s: {slow}")
            assert problems == [], problems[:20]
        finally:
            if producer is not None:
                producer.stopped.set()
            stop_all(list(reversed(procs)))
            dest.close()
