"""The node's facade stands below the fronts: nothing it imports, directly or not, is a front.

The import-linter contracts in ``pyproject.toml`` say who may import whom; this test follows
the whole import graph down from ``nameserver.node`` (imports under ``if TYPE_CHECKING:``
left out: they name types for mypy and load nothing). That no loop closes between
nameserver's folders, nor between two of its modules, is ``tests/unit/test_import_cycles.py``.
"""

from __future__ import annotations

import grimp


def test_the_facade_reaches_no_front() -> None:
    """What the node's facade imports, directly or not, holds no front: no gRPC adapter, no
    remoting handler, no server wiring (the import contract says it too)."""
    graph = grimp.build_graph("nameserver", exclude_type_checking_imports=True)
    below = graph.find_upstream_modules("nameserver.node")
    fronts = {m for m in below if m.startswith(("nameserver.grpc", "nameserver.server"))}
    assert not fronts | {m for m in below if m.endswith((".service", ".remoting"))}
