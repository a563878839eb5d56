"""Property tests: PersistentSortedMap against a dict model."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
)

from nameserver.state.sortedmap import PersistentSortedMap

# A small alphabet so keys collide, share prefixes and hit the b"" / b"\x00" edges.
keys = st.lists(st.sampled_from([b"\x00", b"\x01", b"a", b"b", b"\xff"]), max_size=3).map(b"".join)
range_ends = st.one_of(st.none(), st.just(b"\x00"), st.just(b""), keys)
sizes = st.sampled_from([(2, 2), (3, 2), (4, None), (4, 3), (5, 4), (8, 2)])
batches = st.tuples(
    st.lists(st.tuples(keys, st.integers()), max_size=40),
    st.lists(keys, max_size=40),
    st.lists(st.tuples(keys, range_ends), max_size=4),
)


def model_range(
    model: dict[bytes, int], start: bytes, end: bytes | None
) -> list[tuple[bytes, int]]:
    if end is None:
        return [(start, model[start])] if start in model else []
    if end == b"\x00":
        return sorted((k, v) for k, v in model.items() if k >= start)
    return sorted((k, v) for k, v in model.items() if start <= k < end)


def apply_model(
    model: dict[bytes, int], puts: list[tuple[bytes, int]], deletes: list[bytes]
) -> dict[bytes, int]:
    out = dict(model)
    for k in deletes:
        out.pop(k, None)
    out.update(puts)
    return out


def check(m: PersistentSortedMap[int], model: dict[bytes, int]) -> None:
    m.check_invariants()
    assert len(m) == len(model)
    assert list(m.items()) == sorted(model.items())
    assert m.first_key() == (min(model) if model else None)
    assert m.last_key() == (max(model) if model else None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=sizes, initial=st.dictionaries(keys, st.integers()), steps=st.lists(batches, max_size=12)
)
def test_updates_match_dict_model(
    sizes: tuple[int, int | None],
    initial: dict[bytes, int],
    steps: list[tuple[list[tuple[bytes, int]], list[bytes], list[tuple[bytes, bytes | None]]]],
) -> None:
    chunk_size, fanout = sizes
    m = PersistentSortedMap.from_sorted_items(sorted(initial.items()), chunk_size, fanout)
    model = dict(initial)
    check(m, model)
    history = [(m, model)]
    for puts, deletes, queries in steps:
        m = m.update(puts, deletes)
        model = apply_model(model, puts, deletes)
        check(m, model)
        for k in {k for k, _ in puts} | set(deletes):
            assert m.get(k) == model.get(k)
            assert (k in m) == (k in model)
        for start, end in queries:
            expected = model_range(model, start, end)
            assert list(m.range(start, end)) == expected
            assert m.count_range(start, end) == len(expected)
        history.append((m, model))
    # Every earlier version is unchanged by the later updates.
    for old, old_model in history:
        check(old, old_model)


@settings(max_examples=200, deadline=None)
@given(
    sizes=sizes,
    model=st.dictionaries(keys, st.integers()),
    start=keys,
    end=range_ends,
)
def test_range_matches_model(
    sizes: tuple[int, int | None], model: dict[bytes, int], start: bytes, end: bytes | None
) -> None:
    chunk_size, fanout = sizes
    # Built by one batch update rather than bulk-loaded, to vary the shape.
    m: PersistentSortedMap[int] = PersistentSortedMap.empty(chunk_size, fanout)
    m = m.update(model)
    expected = model_range(model, start, end)
    assert list(m.range(start, end)) == expected
    assert m.count_range(start, end) == len(expected)


@settings(max_examples=100, deadline=None)
@given(
    sizes=sizes,
    n=st.integers(0, 400),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 500)), max_size=200),
)
def test_single_key_ops_split_and_merge(
    sizes: tuple[int, int | None], n: int, ops: list[tuple[bool, int]]
) -> None:
    """Many one-key versions over a bulk-built map: splits, merges, height changes."""
    chunk_size, fanout = sizes
    items = [(b"%04d" % i, i) for i in range(0, 2 * n, 2)]
    m = PersistentSortedMap.from_sorted_items(items, chunk_size, fanout)
    model = dict(items)
    for is_put, i in ops:
        k = b"%04d" % i
        if is_put:
            m = m.set(k, -i)
            model[k] = -i
        else:
            m = m.delete(k)
            model.pop(k, None)
        m.check_invariants()
        assert m.get(k) == model.get(k)
    check(m, model)


class SortedMapMachine(RuleBasedStateMachine):
    """Random interleavings of updates on random versions (a version tree)."""

    versions = Bundle("versions")

    def __init__(self) -> None:
        super().__init__()
        self.models: dict[int, tuple[PersistentSortedMap[int], dict[bytes, int]]] = {}

    @rule(target=versions, sizes=sizes)
    def new_empty(self, sizes: tuple[int, int | None]) -> int:
        m: PersistentSortedMap[int] = PersistentSortedMap.empty(*sizes)
        self.models[id(m)] = (m, {})
        return id(m)

    @rule(
        target=versions,
        v=versions,
        puts=st.lists(st.tuples(keys, st.integers()), max_size=30),
        deletes=st.lists(keys, max_size=30),
    )
    def update(self, v: int, puts: list[tuple[bytes, int]], deletes: list[bytes]) -> int:
        m, model = self.models[v]
        m2 = m.update(puts, deletes)
        new_model = apply_model(model, puts, deletes)
        if m2 is m:
            assert new_model == model
        self.models[id(m2)] = (m2, new_model)
        return id(m2)

    @rule(v=consumes(versions), start=keys, end=range_ends)
    def query_and_forget(self, v: int, start: bytes, end: bytes | None) -> None:
        m, model = self.models[v]
        expected = model_range(model, start, end)
        assert list(m.range(start, end)) == expected
        assert m.count_range(start, end) == len(expected)

    @invariant()
    def all_versions_match(self) -> None:
        for m, model in self.models.values():
            check(m, model)


TestSortedMapMachine = SortedMapMachine.TestCase
TestSortedMapMachine.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
