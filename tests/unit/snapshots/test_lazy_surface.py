"""``snapshots``' lazily imported names (``_LAZY``) are names each module exports (its
``__all__``) and the package exports: the list is written out so that importing the package
imports none of those modules, and this keeps it from drifting from them."""

from __future__ import annotations

import importlib
from collections import defaultdict

import snapshots


def test_lazy_names_are_exported_by_their_modules_and_the_package() -> None:
    by_module: dict[str, set[str]] = defaultdict(set)
    for name, module in snapshots._LAZY.items():
        by_module[module].add(name)
    for module, names in by_module.items():
        assert names <= set(importlib.import_module(module).__all__), module
    assert set(snapshots._LAZY) <= set(snapshots.__all__)


def test_a_lazy_name_resolves_to_its_modules_object() -> None:
    from snapshots import _reader

    assert snapshots.read_snapshot is _reader.read_snapshot
