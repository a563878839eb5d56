"""Fixtures shared by the real-process tests (tests/cluster, tests/integration)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness import Cluster


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the item (``item.rep_setup``, ``item.rep_call``), so a
    fixture can tell at teardown whether its test failed."""
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


def _failed(item: pytest.Item) -> bool:
    return any(
        getattr(getattr(item, f"rep_{when}", None), "failed", False) for when in ("setup", "call")
    )


def ready_cluster(root: Any) -> Cluster:
    """A 3-node cluster of real server processes, ready (a leader, members announced);
    stopped again, log tails printed, if it does not get there."""
    c = Cluster(root, n=3)
    try:
        c.wait_ready(30)
        c.wait_announced(30)
    except BaseException:
        c.close(failed=True)
        raise
    return c


@pytest.fixture
def cluster(tmp_path: Any, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A ready 3-node cluster of real server processes; always stopped afterwards, with the
    tails of the node logs printed when the test failed."""
    c = ready_cluster(tmp_path / "cluster")
    try:
        yield c
    finally:
        c.close(failed=_failed(request.node))


@pytest.fixture(scope="module")
def module_cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """One ready 3-node cluster shared by a module's tests (for tests that only read and
    write keys of their own). Log tails are printed if any test of the module failed."""
    c = ready_cluster(tmp_path_factory.mktemp("cluster"))
    failures_before = request.session.testsfailed
    try:
        yield c
    finally:
        c.close(failed=request.session.testsfailed > failures_before)
