"""The ``env`` fixture: one metaledger node and one broker, shared by a module's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.replicator.broker_env import Env, broker_env


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    yield from broker_env(tmp_path_factory)
