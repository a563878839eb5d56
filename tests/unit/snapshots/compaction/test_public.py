"""The public surface of ``snapshots.compaction``: what the CLI and the benchmarks import."""

from __future__ import annotations

import inspect

import snapshots.compaction as compaction


def test_exported_members() -> None:
    names = compaction.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))
    for name in names:
        assert not name.startswith("_"), name
        member = getattr(compaction, name)
        if inspect.isfunction(member) or inspect.isclass(member):
            assert inspect.getdoc(member), f"{name} has no docstring"
