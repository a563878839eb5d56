"""PopService.change_invisible with 0 ms makes the message visible again at once (RocketMQ's
proxy accepts 0 for ChangeInvisibleDuration; the 5.x Node.js push consumer sends 0 for a failed
message when it has no exponential backoff): the next pop delivers it as attempt 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.pop.errors import IllegalInvisibleTime
from tests.unit.broker.front.conftest import TOPIC, Ctx, run_broker


def test_change_invisible_to_zero_redelivers_at_once(tmp_path: Path) -> None:
    async def scenario(ctx: Ctx) -> None:
        assert (await ctx.send(b"again")).code == 0
        pop = ctx.replica.pop
        (first,) = await pop.pop("G", TOPIC, -1, 1, 60_000)
        assert first.attempt == 1 and await pop.pop("G", TOPIC, -1, 1, 60_000) == []
        await pop.change_invisible("G", TOPIC, first.handle, 0)
        (second,) = await pop.pop("G", TOPIC, -1, 1, 60_000)
        assert (second.message.body, second.attempt) == (b"again", 2)
        with pytest.raises(IllegalInvisibleTime):
            await pop.change_invisible("G", TOPIC, second.handle, -1)
        with pytest.raises(IllegalInvisibleTime):
            await pop.pop("G", TOPIC, -1, 1, 0)  # a pop still needs a time in flight

    run_broker(tmp_path, scenario)
