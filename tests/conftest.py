"""Fixtures shared by the real-process tests (tests/cluster, tests/integration)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Cluster

#: RocketMQ 5's Python client (gRPC), and the project's pins (pyproject.toml), so the venv's
#: client runs on the same gRPC stack
ROCKETMQ5_CLIENT_PIN = "rocketmq-python-client==5.1.2"
ROCKETMQ5_PINS = ("grpcio==1.85.1", "protobuf==7.36.2")


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


@pytest.fixture(scope="session")
def rocketmq5_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a venv holding RocketMQ 5's Python client, made once per session.

    It has a venv of its own: it ships a top-level ``rocketmq`` package as the 4.x ``rocketmq``
    wheel of the dev extras does, and its own generated ``apache.rocketmq.v2``, whose symbols
    cannot share a descriptor pool with ``protos.apache``. Run its scripts as subprocesses
    without PYTHONPATH."""
    venv = tmp_path_factory.mktemp("rocketmq5") / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_USER")}
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=env)
    python = venv / "bin" / "python"
    r = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         ROCKETMQ5_CLIENT_PIN, *ROCKETMQ5_PINS],
        capture_output=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert r.returncode == 0, (
        f"pip install {ROCKETMQ5_CLIENT_PIN}: {r.stderr.decode(errors='replace')[-3000:]}"
    )
    return python
