"""A SparkSession shared by the whole pytest session (local[2], the project's settings).

Spark tests run in their own pytest invocation (``-m spark``): a hung Spark action cannot
be interrupted by pytest-timeout and would poison the shared session (research note §3.9).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session", autouse=True)
def _class_archive_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Jobs that start their own JVM (the CLI, subprocesses) keep the JVM class archive in a
    temp dir, not in the user's ~/.cache."""
    import os

    old = os.environ.get("METALEDGER_SPARK_CACHE")
    os.environ["METALEDGER_SPARK_CACHE"] = str(tmp_path_factory.mktemp("spark-cache"))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("METALEDGER_SPARK_CACHE", None)
        else:
            os.environ["METALEDGER_SPARK_CACHE"] = old


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:  # not a skip: `-m spark` asked for these tests
        pytest.fail(f"the spark tests need pyspark (pip install pyspark==4.3.0): {exc}")
    from snapshots.compaction import make_spark_session

    session = make_spark_session("local[2]", work_dir=tmp_path_factory.mktemp("spark"))
    try:
        yield session
    finally:
        session.stop()
