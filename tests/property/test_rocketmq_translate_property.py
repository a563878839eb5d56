"""Offset translation against a model of a replication (issue 19 item 4: "a consumer group
moved to the destination resumes with no gap").

The model: a few source queues, each message mapped to a destination queue (by key: the same
queue on every send); sends from the source queues interleaved at random, each stored at once
at the end of its destination queue (one lane per destination queue keeps each source queue's
messages in order); acks delivered in any order, each recording a sync in the worker's live
checkpoint; commits at random moments (never past an unacked message); crashes that drop
the live state and resume from the committed checkpoint (re-sending, so duplicates). At a
random moment a consumer group with random source offsets fails over, translated through the
*committed* checkpoints (what metaledger holds); then replication runs to the end.

* no gap: every message at or after a group offset that goes to a destination queue has a
  copy at or after the translated offset of that queue (None: the queue's start);
* exact: without crashes, when the sync used is the last message before the group offset
  that went to that queue, everything before the translated offset was consumed and
  everything from it was not.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.rocketmq.checkpoint import QueueCheckpoint, translate

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class SourceQueue:
    partition: str
    dests: list[int]  # message offset -> destination queue
    sent: int = 0  # the next message this run sends
    committed: bytes = b""
    live: QueueCheckpoint = field(default_factory=lambda: QueueCheckpoint(0, dest_topic="D"))
    unacked: list[tuple[int, int, int]] = field(default_factory=list)  # (offset, queue, dest)

    def __post_init__(self) -> None:
        self.committed = self.live.encode()


class Replication:
    def __init__(
        self, rnd: random.Random, n_src: int, n_dest: int, base: int, by_key: bool
    ) -> None:
        self.base = base
        self.queues = []
        for i in range(n_src):
            n = rnd.randint(1, 120)
            if by_key:  # hash by key: any destination queue
                q = SourceQueue(f"T/b-{i % 2}/{i}", [rnd.randrange(n_dest) for _ in range(n)])
                q.live.feed(range(n_dest))
            else:  # the same index (modulo the destination's queues)
                q = SourceQueue(f"T/b-{i % 2}/{i}", [i % n_dest] * n)
                q.live.feed([i % n_dest])
            q.committed = q.live.encode()
            self.queues.append(q)
        self.dest: list[list[tuple[int, int]]] = [[] for _ in range(n_dest)]
        self.crashed = False

    def send(self, k: int) -> None:
        q = self.queues[k]
        if q.sent < len(q.dests):
            d_queue = q.dests[q.sent]
            self.dest[d_queue].append((k, q.sent))
            q.unacked.append((q.sent, d_queue, self.base + len(self.dest[d_queue]) - 1))
            q.sent += 1

    def ack(self, k: int, rnd: random.Random) -> None:
        q = self.queues[k]
        if q.unacked:
            offset, d_queue, d = q.unacked.pop(rnd.randrange(len(q.unacked)))
            q.live.record_sync(d_queue, offset, d)

    def commit(self, k: int) -> None:
        q = self.queues[k]
        q.live.next_offset = min([o for o, _, _ in q.unacked] + [q.sent])
        q.committed = q.live.encode()

    def crash(self, k: int) -> None:
        q = self.queues[k]
        q.live = QueueCheckpoint.decode(q.committed)
        q.sent, q.unacked, self.crashed = q.live.next_offset, [], True


@SETTINGS
@given(
    seed=st.integers(0, 2**32),
    n_src=st.integers(1, 3),
    n_dest=st.integers(1, 3),
    crashes=st.booleans(),
    base=st.integers(0, 1000),
    by_key=st.booleans(),
)
def test_translated_offsets_skip_nothing_the_group_had_not_consumed(
    seed: int, n_src: int, n_dest: int, crashes: bool, base: int, by_key: bool
) -> None:
    rnd = random.Random(seed)
    r = Replication(rnd, n_src, n_dest, base, by_key)
    queues, dest = r.queues, r.dest
    for _ in range(rnd.choice([rnd.randint(0, 60), rnd.randint(0, 500)])):
        k, x = rnd.randrange(n_src), rnd.random()
        if x < 0.45:
            r.send(k)
        elif x < 0.85:
            r.ack(k, rnd)
        elif x < 0.98 or not crashes:
            r.commit(k)
        else:
            r.crash(k)

    # the failover: a group at random source offsets, translated through the committed state
    offsets = {q.partition: rnd.randint(0, len(q.dests)) for q in queues if rnd.random() < 0.9}
    committed = {q.partition: QueueCheckpoint.decode(q.committed) for q in queues}
    resume = translate(offsets, committed)
    ends = [base + len(entries) for entries in dest]

    for k in range(n_src):  # replication runs on to the end
        while queues[k].sent < len(queues[k].dests):
            r.send(k)

    for d_queue, at in resume.items():
        start = 0 if at is None else at - base
        assert at is None or at <= ends[d_queue], "resumes past the end of the queue"
        after = set(dest[d_queue][start:])
        for k, q in enumerate(queues):
            g = offsets.get(q.partition)
            for m in range(len(q.dests)):
                if q.dests[m] == d_queue and (g is None or m >= g):
                    assert (k, m) in after, f"gap: message {m} of {q.partition} skipped"

    if r.crashed:
        return
    for k, q in enumerate(queues):  # exact, per source queue
        g = offsets.get(q.partition)
        ckpt = committed[q.partition]
        for d_queue, history in ckpt.syncs.items():
            if g is None:
                continue
            before = [m for m in range(g) if q.dests[m] == d_queue]
            used = [s for s, _ in history if s < g]
            if not before or not used or used[-1] != before[-1]:
                continue
            at = ckpt.resume_offset(d_queue, g)
            assert at is not None
            mine = [(i, m) for i, (kk, m) in enumerate(dest[d_queue]) if kk == k]
            assert all(m < g for i, m in mine if i < at - base), "skipped"
            assert all(m >= g for i, m in mine if i >= at - base), "a duplicate"
