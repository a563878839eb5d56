"""Index files and the index service: put, lookup, collisions, rollover, restart, trimming,
and a hypothesis model (a dict of key → offsets) the index must agree with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.store.index import IndexConfig, IndexService, index_keys
from broker.store.index_file import HEADER, IndexFile, file_size, key_hash, record_hashes

T0 = 1_700_000_000_000
ALL = (0, 2**62)


def test_index_keys_are_topic_hash_key_for_the_uniq_key_and_each_key() -> None:
    assert index_keys("T", "a  b", "U1") == ["T#U1", "T#a", "T#b"]
    assert index_keys("T", "", "") == []


def test_a_records_hashes_are_those_of_its_index_keys() -> None:
    for topic, keys, uniq in [("T", "a  b", "U1"), ("T", "", ""), ("T", "k", ""), ("T", " ", "U")]:
        assert record_hashes(topic, keys, uniq) == [
            key_hash(k) for k in index_keys(topic, keys, uniq)
        ]


def test_put_and_lookup_newest_first(tmp_path: Path) -> None:
    idx = IndexService(str(tmp_path))
    for i in range(5):
        idx.put(100 * i, "T", f"k{i % 2}", f"U{i}", T0 + i * 1000)
    assert idx.query("T", "k0", 32, *ALL).offsets == [400, 200, 0]
    assert idx.query("T", "U3", 32, *ALL).offsets == [300]
    assert idx.query("T", "k1", 1, *ALL).offsets == [300]
    assert idx.query("OTHER", "k0", 32, *ALL).offsets == []
    hits = idx.query("T", "nothing", 32, *ALL)
    assert hits.offsets == [] and (hits.last_timestamp, hits.last_phy_offset) == (T0 + 4000, 400)
    idx.close()


def test_lookup_by_time_range(tmp_path: Path) -> None:
    idx = IndexService(str(tmp_path))
    for i in range(10):
        idx.put(10 * i, "T", "k", "", T0 + i * 60_000)
    got = idx.query("T", "k", 32, T0 + 3 * 60_000, T0 + 5 * 60_000).offsets
    assert got == [50, 40, 30]
    assert idx.query("T", "k", 32, T0 + 20 * 60_000, T0 + 30 * 60_000).offsets == []
    idx.close()


def test_a_record_already_seen_is_not_indexed_twice(tmp_path: Path) -> None:
    idx = IndexService(str(tmp_path))
    idx.put(0, "T", "k", "", T0)
    idx.put(50, "T", "", "", T0)  # no keys: only seen
    idx.put(0, "T", "k", "", T0)
    idx.put(50, "T", "k", "", T0)
    assert idx.query("T", "k", 32, *ALL).offsets == [0]
    assert idx.end_offset == 50
    idx.close()


def test_colliding_keys_share_a_slot_and_stay_apart(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "f"), 1, 100)  # one slot: every key collides
    f.put([key_hash("T#a")], 10, T0)
    f.put([key_hash("T#b")], 20, T0)
    f.put([key_hash("T#a")], 30, T0)
    out: list[int] = []
    f.lookup(key_hash("T#a"), *ALL, out, 32)
    assert out == [30, 10]
    f.close()


def test_a_header_counting_past_its_entries_is_a_full_file(tmp_path: Path) -> None:
    """A damaged header whose count is past the file's entries: nothing more goes in (it
    once sliced the hashes from their end and wrote past the entries)."""
    path = str(tmp_path / "f")
    f = IndexFile(path, 4, 8)
    f.count = 9
    f.write_header()
    f.close()
    g = IndexFile(path, 4, 8)
    assert g.count == 9 and g.full
    before = Path(path).read_bytes()
    ends = (g.end_phy_offset, g.end_timestamp)
    hashes = [key_hash(f"T#{k}") for k in "abc"]
    assert g.put(hashes, 100, T0) == 0
    assert g.put_records([(200, "T", "a b c", "", T0)], 0, []) == (0, hashes)
    g.write_header()
    assert (g.count, g.end_phy_offset, g.end_timestamp) == (9, *ends)  # claims no record
    g.close()
    assert Path(path).read_bytes()[HEADER.size :] == before[HEADER.size :]  # no slot, no entry


def test_rollover_to_a_new_file_when_full_and_queries_span_files(tmp_path: Path) -> None:
    idx = IndexService(str(tmp_path), IndexConfig(hash_slots=7, entries_per_file=4))
    for i in range(10):
        idx.put(i * 10, "T", "k", f"U{i}", T0 + i)  # two entries each: files hold 1.5 records
    assert len([n for n in os.listdir(tmp_path) if n.isdigit()]) >= 5
    assert idx.query("T", "k", 64, *ALL).offsets == [i * 10 for i in reversed(range(10))]
    assert idx.query("T", "U7", 64, *ALL).offsets == [70]
    idx.put(100, "T", "k", "", T0 + 10)  # fills the newest file: the next one starts empty
    idx.put(110, "T", "", "", T0 + 11)
    hits = idx.query("T", "none", 64, *ALL)
    assert (hits.last_timestamp, hits.last_phy_offset) == (T0 + 10, 100)
    idx.close()


def test_restart_keeps_entries_and_where_it_got(tmp_path: Path) -> None:
    cfg = IndexConfig(hash_slots=11, entries_per_file=5)
    idx = IndexService(str(tmp_path), cfg)
    for i in range(8):
        idx.put(i * 10, "T", "k", "", T0)
    idx.close()
    again = IndexService(str(tmp_path), cfg)
    assert again.end_offset == 70
    again.put(70, "T", "k", "", T0)  # seen before the restart: skipped
    again.put(80, "T", "k", "", T0)
    assert again.query("T", "k", 64, *ALL).offsets == [i * 10 for i in reversed(range(9))]
    again.close()


def test_a_file_of_another_size_is_set_aside(tmp_path: Path) -> None:
    idx = IndexService(str(tmp_path), IndexConfig(hash_slots=11, entries_per_file=5))
    idx.put(0, "T", "k", "", T0)
    idx.close()
    other = IndexService(str(tmp_path), IndexConfig(hash_slots=13, entries_per_file=5))
    assert other.query("T", "k", 32, *ALL).offsets == []
    assert any(n.endswith(".other-size") for n in os.listdir(tmp_path))
    other.close()


def test_cut_lets_records_from_there_be_indexed_again(tmp_path: Path) -> None:
    idx = IndexService(str(tmp_path))
    idx.put(0, "T", "a", "", T0)
    idx.put(100, "T", "b", "", T0)
    idx.cut(100)
    idx.put(100, "T", "c", "", T0)
    assert idx.query("T", "c", 32, *ALL).offsets == [100]
    assert idx.query("T", "b", 32, *ALL).offsets == [100]  # stale: the store checks the record
    idx.close()


def test_delete_below_drops_whole_old_files_never_the_newest(tmp_path: Path) -> None:
    idx = IndexService(str(tmp_path), IndexConfig(hash_slots=3, entries_per_file=3))
    for i in range(6):
        idx.put(i * 10, "T", "k", "", T0)  # two records a file
    assert idx.delete_below(25) == 1  # the file of 0 and 10
    assert idx.delete_below(35) == 1  # the file of 20 and 30
    assert idx.query("T", "k", 32, *ALL).offsets == [50, 40]
    assert idx.delete_below(10**9) == 0  # the newest stays
    idx.close()


def test_file_size_is_fixed_by_the_configuration(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "f"), 10, 20)
    assert os.path.getsize(tmp_path / "f") == file_size(10, 20) == 40 + 40 + 400
    f.close()


def test_bad_configuration_names_the_field() -> None:
    with pytest.raises(ValueError, match="hash_slots"):
        IndexConfig(hash_slots=0).validate()
    with pytest.raises(ValueError, match="entries_per_file"):
        IndexConfig(entries_per_file=1).validate()


records = st.lists(
    st.tuples(
        st.sampled_from(["T", "U"]),
        st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=3),
        st.integers(0, 60),  # seconds after the record before (store times do not go back)
    ),
    max_size=40,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=records,
    slots=st.integers(1, 5),
    entries=st.integers(2, 9),
    restart=st.booleans(),
    chunk=st.integers(1, 8),
)
def test_the_index_agrees_with_a_dict_model(
    tmp_path_factory: pytest.TempPathFactory,
    records: list[tuple[str, list[str], int]],
    slots: int,
    entries: int,
    restart: bool,
    chunk: int,
) -> None:
    """Records go in ``chunk`` at a time (``put_many``: files fill inside a chunk and
    inside a record's keys)."""
    root = str(tmp_path_factory.mktemp("idx"))
    cfg = IndexConfig(hash_slots=slots, entries_per_file=entries)
    idx = IndexService(root, cfg)
    model: dict[tuple[str, str], list[tuple[int, int]]] = {}
    stamp = T0
    given: list[tuple[int, str, str, str, int]] = []
    for n, (topic, keys, sec) in enumerate(records):
        offset, stamp = n * 100, stamp + sec * 1000 + 7
        given.append((offset, topic, " ".join(keys), f"id{n}", stamp))
        for k in dict.fromkeys([f"id{n}", *keys]):
            model.setdefault((topic, k), []).append((offset, stamp))
    for at in range(0, len(given), chunk):
        idx.put_many(given[at : at + chunk])
    if given:
        assert idx.end_offset == given[-1][0]
    if restart:
        idx.close()
        idx = IndexService(root, cfg)
    for (topic, key), hits in model.items():
        want = sorted({o for o, _ in hits}, reverse=True)
        assert idx.query(topic, key, 64, *ALL).offsets[: len(want)] == want[:64]
        lo, hi = T0 + 100_000, T0 + 600_000
        ranged = set(idx.query(topic, key, 64, lo, hi).offsets)
        assert {o for o, s in hits if lo <= s <= hi} <= ranged
        assert ranged <= {o for o, s in hits if lo - 999 <= s <= hi}
    idx.close()
