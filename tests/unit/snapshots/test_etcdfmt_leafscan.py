"""The native leaf loop (snapshots.etcdfmt._leafscan, compiled) against bbolt's own
(snapshots.etcdfmt._bolt): reading a file with it on or off gives the same tree or the same
error, on files made here and on the same files with bytes flipped or cut. The compiled
module is compared with its source (both sides are the source in the plain build)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.mypyc_bench import both
from snapshots.etcdfmt import BoltFormatError, Tree, _bolt, read_bolt, write_bolt

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = st.binary(min_size=1, max_size=40)
VALUES = st.binary(min_size=0, max_size=300)


def ordered(value: Any) -> Any:
    """A tree as nested lists of items: dict order counts (etcd's reader keeps it)."""
    if isinstance(value, dict):
        return [(k, ordered(v)) for k, v in value.items()]
    return value


def in_key_order(value: Any) -> Any:
    """ordered() of a tree as bbolt stores it: every bucket's keys sorted."""
    if isinstance(value, dict):
        return [(k, in_key_order(value[k])) for k in sorted(value)]
    return value


def outcome(data: bytes, native: bool, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(_bolt, "_LEAFSCAN_COMPILED", native)
    try:
        return ("ok", ordered(read_bolt(data)))
    except BoltFormatError as e:
        return ("error", type(e).__name__, str(e))


@SETTINGS
@given(
    buckets=st.dictionaries(
        st.sampled_from([b"key", b"meta", b"lease"]),
        st.dictionaries(KEYS, st.one_of(VALUES, st.dictionaries(KEYS, VALUES, max_size=3))),
        min_size=1,
        max_size=3,
    ),
    flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 1 << 20),
)
def test_the_native_leaf_loop_reads_as_bbolts_own(
    buckets: dict[bytes, Any], flips: list[tuple[int, int]], cut: int
) -> None:
    tree: Tree = buckets
    data = write_bolt(tree)
    damaged = bytearray(data)
    for at, byte in flips:
        damaged[8192 + at % max(1, len(data) - 8192)] = byte  # past the meta pages
    with pytest.MonkeyPatch.context() as mp:
        for candidate in (data, bytes(damaged), data[: max(8192, cut % (len(data) + 1))]):
            assert outcome(candidate, True, mp) == outcome(candidate, False, mp)
        assert outcome(data, True, mp) == ("ok", in_key_order(tree))


def test_the_compiled_module_agrees_with_its_source() -> None:
    compiled, source = both("snapshots.etcdfmt._leafscan")
    tree: Tree = {b"key": {b"k%05d" % i: b"v" * (i % 50) for i in range(3000)}}
    data = write_bolt(tree)
    pages = [data[i : i + 4096] for i in range(2 * 4096, len(data), 4096)]
    for page in pages:
        count = int.from_bytes(page[10:12], "little")
        for last in (None, b"k", b"k99999"):
            got = []
            for module in (compiled, source):
                out: dict[bytes, Any] = {}
                got.append((module.plain_leaf(page, count, last, out), out))
            assert got[0] == got[1]
