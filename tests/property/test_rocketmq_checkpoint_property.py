"""QueueCheckpoint's record and history under any sequence of syncs (late ones, source offsets
going back after a restart, several destination queues): the history stays bounded, keeps the
newest syncs exactly and the oldest one, stays ascending in destination offsets, and the
record round-trips; garbage never decodes to anything but a CheckpointError."""

from __future__ import annotations

import itertools
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.rocketmq.checkpoint import (
    MAX_SYNCS,
    RECENT_SYNCS,
    CheckpointError,
    QueueCheckpoint,
)

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

syncs = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 10_000), st.integers(0, 40)),  # queue, s, step
    max_size=300,
)


@SETTINGS
@given(script=syncs, next_offset=st.integers(0, 2**62), dismissed=st.integers(0, 99))
def test_history_is_bounded_exact_for_the_newest_and_round_trips(
    script: list[tuple[int, int, int]], next_offset: int, dismissed: int
) -> None:
    c = QueueCheckpoint(next_offset, dismissed, "D")
    last = {0: -1, 1: -1, 2: -1}
    kept: dict[int, list[tuple[int, int]]] = {0: [], 1: [], 2: []}  # every sync kept, in order
    for q, s, step in script:
        d = last[q] + step - 5  # sometimes not above the last: a late completion, dropped
        if d < 0:
            continue
        assert c.record_sync(q, s, d) == (d > last[q])
        if d > last[q]:
            last[q] = d
            kept[q].append((s, d))
    for q, history in c.syncs.items():
        assert 1 <= len(history) <= MAX_SYNCS
        assert history[0] == kept[q][0], "the oldest sync is kept"
        n = min(RECENT_SYNCS, len(kept[q]))
        assert history[-n:] == kept[q][-n:], "the newest syncs are kept exactly"
        assert all(a[1] < b[1] for a, b in itertools.pairwise(history))
        assert set(history) <= set(kept[q])
    assert QueueCheckpoint.decode(c.encode()) == c


@SETTINGS
@given(raw=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_garbage_raises_only_a_checkpoint_error(raw: bytes) -> None:
    try:
        c = QueueCheckpoint.decode(raw)
    except CheckpointError:
        return
    assert QueueCheckpoint.decode(c.encode()) == c


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**64) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@SETTINGS
@given(
    doc=st.fixed_dictionaries(
        {
            "v": st.sampled_from([1, 1, 1, 2, "1", True]),
            "next": st.integers(0, 9) | json_values,
        },
        optional={
            "dismissed": st.integers(0, 9) | json_values,
            "dest_topic": st.text(max_size=5) | json_values,
            "syncs": st.dictionaries(
                st.sampled_from(["0", "1", "x", "-1"]),
                st.lists(st.lists(st.integers(-1, 50), max_size=3), max_size=4) | json_values,
                max_size=3,
            )
            | json_values,
            "feeds": st.lists(st.integers(-1, 3), max_size=3) | json_values,
        },
    )
)
def test_almost_right_records_raise_only_a_checkpoint_error(doc: dict[str, object]) -> None:
    try:
        c = QueueCheckpoint.decode(json.dumps(doc).encode())
    except CheckpointError as exc:
        assert exc.field
        return
    assert QueueCheckpoint.decode(c.encode()) == c


def test_deep_nesting_and_huge_numbers_are_checkpoint_errors() -> None:
    for raw in (b"[" * 100_000 + b"]" * 100_000, b'{"v": 1, "next": 9223372036854775808}'):
        try:
            QueueCheckpoint.decode(raw)
        except CheckpointError:
            continue
        raise AssertionError(f"{raw[:40]!r} decoded")
    assert QueueCheckpoint.decode(b'{"v": 1, "next": 9223372036854775807}').next_offset == 2**63 - 1
    try:
        QueueCheckpoint.decode(b'{"v": true, "next": 1}')
    except CheckpointError as exc:
        assert exc.field == "v"
    else:
        raise AssertionError("v: true decoded")
