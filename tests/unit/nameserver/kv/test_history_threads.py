"""The kv history read without a lock while the apply thread writes it: a reader of one
revision sees the same answer throughout, whatever the writer appends, prunes (compactions
up to that revision) or re-creates meanwhile."""

from __future__ import annotations

import random
import threading

from nameserver.kinds import REGISTRY
from nameserver.kv.history import KvHistory
from nameserver.state.machine import CapturedImage, MetadataStateMachine
from raftlog import Change
from tests.property.test_kv_history_property import compact, delete, put

KEYS = [b"t/%d" % i for i in range(8)]


def test_a_reader_of_one_revision_sees_one_answer_while_apply_goes_on() -> None:
    machine = MetadataStateMachine.empty(REGISTRY)
    history = KvHistory(machine.image, lambda: machine.image)
    rng = random.Random(7)
    offset = 0

    def step(entry: object) -> None:
        nonlocal offset
        offset += 1
        before = CapturedImage(machine.image)
        effects, _ = machine.apply(offset, 1, [entry])  # type: ignore[list-item]
        machine.publish()
        history.on_applied(before, offset, [Change(offset, 1, 0, effects)])

    for i in range(200):
        key = rng.choice(KEYS)
        step(delete(key, b"") if i % 3 == 0 else put(key, b"v%d" % i))
    pinned = offset
    want = [(kv.key, kv.value) for kv in history.view(pinned).range(b"t/", b"t0")]
    stop = threading.Event()
    seen: list[object] = []

    def reader() -> None:
        while not stop.is_set():
            got = [(kv.key, kv.value) for kv in history.view(pinned).range(b"t/", b"t0")]
            if got != want:
                seen.append(got)
            one = history.view(pinned).get(KEYS[0])
            if (one.value if one else None) != dict(want).get(KEYS[0]):
                seen.append(("get", one))

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(3000):
            key = rng.choice(KEYS)
            step(
                delete(key, b"\x00")
                if i % 97 == 0
                else delete(key, b"")
                if i % 3 == 0
                else put(key, b"w%d" % i)
            )
            if i == 1500:
                step(compact(pinned))  # prunes everything below the pinned revision
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not seen, seen[:3]
    assert history.floor == pinned
