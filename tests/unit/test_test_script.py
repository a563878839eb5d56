"""scripts/test.sh runs every pytest run whatever the first one's outcome, prints the
outcomes and fails if any failed (a failing first run once skipped the Spark run
silently). Run on a copy of the script whose tools are fakes on PATH."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: python3's stand-in: pytest exits with $FAKE_MAIN_RC (everything but Spark) or
#: $FAKE_SPARK_RC (Spark) and notes each run; anything else (pip) succeeds.
FAKE_PYTHON = """#!/usr/bin/env bash
case "$*" in
  *"-m pytest -m not spark and not slow tests/unit tests/property"*) echo pure >>"$FAKE_RUNS"; exit "${FAKE_PURE_RC:-0}" ;;
  *"-m pytest -m not spark --durations=10 tests/unit tests/property"*) echo unit >>"$FAKE_RUNS"; exit "${FAKE_UNIT_RC:-0}" ;;
  *"-m pytest -m not spark -n"*) echo "main-n$6" >>"$FAKE_RUNS"; exit "$FAKE_MAIN_RC" ;;
  *"-m pytest -m not spark --durations=30 tests/cluster tests/faults"*) echo serial >>"$FAKE_RUNS"; exit "${FAKE_SERIAL_RC:-0}" ;;
  *"-m pytest -m spark"*) echo spark >>"$FAKE_RUNS"; exit "$FAKE_SPARK_RC" ;;
