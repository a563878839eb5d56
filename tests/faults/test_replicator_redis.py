"""The Redis replicator under faults while writes go on: everything the source acknowledged
reaches the destination, per key in order.

A real redis-server is the source (``appendfsync always``: what it acknowledged survives a
kill -9 of it), two ``metaledger replicate redis`` workers (one active, one standby) store
their lease and checkpoint in a 3-node metaledger cluster and send into a real broker's
topic, the destination; the topic is read back and replayed into a second redis-server, as a
consumer would. A writer keeps writing numbered values (``SET``, ``RPUSH``, ``INCR``; see
:mod:`tests.faults.replicator_checker`) with 1 s deadlines, recording which the source
acknowledged, while in turn:

1. the metaledger leader is paused (SIGSTOP, a node cut off without a word) and then killed,
   and comes back;
2. the active worker is killed (SIGKILL), the standby takes over, the killed one comes back
   as the standby;
3. the source is killed (SIGKILL) and restarted from its append-only file.

After each, replication must go on (new messages in the topic) and what the destination
holds is recorded (outside a full sync's replay, which empties the target first). At the
end the destination equals the source (``DEBUG DIGEST``) and the checker finds no
acknowledged write lost, none out of order, nothing taken back.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.faults.inject import pause_then_kill_leader
from tests.faults.replicator_checker import History, Kind, State
from tests.harness import wait_until
from tests.integration.replicator.broker_env import QUEUES, Env, broker_env
from tests.integration.replicator.redis.test_replicate import (
    FAST,
    Oracle,
    ReplicatorProcess,
    status,
    wait_replicated,
)
from tests.redis_harness import RedisServer

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.faults, pytest.mark.slow]

#: keys of each kind the writer rotates through
KEYS = 4
KINDS = (Kind.REGISTER, Kind.LIST, Kind.COUNTER)
#: short enough for a quick takeover, long enough for a keep-alive on 2 busy cores
LEASE_TTL_S = 3


class Writer(threading.Thread):
    """One write at a time through one connection, no retries (redis-py retries by
    default, and a retried RPUSH or INCR is another write); after an error, a new
    connection."""

    def __init__(self, source: RedisServer, history: History) -> None:
        super().__init__(name="writer", daemon=True)
        self.source = source
        self.history = history
        self.stopped = threading.Event()
        self.errors = 0

    def run(self) -> None:
        r: redis.Redis | None = None
        i = 0
        while not self.stopped.is_set():
            kind = KINDS[(i // KEYS) % len(KINDS)]
            name = f"{kind.value}:{i % KEYS}"
            i += 1
            if r is None:
                r = self.source.client(
                    socket_timeout=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
                )
            number = self.history.next_number(name, kind)
            try:
                if kind is Kind.REGISTER:
                    r.set(name, number)
                elif kind is Kind.LIST:
                    r.rpush(name, number)
                else:
                    number = int(r.incr(name))
            except redis.RedisError:  # no answer, or the source not there: it may have landed
                self.errors += 1
                r.close()
                r = None
                self.stopped.wait(0.05)
                continue
            self.history.ack(name, number)
            self.stopped.wait(0.003)  # a steady trickle, not a flood on 2 shared cores
        if r is not None:
            r.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join(10)
        assert not self.is_alive(), "the writer did not stop"


class Destination(Oracle):
    """The oracle, also telling whether the target is between snapshots: a full sync empties
    it (SNAPSHOT_BEGIN) and fills it again up to SNAPSHOT_END, and what it holds in between is
    no state the source ever had, so nothing is recorded then."""

    def __init__(self, env: Env, topic: str, target: RedisServer) -> None:
        super().__init__(env, topic, target)
        self.last_marker = [""] * QUEUES

    def record(self, queue: int, properties: dict[str, str]) -> None:
        tag = properties.get("TAGS", "")
        if tag.startswith("SNAPSHOT_"):
            self.last_marker[queue] = tag

    def settled(self) -> bool:
        return self.replayer.pending == 0 and all(m == "SNAPSHOT_END" for m in self.last_marker)


def read_state(target: RedisServer, history: History) -> State:
    r = target.client()
    state: dict[str, int | list[int] | None] = {}
    for name, h in history.keys.items():
        if h.kind is Kind.LIST:
            state[name] = [int(v) for v in r.lrange(name, 0, -1)]
        else:
            v = r.get(name)
            state[name] = None if v is None else int(v)
    return state


@pytest.fixture
def env3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """A 3-node metaledger cluster and one broker registered in it."""
    yield from broker_env(tmp_path_factory, nodes=3)


def test_every_acknowledged_write_reaches_the_destination_through_faults(
    env3: Env, tmp_path: Path
) -> None:
    env = env3
    source = RedisServer(
        tmp_path, {**FAST, "appendonly": "yes", "appendfsync": "always"}, name="source"
    )
    target = RedisServer(tmp_path, {"enable-debug-command": "yes"}, name="target")
    topic, job = env.topic("redis-faults"), "faults"
    history = History()
    writer = Writer(source, history)
    workers = {
        w: ReplicatorProcess(env, source, topic, job, w, lease_ttl=LEASE_TTL_S) for w in "ab"
    }
    oracle = Destination(env, topic, target)

    def active() -> str | None:
        st = status(env, job)
        return None if st is None else str(st["worker"])

    def taken_over(dead: str) -> bool:
        return active() not in (None, dead)

    def goes_on(what: str) -> None:
        """Replication goes on (``what``): new messages come into the topic; what the destination
        holds is recorded."""
        before = oracle.total()
        wait_until(
            lambda: oracle.catch_up() >= 0 and oracle.total() > before + 20 and oracle.settled(),
            30,
            what,
        )
        history.observe(read_state(target, history))

    hold = threading.Event()  # never set: a fault lasts its time while the writes go on

    try:
        wait_until(lambda: active() is not None, 30, "a worker is active")
        writer.start()
        goes_on("replicating")

        # 1. the metaledger leader paused past a lease's TTL, then killed; back
        pause_then_kill_leader(env.node, LEASE_TTL_S + 1, 2, goes_on)

        # 2. the active worker killed, the standby takes over; twice, so each has been both
        for _ in range(2):
            first = active()
            assert first is not None
            workers[first].stop(signal.SIGKILL)
            wait_until(partial(taken_over, first), 30, "the standby takes over")
            goes_on("replicating from the standby")
            workers[first].start()

        # 3. the source killed and restarted from its append-only file
        source.kill()
        hold.wait(1)
        source.start()
        goes_on("replicating from the restarted source")

        writer.stop()
        assert writer.errors > 0, "the source's restart cut the writer off"
        wait_replicated(env, job, source, oracle)
        problems = history.check(read_state(target, history))
        print(
            f"{history.acknowledged()} writes acknowledged, {writer.errors} unanswered, "
            f"{oracle.total()} messages, {oracle.replayer.duplicates} duplicates"
        )
        assert problems == [], problems[:20]
    finally:
        writer.stopped.set()
        for w in workers.values():
            w.stop()
        source.close()
        target.close()
