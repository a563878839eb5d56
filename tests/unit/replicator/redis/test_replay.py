"""Replayer (replicator/redis/replay.py) with an in-memory target: any interleaving of the
queues that keeps each queue's order, with redeliveries, gives the state of the stream order."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from replicator.redis.errors import ProtocolError
from replicator.redis.events import EventBuilder, OutMessage, encode_command
from replicator.redis.replay import Replayer, decode_command, event_key

REPLID = "r" * 40


class FakeTarget:
    """A few Redis commands on dicts, one per db."""

    def __init__(self) -> None:
        self.dbs: dict[int, dict[bytes, bytes]] = {}
        self.log: list[tuple[int, list[bytes]]] = []

    def db(self, n: int) -> dict[bytes, bytes]:
        return self.dbs.setdefault(n, {})

    def execute(self, db: int, argv: Sequence[bytes]) -> None:
        self.log.append((db, list(argv)))
        d = self.db(db)
        name, args = argv[0].upper(), list(argv[1:])
        if name == b"SET":
            d[args[0]] = args[1]
        elif name == b"MSET":
            for i in range(0, len(args), 2):
                d[args[i]] = args[i + 1]
        elif name in (b"DEL", b"UNLINK"):
            for k in args:
                d.pop(k, None)
        elif name == b"INCR":
            d[args[0]] = b"%d" % (int(d.get(args[0], b"0")) + 1)
        elif name == b"RENAME":
            d[args[1]] = d.pop(args[0])
        elif name == b"FLUSHALL":
            self.dbs.clear()
        elif name == b"SWAPDB":
            a, b = int(args[0]), int(args[1])
            self.dbs[a], self.dbs[b] = self.db(b), self.db(a)
        elif name == b"MOVE":
            if args[0] in d and args[0] not in self.db(int(args[1])):
                self.db(int(args[1]))[args[0]] = d.pop(args[0])
        else:
            raise AssertionError(f"fake target does not know {name!r}")

    def flush_all(self) -> None:
        self.dbs.clear()

    def state(self) -> dict[int, dict[bytes, bytes]]:
        return {n: dict(d) for n, d in self.dbs.items() if d}


def stream(rng: random.Random, n_cmds: int) -> list[list[bytes]]:
    keys = [b"k%d" % i for i in range(12)]
    out: list[list[bytes]] = []
    live: set[bytes] = set()
    db = 0
    for _ in range(n_cmds):
        r = rng.random()
        k = rng.choice(keys)
        if r < 0.35:
            out.append([b"SET", k, b"%d" % rng.randrange(100)])
            live.add(k)
        elif r < 0.45:
            ks = rng.sample(keys, 3)
            out.append([b"MSET", *[x for kk in ks for x in (kk, b"v")]])
        elif r < 0.55:
            out.append([b"DEL", *rng.sample(keys, 3)])
        elif r < 0.65:
            out.append([b"INCR", b"n" + k])
        elif r < 0.72:
            out.append([b"SELECT", b"%d" % (db := rng.randrange(3))])
        elif r < 0.77:
            out.append([b"FLUSHALL"])
        elif r < 0.82:
            out.append([b"SWAPDB", b"0", b"%d" % rng.randrange(1, 3)])
        elif r < 0.88:
            out.append([b"MOVE", k, b"%d" % ((db + 1) % 3)])
        elif r < 0.94:
            # RENAME of a key set just before (an error on a missing key is never propagated)
            out.append([b"SET", k, b"r"])
            out.append([b"RENAME", k, rng.choice(keys) + b"x"])
        else:
            out.append([b"MULTI"])
            out.append([b"SET", k, b"t"])
            out.append([b"SELECT", b"%d" % (db := rng.randrange(3))])
            out.append([b"INCR", b"t" + k])
            out.append([b"EXEC"])
    return out


def build(cmds: list[list[bytes]], queues: int) -> list[OutMessage]:
    b = EventBuilder("T", queues, REPLID)
    offset, out = 0, []
    for argv in cmds:
        end = offset + len(encode_command(argv))
        out += b.on_command(argv, offset, end).messages
        offset = end
    return out


def reference(cmds: list[list[bytes]]) -> dict[int, dict[bytes, bytes]]:
    t, db = FakeTarget(), 0
    for argv in cmds:
        if argv[0] == b"SELECT":
            db = int(argv[1])
        elif argv[0] not in (b"MULTI", b"EXEC"):
            t.execute(db, argv)
    return t.state()


def interleave(
    msgs: list[OutMessage], rng: random.Random, redeliver: float = 0.0
) -> list[OutMessage]:
    """Each queue's messages in order (with some redelivered), the queues shuffled together."""
    per_q: dict[int, list[OutMessage]] = {}
    for m in msgs:
        per_q.setdefault(m.queue_id, []).append(m)
        if rng.random() < redeliver:
            per_q[m.queue_id].append(m)
    cursors = dict.fromkeys(per_q, 0)
    out = []
    while cursors:
        q = rng.choice(sorted(cursors))
        out.append(per_q[q][cursors[q]])
        cursors[q] += 1
        if cursors[q] == len(per_q[q]):
            del cursors[q]
    return out


