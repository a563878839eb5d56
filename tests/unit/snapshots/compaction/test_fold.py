"""The compaction job's stage-2 fold (``snapshots.compaction.fold_versions``) against the
record-level replay of ``snapshots._replay``: same state for any order of the versions,
with or without base records underneath, and the same refusal of two different records
at one position."""

from __future__ import annotations

import random

import pytest

from snapshots import ChangeLogError, ChangeRecord, replay
from snapshots.compaction import fold_versions


@pytest.mark.parametrize("seed", range(6))
def test_fold_equals_replay_in_any_order(seed: int) -> None:
    rng = random.Random(seed)
    after = 50 if seed % 2 else -1
    # base keys both under the changes (k*) and untouched by them (b*)
    base = (
        {
            (t, b"%s%d" % (p, i)): b"base%d" % i
            for i in range(0, 40, 3)
            for t in ("kv", "member")
            for p in (b"k", b"b")
        }
        if after >= 0
        else {}
    )
    items: list[tuple[tuple[str, bytes], tuple[int, int, bytes | None]]] = [
        (key, (after, -1, value)) for key, value in base.items()
    ]
    used = set()
    for _ in range(600):
        offset, sub = rng.randrange(after + 1, after + 400), rng.randrange(3)
        key = (rng.choice(["kv", "member"]), b"k%d" % rng.randrange(40))
        if (key, offset, sub) in used:
            continue
        used.add((key, offset, sub))
        items.append((key, (offset, sub, None if rng.random() < 0.3 else rng.randbytes(5))))
    duplicate = items[-1]
    items.append(duplicate)  # the same record twice (e.g. two read ranges' pre-folds): fine
    rng.shuffle(items)
    changes = [
        (o, s, ChangeRecord(o, s, k[0], k[1], v or b"", v is None))
        for k, (o, s, v) in items
        if s >= 0
    ]
    expected = replay(changes, base, after_offset=after)
    got = {(t, k): v for t, k, v in fold_versions(iter(items))}
    assert got == expected and len(got) > 10
    assert any(v.startswith(b"base") for v in got.values()) == bool(base)


def test_two_different_records_at_one_position_are_refused() -> None:
    items = [(("kv", b"a"), (7, 0, b"x")), (("kv", b"a"), (7, 0, b"y"))]
    with pytest.raises(ChangeLogError, match=r"two different records .* at \(7, 0\)"):
        list(fold_versions(iter(items)))
    delete_vs_put = [(("kv", b"a"), (7, 0, None)), (("kv", b"a"), (7, 0, b"y"))]
    with pytest.raises(ChangeLogError, match="two different records"):
        list(fold_versions(iter(delete_vs_put)))
