"""``metaledger compact`` as users deploy it (issue 29): run from a virtualenv that is the only
install of metaledger and its dependencies, and through a real Spark standalone cluster (a
master and a worker started from pyspark's ``bin/spark-class``), also one whose workers have
no metaledger installed.

Three interpreters, made once per session (~20 s, from pip's cache or index): ``tool``, a
venv with ``pip install -e`` of this repository (the user's install); ``bare``, a venv with
nothing installed, first on every PATH here: the ``python3`` a machine has, without the
dependencies (the global Python of this machine has all of them and would hide the bug);
``deps``, protobuf and crc32c only (a Spark worker's Python without metaledger).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from snapshots import SnapshotMeta, compact_local, inspect
from tests.spark.test_compaction import CLUSTER, REPO, make_log, summary, write_base

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: what the venvs' installs must not pick up from the caller's environment
_UNSET = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME", "VIRTUAL_ENV")


class Pythons(NamedTuple):
    tool_bin: Path  # the venv's bin/: metaledger and its dependencies
    bare_bin: Path  # a venv with nothing installed (its python3 first on PATH)
    deps_python: Path  # protobuf and crc32c only


def _env(bare_bin: Path, **extra: str) -> dict[str, str]:
    """The caller's environment with `bare_bin` first on PATH and no Python or Spark
    settings that would point the workers at an interpreter or code."""
    env = {k: v for k, v in os.environ.items() if k not in _UNSET}
    env["PATH"] = os.pathsep.join([str(bare_bin), env.get("PATH", "")])
    env.update(extra)
    return env


def _run(
    cmd: list[str], timeout_s: float, *, env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`cmd` in its own process group, which is killed (the Spark JVM and Python workers a
    compaction starts with it) if it outlives `timeout_s`; a non-zero exit fails the test."""
    with subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
    ) as p:
        try:
            out, err = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            pytest.fail(f"{' '.join(cmd)} ran past {timeout_s} s:\n{err[-3000:]}")
    if p.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {p.returncode}:\n{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def _pins(*names: str) -> list[str]:
    """The requirement lines of pyproject.toml's dependencies for `names`."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    found = [d for d in deps if d.split("==")[0] in names]
    assert len(found) == len(names), (names, deps)
    return found


@pytest.fixture(scope="session")
def pythons(tmp_path_factory: pytest.TempPathFactory) -> Pythons:
    root = tmp_path_factory.mktemp("venvs")
    tool, bare, deps = root / "tool", root / "bare", root / "deps"
    env = _env(bare / "bin")
    _run([sys.executable, "-m", "venv", str(tool)], 120, env=env)
    _run([sys.executable, "-m", "venv", "--without-pip", str(bare)], 60, env=env)
    _run([sys.executable, "-m", "venv", "--without-pip", str(deps)], 60, env=env)
    pip = [str(tool / "bin" / "python"), "-m", "pip"]
    _run([*pip, "install", "-q", "-e", str(REPO)], 300, env=env)
    deps_pins = _pins("protobuf", "crc32c")
    _run(
        [*pip, "--python", str(deps / "bin" / "python"), "install", "-q", *deps_pins], 120, env=env
    )
    for python, module, present in [
        (bare / "bin" / "python3", "crc32c", False),
        (deps / "bin" / "python", "crc32c", True),
        (deps / "bin" / "python", "snapshots", False),
    ]:
        found = subprocess.run(
            [str(python), "-c", f"import {module}"], env=env, capture_output=True, cwd=root
        )
        assert (found.returncode == 0) == present, (python, module)
    return Pythons(tool / "bin", bare / "bin", deps / "bin" / "python")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _alive_workers(ui_port: int) -> int:
    """Workers the master's web UI lists as ALIVE (its ``/json`` view); 0 while it is not
    up yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
            doc = json.load(r)
    except (OSError, ValueError):
        return 0
    return sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE")


class Standalone(NamedTuple):
    url: str
    work: Path  # the worker's work dir: one sub-directory per application it ran


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory, pythons: Pythons) -> Iterator[Standalone]:
    """A Spark standalone master and one worker (1 core, 1 GiB) on loopback, started from
    the pyspark package's ``bin/spark-class`` (the pip package has no start scripts), with
    the bare venv's ``python3`` first on their PATH; stopped by PID (their own process
    groups, with the executors they started) whatever happens."""
    import pyspark

    home = Path(pyspark.__file__).parent
    spark_class = home / "bin" / "spark-class"
    if not spark_class.exists():
        pytest.fail(f"cannot start a standalone cluster: {spark_class} is missing from pyspark")
    tmp = tmp_path_factory.mktemp("standalone")
    port, master_ui, worker_ui = _free_ports(3)
    props = tmp / "standalone.properties"
    props.write_text("spark.master.rest.enabled false\nspark.worker.cleanup.enabled false\n")
    env = _env(
        pythons.bare_bin,
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(tmp),
        SPARK_WORKER_DIR=str(tmp / "work"),
        SPARK_DAEMON_MEMORY="256m",
        SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    )
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            p = subprocess.Popen(
                [str(spark_class), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        procs.append(p)
        return p

    url = f"spark://127.0.0.1:{port}"
    try:
        start(
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(master_ui)),
                *("--properties-file", str(props)),
            ],
            tmp / "master.log",
        )
        start(
            [
                "org.apache.spark.deploy.worker.Worker",
                url,
                *("--host", "127.0.0.1", "--cores", "1", "--memory", "1g"),
                *("--webui-port", str(worker_ui), "--work-dir", str(tmp / "work")),
                *("--properties-file", str(props)),
            ],
            tmp / "worker.log",
        )
        deadline = time.monotonic() + 90
        while _alive_workers(master_ui) < 1:
            dead = [p for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- {name}:\n{(tmp / name).read_text(errors='replace')[-2000:]}"
                    for name in ("master.log", "worker.log")
                    if (tmp / name).exists()
                )
                pytest.fail(f"the standalone worker did not register with {url}:\n{logs}")
            time.sleep(0.3)
        yield Standalone(url, tmp / "work")
    finally:
        for p in reversed(procs):  # the worker (and its executors) first
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)


