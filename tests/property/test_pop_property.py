"""POP consumption under any mix of pops, acks, changes of invisibility and passing time,
against a simple model (broker.pop.service over a real store, the clock faked):

* a message is never handed out while it is invisible, and every delivery's attempt is one
  more than the last;
* a handle works (ack, change) exactly while it is its message's newest one;
* FIFO: a message is never handed out while an earlier one of its queue is in flight;
* in the end, once time passes, every matching message is acked or dead-lettered after
  ``max_attempts`` deliveries, and the group's low (its consumer offset) is the queue's end.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import broker.pop.service as service_module
from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.pop.errors import InvalidReceiptHandle
from broker.pop.service import Popped, PopService
from broker.replication import Standalone
from broker.state.offsets import InMemoryOffsetStore
from broker.store import MessageStore
from broker.topics import TopicConfig, TopicTable
from rmq.message import StoredMessage

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_ATTEMPTS = 3
T0 = 1_700_000_000_000

op = st.one_of(
    st.tuples(st.just("pop"), st.integers(1, 4), st.integers(1, 50)),
    st.tuples(st.just("ack"), st.integers(0, 30)),
    st.tuples(st.just("change"), st.integers(0, 30), st.integers(1, 50)),
    st.tuples(st.just("time"), st.integers(1, 60)),
)


@dataclass
class Model:
    fifo: bool
    expression: str
    matching: set[int]
    visible_at: dict[int, int] = field(default_factory=dict)  # offset in flight -> instant
    attempts: dict[int, int] = field(default_factory=dict)
    newest: dict[int, str] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    handles: list[tuple[int, str]] = field(default_factory=list)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


async def scenario(
    root: str, tags: list[str], fifo: bool, expression: str, ops: list[tuple[object, ...]]
) -> None:
    config = BrokerConfig(broker_name="b", data_dir=root, listen_port=10911)
    store = MessageStore(root + "/store")
    topics = TopicTable(None)
    topics.put(TopicConfig("T", 1, 1))
    core = BrokerCore(config, store, Standalone(), topics, InMemoryOffsetStore())
    pop = PopService(core, root + "/pop", "b")
    pop.set_max_attempts("G", MAX_ATTEMPTS)
    for i, tag in enumerate(tags):
        await core.put(StoredMessage("T", f"m{i}".encode(), properties={"TAGS": tag}))
    matching = {i for i, t in enumerate(tags) if expression == "*" or t == expression}
    model = Model(fifo, expression, matching)
    clock = Clock()
    try:
        with mock.patch.object(service_module, "now_ms", clock):
            for o in ops:
                await step(pop, model, clock, o)
            for _ in range(3 * MAX_ATTEMPTS + len(tags) + 2):  # drain: time passes, all acked
                clock.now += 1000
                got = await pop.pop("G", "T", 0, 4, 100, fifo=fifo, expression=expression)
                check_batch(model, clock, got)
                for p in got:
                    await pop.ack("G", "T", p.handle)
                    model.done.add(p.message.queue_offset)
                    model.visible_at.pop(p.message.queue_offset)
        dead = {off for off in matching - model.done}
        for off in dead:  # only what reached max attempts went to the DLQ
            assert model.attempts.get(off) == MAX_ATTEMPTS, (off, model.attempts)
        assert store.max_offset("%DLQ%G", 0) == len(dead)
        assert core.offsets.load("G", "T", 0) == len(tags)
    finally:
        pop.close()
        core.close()
        store.close()


def maybe_dead(model: Model, clock: Clock, off: int) -> bool:
    """Delivered MAX_ATTEMPTS times and visible again: a pop may have dead-lettered it."""
    return model.attempts.get(off) == MAX_ATTEMPTS and model.visible_at.get(off, 0) <= clock.now


def check_batch(model: Model, clock: Clock, got: list[Popped]) -> None:
    offsets = [p.message.queue_offset for p in got]
    for off in [o for o in model.visible_at if maybe_dead(model, clock, o)]:
        assert off not in offsets, f"{off} handed out more than {MAX_ATTEMPTS} times"
    if model.fifo:  # earlier ones of the queue are done, or in this batch, before it
        assert offsets == sorted(offsets)
        for off in offsets:
            earlier = [
                o
                for o in model.visible_at
                if o < off and o not in offsets and not maybe_dead(model, clock, o)
            ]
            assert not earlier, f"FIFO: {off} handed out while {earlier} in flight"
    for p in got:
        check_delivery(model, clock, p)


def check_delivery(model: Model, clock: Clock, p: Popped) -> None:
    off = p.message.queue_offset
    assert off in model.matching and off not in model.done
    assert model.visible_at.get(off, 0) <= clock.now, "handed out while invisible"
    assert p.attempt == model.attempts.get(off, 0) + 1
    assert p.message.reconsume_times == p.attempt - 1
    model.attempts[off] = p.attempt
    model.newest[off] = p.handle
    model.handles.append((off, p.handle))
    model.visible_at[off] = p.visible_at_ms


async def step(pop: PopService, model: Model, clock: Clock, o: tuple[object, ...]) -> None:
    kind = o[0]
    if kind == "time":
        clock.now += int(o[1])  # type: ignore[call-overload]
    elif kind == "pop":
        n, inv = int(o[1]), int(o[2])  # type: ignore[call-overload]
        got = await pop.pop("G", "T", 0, n, inv, fifo=model.fifo, expression=model.expression)
        check_batch(model, clock, got)
        for p in got:
            assert p.visible_at_ms == clock.now + inv
    elif model.handles:
        off, handle = model.handles[int(o[1]) % len(model.handles)]  # type: ignore[call-overload]
        live = off in model.visible_at and model.newest[off] == handle
        try:
            if kind == "ack":
                await pop.ack("G", "T", handle)
                model.done.add(off)
                model.visible_at.pop(off)
            else:
                inv = int(o[2])  # type: ignore[call-overload]
                p = await pop.change_invisible("G", "T", handle, inv)
                model.visible_at[off] = p.visible_at_ms
                model.newest[off] = p.handle
                model.handles.append((off, p.handle))
                assert p.attempt == model.attempts[off]
        except InvalidReceiptHandle:
            if live and maybe_dead(model, clock, off):
                model.visible_at.pop(off)  # it was: in the DLQ now
                return
            assert not live, f"{kind} refused a live handle of {off}"
        else:
            assert live, f"{kind} took a stale handle of {off}"


@SETTINGS
@given(
    st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=8),
    st.booleans(),
    st.sampled_from(["*", "a"]),
    st.lists(op, max_size=40),
)
def test_pop_against_a_model(
    tags: list[str], fifo: bool, expression: str, ops: list[tuple[object, ...]]
) -> None:
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(scenario(root, tags, fifo, expression, ops))
