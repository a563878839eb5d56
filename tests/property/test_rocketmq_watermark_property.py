"""QueueWatermark against a model (issue 19: "acks out of order: the committed offset is always
the contiguous low watermark (property test against a model)"). Any mix of pulls (with gaps
the source filtered out), acks, failures, dismissals and moves, in any order: ``committable``
is the lowest pulled offset neither acked nor dismissed, else the next offset to pull; it never
passes a message that was not acked or dismissed, and never goes back except by a move."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.rocketmq.watermark import QueueWatermark

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ops = st.lists(
    st.one_of(
        st.tuples(st.just("pull"), st.integers(1, 4), st.integers(0, 3)),  # how many, gap before
        st.tuples(st.just("advance"), st.integers(0, 5)),
        st.tuples(st.sampled_from(["ack", "ack", "ack", "fail", "dismiss"]), st.integers(0, 99)),
        st.tuples(st.just("move"), st.integers(0, 200)),
    ),
    max_size=120,
)


@SETTINGS
@given(start=st.integers(0, 50), script=ops)
def test_committable_is_the_contiguous_low_watermark(
    start: int, script: list[tuple[str, int] | tuple[str, int, int]]
) -> None:
    w = QueueWatermark(start)
    next_offset = start  # the model: where the next pull starts ...
    pulled: set[int] = set()  # ... what was pulled since the last move ...
    done: set[int] = set()  # ... and which of those were acked or dismissed
    dismissed = 0
    last = start
    for op in script:
        kind = op[0]
        in_flight = sorted(pulled - done)
        if kind == "pull":
            _, n, gap = op  # type: ignore[misc]
            first = next_offset + gap
            for o in range(first, first + n):
                w.pulled(o)
                pulled.add(o)
            next_offset = first + n
        elif kind == "advance":
            w.advance(next_offset + op[1])
            next_offset += op[1]
        elif kind == "move":
            if in_flight:
                continue  # the caller drains first (unit-tested: it raises)
            w.moved(op[1])
            next_offset, pulled, done = op[1], set(), set()
            last = op[1]
        else:
            if not in_flight:
                continue
            o = in_flight[op[1] % len(in_flight)]
            if kind == "ack":
                w.acked(o)
                done.add(o)
            elif kind == "dismiss":
                w.dismissed(o)
                done.add(o)
                dismissed += 1
            else:
                w.failed(o)
        not_done = pulled - done
        expected = min(not_done) if not_done else next_offset
        assert w.committable == expected
        assert w.in_flight == len(not_done)
        assert all(w.committable <= o for o in not_done), "passed a message not acked"
        assert w.committable >= last, "went backwards without a move"
        assert w.dismissed_count == dismissed
        assert w.next_offset == next_offset
        assert all(w.is_in_flight(o) == (o in not_done) for o in range(start, next_offset + 2))
        last = w.committable
