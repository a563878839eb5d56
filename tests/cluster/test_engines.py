"""The cluster scenarios of ``test_cluster.py`` on the other consensus engine.

The suite runs on the default engine (``--consensus``; ServerConfig.consensus). This module
reruns the core scenarios (writes through every node, leader SIGKILL under load, whole
cluster SIGKILL and restart) with every node started on the other one, so both engines a
user may pick stay tested end to end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nameserver.cli.serve import CONSENSUS_ENV
from nameserver.config import ServerConfig
from tests.cluster import test_cluster as scenarios
from tests.conftest import ready_cluster
from tests.harness import Cluster

pytestmark = pytest.mark.cluster

OTHER = "pysyncobj" if ServerConfig.consensus == "native" else "native"


@pytest.fixture
def other_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    monkeypatch.setenv(CONSENSUS_ENV, OTHER)  # the harness passes its environment on
    c = ready_cluster(tmp_path / "cluster")
    failed = request.session.testsfailed
    try:
        yield c
    finally:
        c.close(failed=request.session.testsfailed > failed)


SCENARIOS: list[Callable[[Cluster], Any]] = [
    scenarios.test_writes_through_every_node_are_readable_from_every_node,
    scenarios.test_leader_sigkill_under_load_keeps_every_acknowledged_write,
    scenarios.test_whole_cluster_sigkill_and_restart_keeps_acknowledged_writes,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__.removeprefix("test_"))
def test_scenario_on_the_other_engine(
    scenario: Callable[[Cluster], Any], other_cluster: Cluster
) -> None:
    engine_log = "wal" if OTHER == "native" else "journal"
    for i in range(other_cluster.n):
        assert (other_cluster.data_dir(i) / "raft" / engine_log).exists(), f"n{i}: not {OTHER}"
    scenario(other_cluster)