esac
exit 0
"""
TOOLS = ["etcd", "etcdctl", "docker-compose", "redis-server", "redis-cli", "nats-server"]
TOOLS += ["ruff", "mypy", "lint-imports", "npm"]


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "test.sh", tmp_path / "scripts" / "test.sh")
    _executable(tmp_path / "scripts" / "gen_protos.sh", "#!/usr/bin/env bash\nexit 0\n")
    _executable(tmp_path / "scripts" / "build_front.sh", "#!/usr/bin/env bash\nexit 0\n")
    # the compiled build's stand-in notes a build when it takes effect (no argument, or
    # --install of what --stage compiled) and leaves cleans and the staging unnoted
    _executable(
        tmp_path / "scripts" / "build_mypyc.sh",
        '#!/usr/bin/env bash\ncase "${1:-}" in ""|--install) echo build >>"$FAKE_RUNS";; esac\n'
        "exit 0\n",
    )
    (tmp_path / "tests" / "js" / "node_modules").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        _executable(bin_dir / tool, "#!/usr/bin/env bash\nexit 0\n")
    # never the machine's own package manager: a missing package is installed by a stand-in
    _executable(bin_dir / "apt-get", "#!/usr/bin/env bash\nexit 0\n")
    _executable(
        bin_dir / "ldconfig",
        "#!/usr/bin/env bash\necho 'libfuse.so.2 (libc6,x86-64) => /lib/libfuse.so.2'\n",
    )
    _executable(bin_dir / "python3", FAKE_PYTHON)
    return tmp_path


def run(
    tree: Path,
    main_rc: int,
    spark_rc: int,
    *args: str,
    pure_rc: int = 0,
    serial_rc: int = 0,
    unit_rc: int = 0,
    workers: str | None = None,
) -> tuple[int, str, list[str]]:
    runs = tree / "runs"
    env = {
        **{k: v for k, v in os.environ.items() if k != "METALEDGER_TEST_WORKERS"},
        **({"METALEDGER_TEST_WORKERS": workers} if workers is not None else {}),
        "FAKE_PURE_RC": str(pure_rc),
        "FAKE_SERIAL_RC": str(serial_rc),
        "FAKE_UNIT_RC": str(unit_rc),
        "PATH": f"{tree / 'bin'}:/usr/bin:/bin",
        "FAKE_RUNS": str(runs),
        "FAKE_MAIN_RC": str(main_rc),
        "FAKE_SPARK_RC": str(spark_rc),
    }
    done = subprocess.run(
        ["bash", str(tree / "scripts" / "test.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    ran = runs.read_text().split() if runs.exists() else []
    return done.returncode, done.stdout, ran


@pytest.mark.parametrize(
    ("main_rc", "spark_rc", "code"), [(0, 0, 0), (1, 0, 1), (0, 1, 1), (2, 1, 2)]
)
def test_both_runs_run_and_both_outcomes_are_reported(
    tree: Path, main_rc: int, spark_rc: int, code: int
) -> None:
    rc, out, ran = run(tree, main_rc, spark_rc)
    assert ran == ["pure", "build", "unit", "main-n2", "serial", "spark"], out
    assert rc == code, out
    main_line = "passed" if main_rc == 0 else f"FAILED (exit {main_rc})"
    spark_line = "passed" if spark_rc == 0 else f"FAILED (exit {spark_rc})"
    assert f"== pytest (everything but Spark): {main_line}" in out
    assert f"== pytest (Spark): {spark_line}" in out


def test_a_failing_static_check_still_stops_the_script(tree: Path) -> None:
    _executable(tree / "bin" / "mypy", "#!/usr/bin/env bash\nexit 1\n")
    rc, _, ran = run(tree, 0, 0)
    assert rc == 1
    assert ran == []


def test_pure_runs_every_layer_once_without_the_compiled_build(tree: Path) -> None:
    rc, out, ran = run(tree, 0, 0, "--pure")
    assert (rc, ran) == (0, ["unit", "main-n2", "serial", "spark"]), out


def test_a_failing_serial_run_fails_the_script_after_every_run(tree: Path) -> None:
    """The cluster and fault tests run after the parallel layers, one at a time; their
    failure fails "everything but Spark", and the Spark run still runs."""
    rc, out, ran = run(tree, 0, 0, serial_rc=4)
    assert (rc, ran) == (4, ["pure", "build", "unit", "main-n2", "serial", "spark"]), out
    assert "== pytest (everything but Spark): FAILED (exit 4)" in out
    assert "== pytest (Spark): passed" in out


def test_a_failing_unit_run_fails_the_script_after_every_run(tree: Path) -> None:
    rc, out, ran = run(tree, 0, 0, unit_rc=6)
    assert (rc, ran) == (6, ["pure", "build", "unit", "main-n2", "serial", "spark"]), out
    assert "== pytest (everything but Spark): FAILED (exit 6)" in out


def test_the_number_of_test_processes_comes_from_the_environment(tree: Path) -> None:
    rc, out, ran = run(tree, 0, 0, "--pure", workers="0")
    assert (rc, ran) == (0, ["unit", "main-n0", "serial", "spark"]), out


def test_a_failing_pure_run_stops_before_the_compiled_build_and_says_so(tree: Path) -> None:
    rc, out, ran = run(tree, 0, 0, pure_rc=3)
    assert (rc, ran) == (3, ["pure"]), out
    assert "pure-Python build): FAILED (exit 3)" in out


def test_the_compile_runs_beside_the_static_checks_and_stops_with_a_failing_one(
    tree: Path,
) -> None:
    """The staged compile starts before the static checks; when one fails, the script stops
    at once and takes the compile (and what it started) with it."""
    pids = tree / "stage-pids"
    _executable(
        tree / "scripts" / "build_mypyc.sh",
        "#!/usr/bin/env bash\n"
        'if [ "${1:-}" = --stage ]; then sleep 60 & echo "$$ $!" >' + f'"{pids}"; wait; fi\n'
        "exit 0\n",
    )
    _executable(
        tree / "bin" / "mypy",
        # up to 30 s for the compile to start: a busy machine (CI's own compile) is slow to
        f'#!/usr/bin/env bash\nfor _ in $(seq 600); do [ -s "{pids}" ] && exit 1; sleep 0.05; done\n'
        "exit 1\n",
    )
    rc, _, ran = run(tree, 0, 0)
    assert (rc, ran) == (1, [])
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2, "the compile had started when mypy ran"
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)  # a killed orphan is reaped by init a moment later
    assert not [pid for pid in started if _alive(pid)]


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_slow_unit_and_property_tests_import_no_compiled_module() -> None:
    """scripts/test.sh leaves them out of the pure-Python run: the compiled build's run
    then runs the same code, so they need to run once."""
    compiled = [
        line.split("#", 1)[0].strip()[: -len(".py")].replace("/", ".")
        for line in (ROOT / "scripts" / "mypyc_modules.txt").read_text().splitlines()
        if line.split("#", 1)[0].strip()
    ]
    slow = sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for layer in ("unit", "property")
        for path in (ROOT / "tests" / layer).rglob("test_*.py")
        if "mark.slow" in path.read_text()
    )
    assert slow, "no slow unit or property test: the -m filter has nothing to leave out"
    probe = (
        "import importlib, json, sys\n"
        "for m in sys.argv[2:]: importlib.import_module(m)\n"
        "print(json.dumps(sorted(set(json.loads(sys.argv[1])) & set(sys.modules))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(compiled), *slow],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [], f"{slow} import compiled modules: {done.stdout}"
