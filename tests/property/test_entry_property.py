"""Entry codec: any batch round-trips; garbage never decodes into a different valid batch silently."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raftlog import Effect, Entry, decode_batch, encode_batch
from raftlog.entry import decode_item, encode_item, item_count

entries = st.builds(
    Entry,
    type=st.sampled_from(["kv", "txn", "member", "noop", "lease"]),
    key=st.binary(max_size=64),
    value=st.binary(max_size=256),
    timestamp_ms=st.integers(min_value=0, max_value=2**62),
    client_id=st.text(max_size=20),
    seq=st.integers(min_value=0, max_value=2**63),
)


@given(st.lists(entries, min_size=1, max_size=8), st.integers(1, 2**62), st.integers(0, 2**31))
def test_batch_round_trip(batch: list[Entry], offset: int, term: int) -> None:
    assert decode_batch(encode_batch(batch), offset, term) == [e.at(offset, term) for e in batch]


@given(
    st.sampled_from(["kv", "member"]),
    st.binary(max_size=64),
    st.binary(max_size=256),
    st.booleans(),
)
def test_effect_round_trip(type_: str, key: bytes, value: bytes, delete: bool) -> None:
    eff = Effect(type_, key, b"" if delete else value, delete)
    assert Effect.decode(eff.encode(term=1, timestamp_ms=2)) == eff


@given(
    st.lists(st.lists(entries, min_size=1, max_size=4), min_size=1, max_size=8),
    st.integers(1, 2**40),
)
def test_item_numbers_its_requests_from_the_first_offset(
    requests: list[list[Entry]], first: int
) -> None:
    data = encode_item([encode_batch(r) for r in requests])
    assert item_count(data) == len(requests)
    decoded = decode_item(data, first, term=3)
    assert decoded == [[e.at(first + i, 3) for e in r] for i, r in enumerate(requests)]
