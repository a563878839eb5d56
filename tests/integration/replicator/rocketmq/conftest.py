"""Fixtures of RocketMQ clusters (``clusters.py``): ``two_clusters`` ("A" and "B", shared by
a module's tests) and ``make_clusters`` (any names, e.g. "A", "B", "AB" for loop tests;
stopped at the end of the test)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.conftest import _failed
from tests.integration.replicator.rocketmq.clusters import (
    RmqCluster,
    close_all,
    start_clusters,
)


@pytest.fixture(scope="module")
def two_clusters(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[RmqCluster, RmqCluster]]:
    """Clusters "A" (broker-a) and "B" (broker-b). Log tails are printed if a test of the
    module failed."""
    a, b = start_clusters(tmp_path_factory.mktemp("rmq"), ("A", "B"))
    failures_before = request.session.testsfailed
    try:
        yield a, b
    finally:
        close_all([a, b], request.session.testsfailed > failures_before)


@pytest.fixture
def make_clusters(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Callable[..., list[RmqCluster]]]:
    """``make_clusters("A", "B", "AB")``: clusters started for this test (default names
    "A", "B", "AB": one name contains another), all stopped when it ends."""
    started: list[RmqCluster] = []

    def make(*names: str) -> list[RmqCluster]:
        out = start_clusters(tmp_path_factory.mktemp("rmq"), names or ("A", "B", "AB"))
        started.extend(out)
        return out

    try:
        yield make
    finally:
        close_all(started, _failed(request.node))
