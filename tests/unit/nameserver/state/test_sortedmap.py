"""Unit tests for nameserver.state.sortedmap.PersistentSortedMap."""

from __future__ import annotations

import random
import threading

import pytest

from nameserver.state.sortedmap import DEFAULT_CHUNK_SIZE, PersistentSortedMap


def _k(i: int) -> bytes:
    return b"k%06d" % i


def _build(n: int, chunk_size: int = 4, fanout: int | None = None) -> PersistentSortedMap[int]:
    return PersistentSortedMap.from_sorted_items(
        [(_k(i), i) for i in range(n)], chunk_size=chunk_size, fanout=fanout
    )


def _leaf_ids(m: PersistentSortedMap[int]) -> set[int]:
    return {id(leaf) for leaf, _ in m._leaves_from(b"")}


# --------------------------------------------------------------------- basics


def test_empty() -> None:
    m: PersistentSortedMap[int] = PersistentSortedMap.empty()
    assert len(m) == 0
    assert not m
    assert m.chunk_size == DEFAULT_CHUNK_SIZE
    assert m.get(b"a") is None
    assert m.get(b"a", 7) == 7
    assert b"a" not in m
    with pytest.raises(KeyError):
        m[b"a"]
    assert list(m.items()) == []
    assert list(m) == []
    assert list(m.range(b"", b"\x00")) == []
    assert list(m.range(b"a")) == []
    assert m.count_range(b"", b"\x00") == 0
    assert m.first_key() is None
    assert m.last_key() is None
    assert m.chunk_count == 0
    m.check_invariants()
    assert m.delete(b"a") is m
    assert m.update() is m


@pytest.mark.parametrize("bad", [0, 1, -5])
def test_bad_sizes(bad: int) -> None:
    with pytest.raises(ValueError):
        PersistentSortedMap.empty(chunk_size=bad)
    with pytest.raises(ValueError):
        PersistentSortedMap.empty(chunk_size=8, fanout=bad)
    with pytest.raises(ValueError):
        PersistentSortedMap.from_sorted_items([], chunk_size=bad)


def test_size_type_checked() -> None:
    with pytest.raises(TypeError):
        PersistentSortedMap.empty(chunk_size=True)
    with pytest.raises(TypeError):
        PersistentSortedMap.empty(chunk_size=4.0)  # type: ignore[arg-type]


def test_default_fanout_capped_by_chunk_size() -> None:
    assert PersistentSortedMap.empty(chunk_size=4).fanout == 4
    assert PersistentSortedMap.empty(chunk_size=1000).fanout == 64
    assert PersistentSortedMap.empty(chunk_size=4, fanout=3).fanout == 3


def test_lookups() -> None:
    m = _build(100)
    m.check_invariants()
    assert len(m) == 100
    assert m
    for i in range(100):
        assert m.get(_k(i)) == i
        assert m[_k(i)] == i
        assert _k(i) in m
    for missing in (b"", b"a", b"k", _k(5) + b"\x00", b"z", _k(100)):
        assert m.get(missing) is None
        assert m.get(missing, -1) == -1
        assert missing not in m
        with pytest.raises(KeyError):
            m[missing]
    assert "k000001" not in m
    assert 3 not in m
    assert m.first_key() == _k(0)
    assert m.last_key() == _k(99)
    assert list(m) == [_k(i) for i in range(100)]
    assert list(m.keys()) == [_k(i) for i in range(100)]
    assert list(m.values()) == list(range(100))
    assert list(m.items()) == [(_k(i), i) for i in range(100)]
    assert "len=100" in repr(m)


def test_values_may_be_anything() -> None:
    m: PersistentSortedMap[object] = PersistentSortedMap.empty(chunk_size=4)
    m = m.update({b"a": None, b"b": [1], b"c": (2,)})
    assert m.get(b"a", "dflt") is None
    assert b"a" in m
    assert m[b"b"] == [1]
    assert list(m.range(b"a")) == [(b"a", None)]


# -------------------------------------------------------------------- bulk build


def test_from_sorted_items_packs_chunks() -> None:
    m = _build(1000, chunk_size=10, fanout=4)
    m.check_invariants()
    assert m.chunk_count == 100
    assert m.height == 4  # 100 -> 25 -> 7 -> 2 -> 1
    assert list(m.items()) == [(_k(i), i) for i in range(1000)]


