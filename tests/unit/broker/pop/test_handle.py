"""broker.pop.handle: RocketMQ's receipt handle layout (ReceiptHandle.encode, ExtraInfoUtil)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.pop.errors import InvalidReceiptHandle
from broker.pop.handle import Handle, decode


def test_layout_is_rocketmqs() -> None:
    h = Handle(5, 1700000000000, 30000, 0, "0", "broker-a", 2, 7, 4096)
    assert h.encode() == "5 1700000000000 30000 0 0 broker-a 2 7 4096"
    assert decode(h.encode()) == h
    assert h.visible_at_ms == 1700000030000 and not h.fifo


def test_eight_fields_as_the_java_remoting_client_builds_them() -> None:
    h = decode("5 1700000000000 30000 999 0 broker-a 2 7")
    assert h.commit_log_offset == -1 and h.fifo and h.offset == 7


def test_seven_fields_take_the_offset_apart() -> None:
    assert decode("5 1 2 0 0 b 3", offset=9).offset == 9


@pytest.mark.parametrize(
    "text",
    [
        "",
        "x",
        "1 2 3",
        "a 1 2 0 0 b 3 4",
        "1 2 3 0 0 b -1 4",
        "1 2 3 0 0 b 1 2 3 4",
        "1 2 3 0 0 b 1",
    ],
)
def test_malformed_handles_are_invalid(text: str) -> None:
    with pytest.raises(InvalidReceiptHandle):
        decode(text)


@given(st.text(max_size=60))
def test_any_text_decodes_or_is_invalid(text: str) -> None:
    try:
        decode(text)
    except InvalidReceiptHandle:
        pass


@given(
    st.integers(0, 2**62),
    st.integers(0, 2**40),
    st.integers(1, 2**31),
    st.sampled_from([0, 999]),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
    st.integers(-1, 2**62),
)
def test_round_trip(
    start: int, pop: int, inv: int, revive: int, qid: int, off: int, clog: int
) -> None:
    h = Handle(start, pop, inv, revive, "0", "broker-a", qid, off, clog)
    assert decode(h.encode()) == h
