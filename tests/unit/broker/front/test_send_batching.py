"""Concurrent sends share store writes (BrokerCore's put pipeline) and keep their order."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from broker.core import INLINE_WRITE_MESSAGES
from broker.store import FlushMode, PutResult
from rmq.batch import BatchItem, encode_batch
from rmq.codes import RequestCode, ResponseCode
from rmq.message import StoredMessage, decode
from tests.unit.broker.front.conftest import TOPIC, Ctx, run_broker

SENDS = 64


@pytest.mark.parametrize("flush", [FlushMode.ASYNC_FLUSH, FlushMode.SYNC_FLUSH])
def test_concurrent_sends_are_written_in_batches_with_dense_offsets(
    tmp_path: Path, flush: FlushMode
) -> None:
    async def scenario(ctx: Ctx) -> None:
        store = ctx.replica.store
        batches: list[int] = []
        put_many = store.put_many

        def counting(
            requests: Sequence[Sequence[StoredMessage]], wait_durable: bool = True
        ) -> list[list[PutResult]]:
            batches.append(len(requests))
            return put_many(requests, wait_durable)

        store.put_many = counting  # type: ignore[method-assign]
        answers = await asyncio.gather(
            *(ctx.send(b"m%03d" % i, queue_id=i % 2) for i in range(SENDS))
        )
        assert [a.code for a in answers] == [0] * SENDS
        assert sum(batches) == SENDS and len(batches) < SENDS  # some puts shared a write
        for q in (0, 1):
            got = [decode(m) for m in store.get(TOPIC, q, 0, SENDS).messages]
            assert [m.queue_offset for m in got] == list(range(SENDS // 2))
            phys = [m.physical_offset for m in got]
            assert phys == sorted(phys)  # queue order is commit-log order
            mine = [a for a in answers if a.ext_fields["queueId"] == str(q)]
            assert sorted(int(a.ext_fields["queueOffset"]) for a in mine) == list(range(SENDS // 2))
        if flush is FlushMode.SYNC_FLUSH:  # every answered send was durable
            assert store.log.durable_offset == store.log.end_offset

    run_broker(tmp_path, scenario, flush_mode=flush)


def _batch(n: int, tag: str) -> bytes:
    return encode_batch([BatchItem(0, b"%s-%d" % (tag.encode(), i), {}) for i in range(n)])


@pytest.mark.parametrize("flush", [FlushMode.ASYNC_FLUSH, FlushMode.SYNC_FLUSH])
def test_a_large_batch_is_written_on_the_event_loop_and_a_small_one_on_the_pool(
    tmp_path: Path, flush: FlushMode
) -> None:
    """A batch of INLINE_WRITE_MESSAGES or more is stored on the loop's own thread (no hop
    to the store's pool); a smaller one on the pool. Both answer with dense offsets, and a
    failed write on the loop is the request's error, not the broker's end."""

    async def scenario(ctx: Ctx) -> None:
        store = ctx.replica.store
        loop_thread = threading.get_ident()
        threads: list[bool] = []  # per write: on the loop's thread?
        put_many = store.put_many
        fail = False

        def watching(
            requests: Sequence[Sequence[StoredMessage]], wait_durable: bool = True
        ) -> list[list[PutResult]]:
            threads.append(threading.get_ident() == loop_thread)
            if fail:
                raise OSError(28, "No space left on device")
            return put_many(requests, wait_durable)

        store.put_many = watching  # type: ignore[method-assign]
        big, small = INLINE_WRITE_MESSAGES, 3
        answers = []
        for n, tag in [(small, "a"), (big, "b"), (small, "c"), (big + 5, "d")]:
            r = await ctx.send(
                _batch(n, tag), code=RequestCode.SEND_BATCH_MESSAGE, batch=True, queue_id=1
            )
            assert r.code == ResponseCode.SUCCESS, r.remark
            answers.append(int(r.ext_fields["queueOffset"]))
        assert threads == [False, True, False, True]
        assert answers == [0, small, small + big, 2 * small + big]
        got = [decode(m) for m in store.get(TOPIC, 1, 0, 1000).messages]
        assert [m.queue_offset for m in got] == list(range(2 * small + 2 * big + 5))
        assert [m.body for m in got[small : small + 2]] == [b"b-0", b"b-1"]
        if flush is FlushMode.SYNC_FLUSH:
            assert store.log.durable_offset == store.log.end_offset

        fail = True
        end = store.log.end_offset
        r = await ctx.send(_batch(big, "e"), code=RequestCode.SEND_BATCH_MESSAGE, batch=True)
        assert r.code == ResponseCode.SYSTEM_ERROR  # as when a write on the pool fails
        assert threads[-1] is True and store.log.end_offset == end
        fail = False
        r = await ctx.send(_batch(big, "f"), code=RequestCode.SEND_BATCH_MESSAGE, batch=True)
        assert r.code == ResponseCode.SUCCESS, r.remark

    run_broker(tmp_path, scenario, flush_mode=flush)


@pytest.mark.parametrize("flush", [FlushMode.ASYNC_FLUSH, FlushMode.SYNC_FLUSH])
def test_a_written_batch_wakes_the_ha_streams_once_before_its_requests_resume(
    tmp_path: Path, flush: FlushMode
) -> None:
    """``appended`` (the HA master's wake) runs once per written batch, as soon as it is
    written: before any of the batch's sends gets its answer (under SYNC_FLUSH, before the
    batch's fdatasync), not once per send a loop turn later; a write that fails wakes
    nothing."""

    async def scenario(ctx: Ctx) -> None:
        core, store = ctx.replica.core, ctx.replica.store
        batches: list[int] = []
        wakes: list[tuple[int, int]] = []  # (batches written, sends answered) at each wake
        answered = 0
        put_many = store.put_many
        fail = False

        def counting(
            requests: Sequence[Sequence[StoredMessage]], wait_durable: bool = True
        ) -> list[list[PutResult]]:
            if fail:
                raise OSError(5, "Input/output error")
            batches.append(len(requests))
            return put_many(requests, wait_durable)

        def woken() -> None:
            wakes.append((len(batches), answered))

        store.put_many = counting  # type: ignore[method-assign]
        core.appended = woken

        async def send(i: int) -> int:
            nonlocal answered
            r = await ctx.send(b"w%03d" % i, queue_id=i % 2)
            answered += 1
            return r.code

        codes = await asyncio.gather(*(send(i) for i in range(SENDS)))
        assert codes == [0] * SENDS
        assert len(batches) < SENDS  # some sends shared a write
        assert [w[0] for w in wakes] == list(range(1, len(batches) + 1))  # one a batch
        assert wakes[0][1] == 0  # the first batch woke the streams before any answer

        fail = True
        r = await ctx.send(b"lost")
        assert r.code == ResponseCode.SYSTEM_ERROR
        assert len(wakes) == len(batches)  # the failed write woke nothing

    run_broker(tmp_path, scenario, flush_mode=flush)