def test_from_sorted_items_accepts_iterators() -> None:
    m = PersistentSortedMap.from_sorted_items(((_k(i), i) for i in range(10)), chunk_size=3)
    assert list(m.items()) == [(_k(i), i) for i in range(10)]
    assert len(PersistentSortedMap.from_sorted_items([])) == 0


@pytest.mark.parametrize(
    "keys", [[b"b", b"a"], [b"a", b"a"], [b"a", b"c", b"b"], [b"", b"\x00", b"\x00"]]
)
def test_from_sorted_items_rejects_unsorted(keys: list[bytes]) -> None:
    with pytest.raises(ValueError):
        PersistentSortedMap.from_sorted_items([(k, 0) for k in keys])


@pytest.mark.parametrize("bad", ["a", bytearray(b"a"), 1, None])
def test_non_bytes_keys_rejected(bad: object) -> None:
    with pytest.raises(TypeError):
        PersistentSortedMap.from_sorted_items([(b"", 0), (bad, 1)])  # type: ignore[list-item]
    m = _build(10)
    with pytest.raises(TypeError):
        m.update([(bad, 1)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        m.update((), [bad])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        m.range(bad)  # type: ignore[arg-type]
    if bad is not None:  # end=None is valid: the single key start
        with pytest.raises(TypeError):
            m.range(b"a", bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------ range


@pytest.fixture
def letters() -> PersistentSortedMap[int]:
    keys = [b"", b"\x00", b"a", b"ab", b"b", b"ba", b"c", b"d", b"e", b"f\xff"]
    return PersistentSortedMap.from_sorted_items(
        [(k, i) for i, k in enumerate(keys)], chunk_size=2, fanout=2
    )


def _rkeys(m: PersistentSortedMap[int], start: bytes, end: bytes | None) -> list[bytes]:
    got = [k for k, _ in m.range(start, end)]
    assert m.count_range(start, end) == len(got)
    return got


def test_range_single_key(letters: PersistentSortedMap[int]) -> None:
    assert list(letters.range(b"b")) == [(b"b", 4)]
    assert list(letters.range(b"b", None)) == [(b"b", 4)]
    assert _rkeys(letters, b"", None) == [b""]
    assert _rkeys(letters, b"bb", None) == []
    assert _rkeys(letters, b"zz", None) == []


def test_range_half_open(letters: PersistentSortedMap[int]) -> None:
    assert _rkeys(letters, b"a", b"c") == [b"a", b"ab", b"b", b"ba"]
    assert _rkeys(letters, b"aa", b"ba") == [b"ab", b"b"]
    assert _rkeys(letters, b"a", b"a\x00") == [b"a"]
    assert _rkeys(letters, b"", b"a") == [b"", b"\x00"]
    assert _rkeys(letters, b"e", b"\xff") == [b"e", b"f\xff"]
    assert _rkeys(letters, b"g", b"z") == []
    assert list(letters.range(b"a", b"c")) == [(b"a", 2), (b"ab", 3), (b"b", 4), (b"ba", 5)]


def test_range_empty_when_end_not_after_start(letters: PersistentSortedMap[int]) -> None:
    assert _rkeys(letters, b"c", b"c") == []
    assert _rkeys(letters, b"c", b"b") == []
    # b"" is a literal bound (nothing is < b""), not etcd's "no range_end".
    assert _rkeys(letters, b"", b"") == []
    assert _rkeys(letters, b"a", b"") == []


def test_range_from_start(letters: PersistentSortedMap[int]) -> None:
    every = [k for k, _ in letters.items()]
    assert _rkeys(letters, b"", b"\x00") == every
    assert _rkeys(letters, b"\x00", b"\x00") == every[1:]
    assert _rkeys(letters, b"b", b"\x00") == [b"b", b"ba", b"c", b"d", b"e", b"f\xff"]
    assert _rkeys(letters, b"g", b"\x00") == []


def test_range_prefix_scan() -> None:
    m = _build(0).update({b"/a/1": 1, b"/a/2": 2, b"/a0": 3, b"/b/1": 4, b"/a": 5})
    assert _rkeys(m, b"/a/", b"/a0") == [b"/a/1", b"/a/2"]


def test_range_is_a_snapshot() -> None:
    m = _build(50)
    it = m.range(_k(10), _k(40))
    first = next(it)
    m2 = m.update({_k(20): -1, _k(25) + b"x": -2}, [_k(30)])
    assert first == (_k(10), 10)
    assert list(it) == [(_k(i), i) for i in range(11, 40)]
    assert m2[_k(20)] == -1


def test_range_large_spans() -> None:
    m = _build(5000, chunk_size=7, fanout=3)
    rng = random.Random(3)
    for _ in range(200):
        a, b = sorted(rng.randrange(5001) for _ in range(2))
        assert _rkeys(m, _k(a), _k(b)) == [_k(i) for i in range(a, b)]
        assert _rkeys(m, _k(a), b"\x00") == [_k(i) for i in range(a, 5000)]


# ---------------------------------------------------------------------- updates


def test_update_returns_new_version_and_keeps_old() -> None:
    m0 = _build(20)
    snapshot = list(m0.items())
    m1 = m0.update({_k(3): -3, b"new": 1}, [_k(5), b"absent"])
    assert m1 is not m0
    assert list(m0.items()) == snapshot
    assert len(m0) == 20
    assert len(m1) == 20
    assert m1[_k(3)] == -3
    assert m1[b"new"] == 1
    assert _k(5) not in m1
    assert m0[_k(5)] == 5
    m0.check_invariants()
    m1.check_invariants()


def test_update_accepts_pairs_and_mappings() -> None:
    m: PersistentSortedMap[int] = PersistentSortedMap.empty(chunk_size=4)
    a = m.update([(b"b", 2), (b"a", 1)])
    b = m.update({b"b": 2, b"a": 1})
    c = m.update(iter([(b"b", 2), (b"a", 1)]), deletes=iter([b"c"]))
    assert list(a.items()) == list(b.items()) == list(c.items()) == [(b"a", 1), (b"b", 2)]


def test_update_last_put_wins_and_put_beats_delete() -> None:
    m = _build(10)
    m2 = m.update([(_k(1), 10), (_k(1), 11), (b"x", 1), (b"x", 2)], [_k(1), b"x", _k(2)])
    assert m2[_k(1)] == 11
    assert m2[b"x"] == 2
    assert _k(2) not in m2
    assert len(m2) == 10


def test_noop_updates_return_self() -> None:
    m = _build(30)
    assert m.update() is m
    assert m.update((), [b"absent", _k(3) + b"\x00"]) is m
    assert m.delete(b"zzz") is m
    # A put is always a new version, even with an equal value.
    assert m.update({_k(3): 3}) is not m


def test_set_and_delete() -> None:
    m: PersistentSortedMap[str] = PersistentSortedMap.empty(chunk_size=4)
    m1 = m.set(b"a", "x")
    m2 = m1.set(b"a", "y")
    m3 = m2.delete(b"a")
    assert (m.get(b"a"), m1.get(b"a"), m2.get(b"a"), m3.get(b"a")) == (None, "x", "y", None)
    assert len(m3) == 0
    m3.check_invariants()


def test_update_on_empty_builds_sorted() -> None:
    rng = random.Random(1)
    keys = [_k(i) for i in range(500)]
    rng.shuffle(keys)
    m: PersistentSortedMap[int] = PersistentSortedMap.empty(chunk_size=8, fanout=4)
    m2 = m.update({k: int(k[1:]) for k in keys})
    m2.check_invariants()
    assert list(m2.items()) == [(_k(i), i) for i in range(500)]
    assert len(m) == 0


def test_large_batch_into_one_chunk() -> None:
    # More operations than the small-batch threshold hit the same chunk.
    m = PersistentSortedMap.from_sorted_items([(b"a", 0), (b"z", 0)], chunk_size=8, fanout=4)
    puts = {b"m%03d" % i: i for i in range(0, 300, 2)}
    dels = [b"m%03d" % i for i in range(1, 300, 2)] + [b"a"]
    m2 = m.update(puts, dels)
    m2.check_invariants()
    assert list(m2.items()) == sorted([*puts.items(), (b"z", 0)])
    m3 = m2.update(
        {b"m%03d" % i: -i for i in range(0, 300, 4)}, [b"m%03d" % i for i in range(2, 300, 4)]
    )
    m3.check_invariants()
    assert list(m3.items()) == sorted([*((b"m%03d" % i, -i) for i in range(0, 300, 4)), (b"z", 0)])


def test_large_batch_of_absent_deletes_is_noop() -> None:
    m = _build(10, chunk_size=64)
    assert m.update((), [_k(i) + b"!" for i in range(100)]) is m


def test_appends_and_prepends() -> None:
    m: PersistentSortedMap[int] = PersistentSortedMap.empty(chunk_size=4, fanout=3)
    for i in range(200):
        m = m.set(_k(1000 + i), i).set(_k(999 - i), -i)
        m.check_invariants()
    assert list(m) == [_k(i) for i in range(800, 1200)]
    assert m.first_key() == _k(800)
    assert m.last_key() == _k(1199)


# ---------------------------------------------------------- splits and merges


def test_chunks_split_as_keys_are_inserted() -> None:
    m: PersistentSortedMap[int] = PersistentSortedMap.empty(chunk_size=4)
    order = list(range(100))
    random.Random(7).shuffle(order)
    heights = set()
    for i in order:
        m = m.set(_k(i), i)
        m.check_invariants()
        heights.add(m.height)
    assert len(m) == 100
    assert m.chunk_count >= 25
    assert max(heights) >= 2
    assert list(m.values()) == list(range(100))


def test_chunks_merge_and_tree_shrinks_as_keys_are_deleted() -> None:
    m = _build(400, chunk_size=4)
    assert m.chunk_count == 100
    order = list(range(400))
    random.Random(9).shuffle(order)
    survivors = set(order[360:])
    for i in order[:360]:
        m = m.delete(_k(i))
        m.check_invariants()
    assert len(m) == 40
    # Without merging, 40 keys spread over 100 chunks would keep most of them.
    assert m.chunk_count <= 25
    assert list(m) == [_k(i) for i in sorted(survivors)]
    for i in list(survivors):
        m = m.delete(_k(i))
        m.check_invariants()
    assert len(m) == 0
    assert m.height == 0
    assert m.chunk_count == 0
    assert m.set(b"a", 1)[b"a"] == 1


def test_dropping_whole_chunks_in_one_batch() -> None:
    m = _build(1000, chunk_size=8, fanout=4)
    m2 = m.update((), [_k(i) for i in range(100, 900)])
    m2.check_invariants()
    assert list(m2) == [_k(i) for i in [*range(100), *range(900, 1000)]]
    m3 = m2.update((), [_k(i) for i in range(1000)])
    m3.check_invariants()
    assert len(m3) == 0
    assert len(m) == 1000


def test_update_shares_untouched_chunks() -> None:
    m = _build(10_000, chunk_size=16, fanout=8)
    before = _leaf_ids(m)
    m2 = m.set(_k(5000), -1)
    after = _leaf_ids(m2)
    assert len(after - before) == 1  # only the rewritten chunk is new
    assert len(before - after) == 1
    m3 = m2.update({_k(10) + b"x": 0, _k(9000) + b"x": 0})
    assert len(_leaf_ids(m3) - after) <= 4
    assert m[_k(5000)] == 5000


def test_many_versions_stay_intact() -> None:
    rng = random.Random(11)
    m: PersistentSortedMap[int] = PersistentSortedMap.empty(chunk_size=4, fanout=3)
    model: dict[bytes, int] = {}
    versions: list[tuple[PersistentSortedMap[int], list[tuple[bytes, int]]]] = []
    for step in range(300):
        puts = {_k(rng.randrange(200)): step for _ in range(rng.randrange(5))}
        dels = [_k(rng.randrange(200)) for _ in range(rng.randrange(5))]
        m = m.update(puts, dels)
        for k in dels:
            if k not in puts:
                model.pop(k, None)
        model.update(puts)
        versions.append((m, sorted(model.items())))
    for v, expected in versions:
        v.check_invariants()
        assert list(v.items()) == expected


# ----------------------------------------------------------------- concurrency


def test_readers_see_consistent_snapshots_while_writer_publishes() -> None:
    base = _build(2000, chunk_size=8)
    # Each published entry: a version and the items it must hold forever.
    published: list[tuple[PersistentSortedMap[int], list[tuple[bytes, int]]]] = [
        (base, list(base.items()))
    ]
    stop = threading.Event()
    errors: list[str] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            m, expected = published[-1]  # take a reference, no lock
            if list(m.items()) != expected or len(m) != len(expected):
                errors.append("snapshot differs from its model")
                return
            if m.count_range(b"", b"\x00") != len(expected):
                errors.append("count mismatch")
                return
            reads[0] += 1

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    rng = random.Random(5)
    model = dict(published[0][1])
    try:
        m = base
        for v in range(300):
            puts = {_k(rng.randrange(4000)): v for _ in range(10)}
            dels = [_k(rng.randrange(4000)) for _ in range(10)]
            m = m.update(puts, dels)
            for k in dels:
                model.pop(k, None)
            model.update(puts)
            published.append((m, sorted(model.items())))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert reads[0] > 0
    for m, expected in published:
        assert list(m.items()) == expected
    for m, _ in published[::50]:
        m.check_invariants()