@pytest.mark.parametrize("seed", range(40))
def test_any_interleaving_with_redeliveries_gives_the_stream_state(seed: int) -> None:
    rng = random.Random(seed)
    cmds = stream(rng, 60)
    queues = rng.choice([1, 2, 3, 5])
    msgs = build(cmds, queues)
    target = FakeTarget()
    replayer = Replayer(target)
    for m in interleave(msgs, rng, redeliver=0.1):
        replayer.offer_message(m)
    assert replayer.pending == 0
    assert target.state() == reference(cmds)


@pytest.mark.parametrize("seed", range(20))
def test_resends_after_a_psync2_rename_are_redeliveries(seed: int) -> None:
    """``+CONTINUE <newid>`` from a checkpoint: what was sent after it under the old replid
    comes again under the new one (same offsets), then the stream goes on (twice: a second
    failover renames again)."""
    rng = random.Random(seed)
    cmds = stream(rng, 80)
    queues = rng.choice([1, 2, 3])
    ids = [REPLID, "s" * 40, "t" * 40]
    b = EventBuilder("T", queues, ids[0])
    offset, boundary = 0, (0, 0)
    per_q: dict[int, list[OutMessage]] = {}
    sent_since: list[OutMessage] = []
    resent = 0
    index_at = {0: 0}  # stream offset of a command's start → its index in cmds
    renames = sorted(rng.sample(range(10, len(cmds) - 5), 2))
    i = 0
    while i < len(cmds):
        if renames and i == renames[0]:
            renames.pop(0)
            # the link broke: resume at the last boundary under the next id
            b.on_continue(boundary[0], boundary[1], ids[2 - len(renames)])
            offset, i = boundary[0], index_at[boundary[0]]
            resent += len(sent_since)
            sent_since = []
        argv = cmds[i]
        end = offset + len(encode_command(argv))
        batch = b.on_command(argv, offset, end)
        for m in batch.messages:
            per_q.setdefault(m.queue_id, []).append(m)
            sent_since.append(m)
        if batch.boundary == end and rng.random() < 0.3:  # a checkpoint was committed here
            boundary, sent_since = (end, b.db), []
        offset = end
        i += 1
        index_at[end] = i
    target = FakeTarget()
    replayer = Replayer(target)
    cursors = dict.fromkeys(per_q, 0)
    while cursors:
        q = rng.choice(sorted(cursors))
        replayer.offer_message(per_q[q][cursors[q]])
        cursors[q] += 1
        if cursors[q] == len(per_q[q]):
            del cursors[q]
    assert replayer.pending == 0
    assert target.state() == reference(cmds)
    assert replayer.duplicates == resent
    # a rename keeps the history: every message names the first id
    assert {m.properties["REDIS_REPLID"] for q in per_q.values() for m in q} == {ids[0]}


def test_after_a_rename_another_command_at_a_resent_offset_is_applied() -> None:
    """kill -9 of a master: the replicator sent ``INCR a`` at offset 20 (old replid), the
    promoted replica never had it and took ``INCR b`` at offset 20 (new replid)."""
    old = EventBuilder("T", 1, REPLID)
    sent = old.on_command([b"SET", b"k", b"1"], 0, 20).messages
    sent += old.on_command([b"INCR", b"a"], 20, 40).messages
    new = EventBuilder("T", 1, REPLID)
    new.on_continue(20, 0, "s" * 40)
    sent += new.on_command([b"INCR", b"b"], 20, 40).messages
    target = FakeTarget()
    replayer = Replayer(target)
    for m in sent:
        replayer.offer_message(m)
    assert target.state() == {0: {b"k": b"1", b"a": b"1", b"b": b"1"}}
    assert replayer.duplicates == 0


def test_a_new_replid_after_snapshot_begin_is_a_new_history() -> None:
    b = EventBuilder("T", 1, REPLID)
    first = b.on_command([b"INCR", b"n"], 0, 20).messages
    snap = b.begin_snapshot("s" * 40, 0).messages + b.end_snapshot().messages
    again = b.on_command([b"INCR", b"n"], 0, 20).messages  # offset 0 again: another history
    target = FakeTarget()
    replayer = Replayer(target)
    for m in first + snap + again:
        replayer.offer_message(m)
    assert target.state() == {0: {b"n": b"1"}} and replayer.duplicates == 0