class Job(NamedTuple):
    args: list[str]  # compact's flags, without --master
    expected: tuple[dict, dict]  # (counts, hashes) of the local fold


@pytest.fixture
def job(tmp_path: Path) -> Job:
    """A log of four segment files and a base snapshot in its middle, and what the local
    fold makes of them."""
    log = make_log(tmp_path / "seg", 7, entries=3000, files=4)
    offsets = sorted({r[0] for r in log.records})
    at, upto = offsets[len(offsets) // 2], offsets[-10]
    write_base(log, tmp_path / "base.snap", at)
    local = compact_local(
        log.directory,
        tmp_path / "base.snap",
        upto,
        tmp_path / "l.snap",
        SnapshotMeta(CLUSTER, upto, 0),
    )
    args = [
        *("compact", "--segments", str(log.directory), "--upto", str(upto)),
        *("--base-snapshot", str(tmp_path / "base.snap"), "--out", str(tmp_path / "s.snap")),
        *("-w", "json"),
    ]
    return Job(args, summary(local))


def _check(proc: subprocess.CompletedProcess[str], job: Job, out: Path) -> None:
    doc = json.loads(proc.stdout)
    assert (doc["counts"], doc["hashes"]) == job.expected
    assert summary(inspect(out, verify=True)) == job.expected


def test_compact_from_a_venv_runs_the_workers_on_the_venvs_python(
    pythons: Pythons, job: Job, tmp_path: Path
) -> None:
    """The venv's ``metaledger compact`` on ``local[2]``, from a directory that is not the
    repository, with a ``python3`` on PATH that has none of the dependencies: the Python
    workers run the venv's interpreter. (They ran ``python3`` from PATH, failing with
    ``No module named 'snapshots'`` here: ``spark.pyspark.python`` does not reach the
    workers of a SparkContext made in-process, ``$PYSPARK_PYTHON`` does.)"""
    proc = _run(
        [str(pythons.tool_bin / "metaledger"), *job.args, "--master", "local[2]"],
        240,
        cwd=tmp_path,
        env=_env(pythons.bare_bin),
    )
    _check(proc, job, tmp_path / "s.snap")


def _apps(work: Path) -> set[str]:
    return {p.name for p in work.iterdir()} if work.is_dir() else set()


def test_compact_from_a_venv_on_a_standalone_cluster(
    pythons: Pythons, standalone: Standalone, job: Job, tmp_path: Path
) -> None:
    """The same through ``--master spark://127.0.0.1:P``: the master is on loopback, so the
    executors run on this machine and run the venv's interpreter (they ran the worker's
    ``python3``, failing with ``No module named 'crc32c'``)."""
    before = _apps(standalone.work)
    proc = _run(
        [str(pythons.tool_bin / "metaledger"), *job.args, "--master", standalone.url],
        240,
        cwd=tmp_path,
        env=_env(pythons.bare_bin),
    )
    _check(proc, job, tmp_path / "s.snap")
    assert len(_apps(standalone.work) - before) == 1, "the job did not run on the worker"


def test_standalone_workers_without_metaledger_get_the_code_shipped(
    pythons: Pythons, standalone: Standalone, job: Job, tmp_path: Path
) -> None:
    """``metaledger compact --master spark://...`` from this checkout, the executors' Python
    given by ``$PYSPARK_PYTHON`` and holding only protobuf and crc32c: the ``snapshots``
    and ``protos`` code goes to them as a zip with the job, and the snapshot hashes like
    the local fold's."""
    before = _apps(standalone.work)
    proc = _run(
        [sys.executable, "-m", "nameserver.cli", *job.args, "--master", standalone.url],
        240,
        cwd=REPO,
        env=_env(pythons.bare_bin, PYSPARK_PYTHON=str(pythons.deps_python)),
    )
    _check(proc, job, tmp_path / "s.snap")
    assert "read + fold + hash" in proc.stderr  # the progress bar (no TTY: a line per phase)
    assert len(_apps(standalone.work) - before) == 1, "the job did not run on the worker"
