"""The snapshot writer's record loop (snapshots._framewire): the compiled build's module gives
the bytes, sub-indexes, chunk ends and per-type hashes its source gives, on generated records
(both sides are the source in the plain build), and both give protobuf's Effect bytes."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.mypyc_bench import both
from protos.records_pb2 import Effect
from snapshots import RecordDigest
from snapshots._recordstream import RecordReader
from snapshots._writer import _new_type, _slow_frame

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
RECORDS = st.lists(
    st.tuples(
        st.sampled_from(["kv", "lease", "t\u00e9st"]),
        st.one_of(st.binary(max_size=40), st.sampled_from([b"k" * 16383, b"k" * 16384])),
        st.one_of(st.binary(max_size=200), st.sampled_from([b"v" * 128, b"v" * 20000])),
    ),
    max_size=40,
)


def run(module: Any, records: list[tuple[str, bytes, bytes]], offset: int, limit: int) -> Any:
    """Every call's chunk, last sub-index and whether it was full, then the type states."""
    source = iter(records)
    types: dict[str, list[Any]] = {}
    calls = []
    sub = 0
    while True:
        chunk: list[bytes] = []
        sub, full = module.frame_records(
            source, offset, sub, types, _new_type, _slow_frame, chunk, limit
        )
        calls.append((b"".join(chunk), sub, full))
        if not full:
            break
    return calls, {t: (st[2], st[3]) for t, st in types.items()}


@SETTINGS
@given(records=RECORDS, offset=st.sampled_from([0, 7, 2**64 - 1]), limit=st.integers(1, 3000))
def test_compiled_and_source_agree_and_give_protobufs_bytes(
    records: list[tuple[str, bytes, bytes]], offset: int, limit: int
) -> None:
    compiled, source = both("snapshots._framewire")
    got = run(compiled, records, offset, limit)
    assert got == run(source, records, offset, limit)
    calls, sums = got
    frames = list(RecordReader(b"".join(c for c, _, _ in calls), start=0))
    assert [(f.offset, f.sub) for f in frames] == [(offset, i + 1) for i in range(len(records))]
    for frame, (type_, key, value) in zip(frames, records, strict=True):
        assert frame.payload == Effect(type=type_, key=key, value=value).SerializeToString()
    expected = RecordDigest()
    for record in records:
        expected.add(*record)
    assert (
        RecordDigest.from_sums(
            {t: c for t, (_, c) in sums.items()}, {t: s for t, (s, _) in sums.items()}
        )
        == expected
    )


def test_an_empty_type_is_refused_by_both() -> None:
    for module in both("snapshots._framewire"):
        try:
            run(module, [("kv", b"a", b"b"), ("", b"a", b"b")], 1, 100)
        except ValueError as exc:
            assert str(exc) == "record 2 has an empty type"
        else:
            raise AssertionError("no error")