def test_set_flushall_set_in_any_order_of_queues() -> None:
    cmds = [[b"SET", b"k", b"1"], [b"SET", b"other", b"1"], [b"FLUSHALL"], [b"SET", b"k", b"2"]]
    msgs = build(cmds, 4)
    for order in range(20):
        target = FakeTarget()
        replayer = Replayer(target)
        for m in interleave(msgs, random.Random(order)):
            replayer.offer_message(m)
        assert target.state() == {0: {b"k": b"2"}}
        # FLUSHALL went to 4 queues and was applied once
        assert sum(1 for _db, argv in target.log if argv == [b"FLUSHALL"]) == 1


def test_a_copy_waits_at_the_barrier_until_all_copies_arrived() -> None:
    msgs = build([[b"FLUSHALL"]], 3)
    target = FakeTarget()
    replayer = Replayer(target)
    replayer.offer_message(msgs[0])
    replayer.offer_message(msgs[1])
    assert target.log == [] and replayer.pending == 2
    replayer.offer_message(msgs[2])
    assert target.log == [(0, [b"FLUSHALL"])] and replayer.pending == 0


def test_snapshot_begin_empties_the_target_and_entries_replay() -> None:
    b = EventBuilder("T", 2, REPLID)
    msgs = list(b.begin_snapshot("s" * 40, 77).messages)
    msgs += b.snapshot_entry(1, [b"SET", b"a", b"1"]).messages
    msgs += b.snapshot_entry(1, [b"SET", b"b", b"2"]).messages
    msgs += b.end_snapshot().messages
    target = FakeTarget()
    target.execute(0, [b"SET", b"stale", b"x"])
    replayer = Replayer(target)
    for m in msgs:
        replayer.offer_message(m)
    assert target.state() == {1: {b"a": b"1", b"b": b"2"}}
    # the two entries have distinct dedupe keys although they share replid and offset
    assert len({event_key(m.properties) for m in msgs}) == 4


def test_a_second_snapshot_from_the_same_point_in_another_order_is_applied_whole() -> None:
    """A replicator killed in the middle of a full sync gets the next one from the same replid
    and offset (nothing written in between), its RDB listing the keys in another order: with
    its own REDIS_SNAPSHOT id nothing of it is taken for a duplicate of the first."""
    keys = [b"a", b"b", b"c", b"d"]

    def snapshot(
        builder: EventBuilder, order: list[bytes], sid: str, whole: bool
    ) -> list[OutMessage]:
        msgs = list(builder.begin_snapshot("s" * 40, 77, sid).messages)
        for k in order:
            msgs += builder.snapshot_entry(0, [b"SET", k, k.upper()]).messages
        if whole:
            msgs += builder.end_snapshot().messages
        return msgs

    first = snapshot(EventBuilder("T", 2, REPLID), keys, "0.a1", whole=False)[:-2]  # killed
    second = snapshot(EventBuilder("T", 2, REPLID), keys[::-1], "0.b2", whole=True)
    target = FakeTarget()
    replayer = Replayer(target)
    for m in first + second:
        replayer.offer_message(m)
    assert target.state() == {0: {k: k.upper() for k in keys}}
    assert replayer.duplicates == 0
    assert {m.properties["REDIS_SNAPSHOT"] for m in second} == {"0.b2"}


def test_decode_command_round_trips_and_rejects_garbage() -> None:
    argv = [b"SET", b"k\r\n", b"", b"\x00\xff"]
    assert decode_command(encode_command(argv)) == argv
    for bad in (b"", b"+OK\r\n", b"*1\r\n$3\r\nab\r\n", b"*1\r\n$2\r\nab\r\nX", b"*1\r\n:1\r\n"):
        with pytest.raises(ProtocolError):
            decode_command(bad)


def test_a_command_longer_than_a_message_goes_as_fragments_and_is_replayed_once() -> None:
    b = EventBuilder("T", 2, REPLID, max_body_bytes=1000, fragment_bytes=700)
    big = bytes(range(256)) * 20  # 5 KiB: 8 fragments
    msgs = list(b.on_command([b"SET", b"big", big], 0, 5200).messages)
    frags = [m.properties["REDIS_FRAGMENT"] for m in msgs]
    assert frags == [f"{i}/{len(msgs)}" for i in range(1, len(msgs) + 1)] and len(msgs) > 1
    assert len({m.queue_id for m in msgs}) == 1 and all(len(m.body) <= 700 for m in msgs)
    assert b"".join(m.body for m in msgs) == encode_command([b"SET", b"big", big])

    target = FakeTarget()
    r = Replayer(target)
    q = msgs[0].queue_id
    for m in msgs[:3]:  # a restart cut the first attempt short ...
        r.offer(q, m.body, m.properties)
    for m in msgs + msgs:  # ... then everything came again, twice
        r.offer(q, m.body, m.properties)
    assert target.state() == {0: {b"big": big}}
    assert [argv[0] for _, argv in target.log] == [b"SET"] and r.duplicates == 1
    with pytest.raises(ProtocolError, match="out of order"):
        r.offer(q, msgs[2].body, msgs[2].properties)
