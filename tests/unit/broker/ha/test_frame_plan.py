"""The master's frame sizes: <= the batch, never across an epoch boundary or a segment end."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.ha.epochs import EpochEntry
from broker.ha.master import frame_plan

E = EpochEntry
EPOCHS = [E(1, 0), E(2, 1500), E(4, 5000)]


@pytest.mark.parametrize(
    ("offset", "end", "entry", "n"),
    [
        (0, 10_000, E(1, 0), 1000),  # the batch (1000 here)
        (900, 10_000, E(1, 0), 124),  # the segment ends at 1024
        (1024, 10_000, E(1, 0), 476),  # epoch 2 starts at 1500
        (1500, 10_000, E(2, 1500), 548),  # next segment at 2048
        (4500, 4600, E(2, 1500), 100),  # the log's end
        (5000, 5000, E(4, 5000), 0),  # nothing to send
    ],
)
def test_frame_plan_table(offset: int, end: int, entry: EpochEntry, n: int) -> None:
    assert frame_plan(offset, end, 1024, EPOCHS, 1000) == (entry, n)


def test_bytes_older_than_the_first_epoch_go_as_epoch_zero() -> None:
    assert frame_plan(10, 900, 1024, [E(3, 500)], 1000) == (E(0, 0), 490)
    assert frame_plan(10, 900, 1024, [], 1000) == (E(0, 0), 890)


@given(
    st.lists(st.tuples(st.integers(1, 50), st.integers(1, 3000)), max_size=6),
    st.integers(0, 20_000),
    st.integers(0, 20_000),
    st.sampled_from([512, 1024, 4096]),
    st.integers(1, 5000),
)
def test_frames_never_cross_a_boundary(
    raw: list[tuple[int, int]], offset: int, extra: int, seg: int, batch: int
) -> None:
    epochs, epoch, start = [], 0, 0
    for de, ds in raw:
        epoch, start = epoch + de, start + ds
        epochs.append(E(epoch, start))
    end = offset + extra
    entry, n = frame_plan(offset, end, seg, epochs, batch)
    assert 0 <= n <= batch and offset + n <= end
    if n:
        assert offset // seg == (offset + n - 1) // seg
        assert not any(offset < e.start_offset < offset + n for e in epochs)
        assert entry.start_offset <= offset
    else:
        assert offset == end
