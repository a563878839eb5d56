"""Which Python the compaction's Spark workers run (:func:`worker_python`), and how a
SparkContext made in this process learns it (issue 29: not from ``spark.pyspark.python``)."""

from __future__ import annotations

import os
import sys

import pytest

from snapshots.compaction import worker_python
from snapshots.compaction._session import _environ


@pytest.mark.parametrize(
    "master",
    ["local", "local[2]", "local[*]", "spark://127.0.0.1:7077", "spark://localhost:1,[::1]:2"],
)
def test_local_and_loopback_masters_run_this_interpreter(
    monkeypatch: pytest.MonkeyPatch, master: str
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert worker_python(master) == sys.executable


@pytest.mark.parametrize(
    "master", ["spark://spark-master:7077", "spark://127.0.0.1:7077,10.0.0.2:7077", "yarn"]
)
def test_a_cluster_elsewhere_runs_sparks_default(
    monkeypatch: pytest.MonkeyPatch, master: str
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert worker_python(master) is None


def test_the_users_choice_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python3")
    assert worker_python("local[2]") == "/opt/py/bin/python3"
    assert worker_python("yarn") == "/opt/py/bin/python3"
    conf = {"spark.pyspark.python": "/srv/venv/bin/python"}
    assert worker_python("local[2]", conf) == "/srv/venv/bin/python"  # as spark-submit
    assert worker_python("yarn", {"spark.pyspark.python": ""}) == "/opt/py/bin/python3"


def test_environ_is_set_while_open_then_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    with _environ("PYSPARK_PYTHON", "/a/python"):
        assert os.environ["PYSPARK_PYTHON"] == "/a/python"
    assert "PYSPARK_PYTHON" not in os.environ
    monkeypatch.setenv("PYSPARK_PYTHON", "/b/python")
    with pytest.raises(RuntimeError), _environ("PYSPARK_PYTHON", "/a/python"):
        raise RuntimeError
    assert os.environ["PYSPARK_PYTHON"] == "/b/python"
    with _environ("PYSPARK_PYTHON", None):
        assert os.environ["PYSPARK_PYTHON"] == "/b/python"
