"""GET_CONSUME_STATS' body (rmq/consume_stats.py): any rows round-trip; any bytes, mutations
of a real body and deep nesting raise only ConsumeStatsError."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rmq.consume_stats import (
    ConsumeStatsError,
    QueueOffsets,
    decode_consume_stats,
    encode_consume_stats,
)

offsets = st.integers(0, 2**62)
rows = st.lists(
    st.builds(
        QueueOffsets,
        topic=st.text(min_size=1, max_size=20),
        broker_name=st.text(min_size=1, max_size=20),
        queue_id=st.integers(0, 1023),
        broker_offset=offsets,
        consumer_offset=offsets,
        pull_offset=offsets,
        last_timestamp=offsets,
        inflight=offsets,
    ),
    max_size=8,
)


@given(rows, st.floats(0, 1e6, allow_nan=False))
def test_rows_round_trip(written: list[QueueOffsets], tps: float) -> None:
    assert decode_consume_stats(encode_consume_stats(written, tps)) == (written, tps)


def _only_consume_stats_error(body: bytes) -> None:
    try:
        decode_consume_stats(body)
    except ConsumeStatsError:
        pass


@given(st.binary(max_size=200))
def test_any_bytes_raise_only_consume_stats_error(body: bytes) -> None:
    _only_consume_stats_error(body)


@given(rows.filter(bool), st.data())
def test_mutated_bodies_raise_only_consume_stats_error(
    written: list[QueueOffsets], data: st.DataObject
) -> None:
    body = bytearray(encode_consume_stats(written))
    at = data.draw(st.integers(0, len(body) - 1))
    cut = data.draw(st.booleans())
    if cut:
        del body[at:]
    else:
        body[at] = data.draw(st.integers(0, 255))
    _only_consume_stats_error(bytes(body))


def test_deep_nesting_raises_only_consume_stats_error() -> None:
    for body in (
        b'{"offsetTable":{' + b"[" * 100_000,
        b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ):
        _only_consume_stats_error(body)
