"""Concurrent sends share store writes (BrokerCore's put pipeline) and keep their order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from broker.store import FlushMode, PutResult
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
