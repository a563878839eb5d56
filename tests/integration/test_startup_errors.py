"""Start-up failures of real ``serve`` and ``cluster up`` processes: one line, an exit code.

Each case runs the command as a user would and checks its whole stderr: exactly one line
``metaledger: serve: ...`` (or ``cluster up: ...``) naming the address, path or file and
the flag, exit code ``CANNOT_START``, no traceback (the traceback only with
``--log-level DEBUG``). Ports in use are held by a socket the test binds itself; every
other port is free (:func:`tests.harness.free_ports`). A data dir records its node and
cluster on first start; ``serve --id n9`` on n0's data dir, or with another cluster token,
is refused; a data dir without the record (made before it existed) is adopted.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nameserver.cli.exitcodes import ExitCode
from nameserver.startup import IDENTITY_FILE
from tests.harness import REPO_ROOT, free_ports, wait_until

pytestmark = pytest.mark.integration

FLAGS = ("--listen-client", "--listen-peer", "--listen-remoting", "--listen-metrics")
RUN_S = 60.0  # a refused start takes about a second (interpreter and imports)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["METALEDGER_CLUSTER_PASSWORD"] = "startup-test"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _serve_argv(data_dir: Path, node_id: str = "n0", **ports: int) -> list[str]:
    """``serve`` on free ports (``ports`` maps a flag's name, e.g. listen_client, to a port)."""
    chosen = dict(zip(FLAGS, free_ports(len(FLAGS)), strict=True))
    for name, port in ports.items():
        chosen["--" + name.replace("_", "-")] = port
    argv = [sys.executable, "-m", "nameserver.cli", "serve", "--id", node_id]
    argv += ["--data-dir", str(data_dir)]
    for flag, port in chosen.items():
        argv += [flag, f"127.0.0.1:{port}"]
    return [*argv, "--initial-cluster", f"{node_id}=127.0.0.1:{chosen['--listen-peer']}"]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=RUN_S, env=_env(), stdin=subprocess.DEVNULL
    )


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused start prints (asserted: one line, CANNOT_START, no traceback)."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == ExitCode.CANNOT_START, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port this test listens on (so a node cannot)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_ports(1)[0]))
        s.listen()
        yield s.getsockname()[1]


# --------------------------------------------------------------------------- ports
@pytest.mark.parametrize("flag", FLAGS)
def test_serve_on_a_port_in_use_names_the_address_and_the_flag(
    tmp_path: Path, held_port: int, flag: str
) -> None:
    name = flag.removeprefix("--").replace("-", "_")
    ports: dict[str, int] = {name: held_port}
    line = _one_line(_run(_serve_argv(tmp_path / "n0", "n0", **ports)))
    assert line == (
        f"metaledger: serve: cannot listen on 127.0.0.1:{held_port} ({flag}): "
        "address already in use"
    )


def test_debug_log_level_shows_the_traceback(tmp_path: Path, held_port: int) -> None:
    proc = _run([*_serve_argv(tmp_path / "n0", listen_client=held_port), "--log-level", "DEBUG"])
    assert proc.returncode == ExitCode.CANNOT_START
    assert "Traceback" in proc.stderr
    assert "\nmetaledger: serve: cannot listen on 127.0.0.1:" in proc.stderr


# --------------------------------------------------------------------------- data dirs
def _cluster_up(data_dir: Path) -> subprocess.CompletedProcess[str]:
    base = free_ports(1)[0] // 10 * 10  # never reached: the data dir is refused first
    argv = [sys.executable, "-m", "nameserver.cli", "cluster", "up", "--nodes", "1"]
    return _run([*argv, "--data-dir", str(data_dir), "--base-port", str(base)])


@pytest.mark.parametrize("command", ["serve", "cluster up"])
def test_a_data_dir_that_is_a_file_is_refused(tmp_path: Path, command: str) -> None:
    path = tmp_path / "a-file"
    path.write_text("not a directory\n")
    proc = _cluster_up(path) if command == "cluster up" else _run(_serve_argv(path))
    assert _one_line(proc) == (
        f"metaledger: {command}: cannot use data dir {path} (--data-dir): "
        "it is a file, not a directory"
    )


@pytest.mark.parametrize("command", ["serve", "cluster up"])
def test_a_data_dir_below_a_file_is_refused(tmp_path: Path, command: str) -> None:
    parent = tmp_path / "a-file"
    parent.write_text("not a directory\n")
    path = parent / "data"
    proc = _cluster_up(path) if command == "cluster up" else _run(_serve_argv(path))
    assert _one_line(proc) == (
        f"metaledger: {command}: cannot use data dir {path} (--data-dir): "
        f"cannot create it: {parent} is not a directory"
    )


