"""The broker's and the replicators' commands find metaledger where every other command does
(issue 29): at the node named only by ``$METALEDGER_ENDPOINTS`` (no ``--endpoints``), through
the client library's one resolver. Each asks about a job or a topic that does not exist, so
its exit code says it reached the node and had an answer (4, not found) rather than none (3)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Cluster

pytestmark = pytest.mark.integration

WORKTREE = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("node"), n=1)
    try:
        c.wait_ready(30)
        yield c
    finally:
        c.close()


def metaledger(node: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("METALEDGER_")}
    env["PYTHONPATH"] = str(WORKTREE)
    env["METALEDGER_ENDPOINTS"] = ",".join(node.endpoints)
    return subprocess.run(
        [sys.executable, "-m", "nameserver.cli", *args],
        cwd=WORKTREE,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_replicate_status_reads_the_node_of_the_environment(node: Cluster) -> None:
    r = metaledger(node, "replicate", "status")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:2] == ["KIND", "JOB"]
    r = metaledger(node, "replicate", "status", "--job", "no-such-job")
    assert r.returncode == 4, r.stderr
    assert "no running job 'no-such-job'" in r.stderr


@pytest.mark.parametrize("command", [["send", "NoSuchTopic", "x"], ["consume", "NoSuchTopic"]])
def test_send_and_consume_ask_the_node_of_the_environment(
    node: Cluster, command: list[str]
) -> None:
    extra = ["--group", "g", "--timeout", "1"] if command[0] == "consume" else []
    r = metaledger(node, *command, *extra)
    assert r.returncode == 4, r.stderr
    assert "topic NoSuchTopic has no route" in r.stderr