def test_cluster_up_refuses_a_node_data_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "n0").write_text("not a directory\n")
    assert _one_line(_cluster_up(tmp_path)) == (
        f"metaledger: cluster up: cannot use data dir {tmp_path / 'n0'} (--data-dir): "
        "it is a file, not a directory"
    )


def test_a_data_dir_that_cannot_be_created_is_refused(tmp_path: Path) -> None:
    path = "/proc/metaledger-test/data"  # procfs: no directory can be made there
    line = _one_line(_run(_serve_argv(Path(path))))
    assert line.startswith(f"metaledger: serve: cannot use data dir {path} (--data-dir): ")


# --------------------------------------------------------------------------- files
def test_serve_with_an_unreadable_password_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-password"
    argv = [*_serve_argv(tmp_path / "n0"), "--cluster-password-file", str(missing)]
    assert _one_line(_run(argv)) == (
        f"metaledger: serve: cannot read {missing}: No such file or directory "
        "(--cluster-password-file)"
    )
    argv[-1] = str(tmp_path)  # a directory
    assert f"cannot read {tmp_path}: Is a directory" in _one_line(_run(argv))


def test_cluster_up_with_an_unreadable_password_file_names_it(tmp_path: Path) -> None:
    (tmp_path / "cluster-password").mkdir()
    assert _one_line(_cluster_up(tmp_path)) == (
        f"metaledger: cluster up: cannot read {tmp_path / 'cluster-password'}: Is a directory"
    )


# --------------------------------------------------------------------------- identity
def _serve_until_up(argv: list[str], log_path: Path) -> str:
    """Start ``serve``, wait until it serves, stop it (SIGTERM); its output."""
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=_env(), stdin=subprocess.DEVNULL
        )
    try:
        wait_until(
            lambda: b" serving: " in log_path.read_bytes() or proc.poll() is not None,
            RUN_S,
            lambda: f"serve did not start: {log_path.read_text(errors='replace')}",
        )
        assert proc.poll() is None, log_path.read_text(errors="replace")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(RUN_S)
    return log_path.read_text(errors="replace")


def test_a_data_dir_records_its_node_and_refuses_another(tmp_path: Path) -> None:
    data = tmp_path / "n0"
    _serve_until_up(_serve_argv(data), tmp_path / "first.log")
    identity = json.loads((data / IDENTITY_FILE).read_text())
    assert identity["node_id"] == "n0" and identity["cluster_token"] == "metaledger"
    assert len(identity["cluster_id"]) == 16 and identity["created_by"].startswith("metaledger")

    line = _one_line(_run(_serve_argv(data, node_id="n9")))
    assert line == (
        f"metaledger: serve: data dir {data} (--data-dir) is node n0's, not n9's: start it "
        "with --id n0, or give node n9 its own data dir (a new, empty one to join as a new "
        "member)"
    )

    line = _one_line(_run([*_serve_argv(data), "--initial-cluster-token", "other"]))
    assert line.startswith(
        f"metaledger: serve: data dir {data} (--data-dir) belongs to cluster "
        f"{identity['cluster_id']} (--initial-cluster-token 'metaledger'), not to cluster "
    )
    assert "'other'" in line and "a new data dir" in line


def test_a_node_at_the_default_cluster_token_warns_once_it_serves(tmp_path: Path) -> None:
    out = _serve_until_up(_serve_argv(tmp_path / "n0"), tmp_path / "default.log")
    assert out.count("WARNING") == 1 and "--initial-cluster-token is the default" in out, out
    argv = [*_serve_argv(tmp_path / "n1", "n1"), "--initial-cluster-token", "orders-eu"]
    assert "WARNING" not in _serve_until_up(argv, tmp_path / "own.log")


def test_a_data_dir_without_an_identity_is_adopted(tmp_path: Path) -> None:
    data = tmp_path / "n0"
    _serve_until_up(_serve_argv(data), tmp_path / "first.log")
    (data / IDENTITY_FILE).unlink()  # as a data dir made before the file existed

    out = _serve_until_up(_serve_argv(data), tmp_path / "second.log")
    assert f"data dir {data} has data but no {IDENTITY_FILE}" in out and "adopting it" in out
    assert json.loads((data / IDENTITY_FILE).read_text())["node_id"] == "n0"
    assert "n9's" in _one_line(_run(_serve_argv(data, node_id="n9")))
