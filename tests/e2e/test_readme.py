"""The README, run: every ```bash block of README.md, top to bottom, against a real cluster.

The README is this test's input: a command that changes there is run here as written. What
the test changes is only where things live: the ports (the README's 9877.. become a free
block of ports here, in the README's text and in ``cluster up --base-port``), the working
directory (a temporary one holding a copy of the README, so ``./data/demo`` is private), and
which ``metaledger`` and ``python3`` run (this tree's, with this interpreter). The commands
that take no ``--endpoints`` reach the cluster the way a user's do: through the default
endpoint, which ``METALEDGER_ENDPOINTS`` moves to the free ports.

``cluster up ... &`` is started by the test (in its own process group, stopped by the test
at the end), which then waits, with a deadline, until the cluster answers ``metaledger
status`` before the block's next line, as a person would. ```text blocks are not run.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from nameserver.cli.cluster_restart import read_pid, stop_node
from tests.harness import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: The README's ports: cluster up's default base port and what it spans (3 nodes, stride 10,
#: and the broker group 100 above).
README_BASE = 9877
PORT_SPAN = 130
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
CLUSTER_UP = re.compile(r"^(metaledger cluster up [^&#\n]*?)\s*&\s*(#.*)?$", re.M)


def bash_blocks(text: str) -> list[str]:
    """The README's ```bash blocks, in order."""
    return [body for lang, body in BLOCK.findall(text) if lang == "bash"]


def free_base(span: int = PORT_SPAN) -> int:
    """A base port with ``span`` free ports above it on 127.0.0.1 (below the ephemeral range)."""
    for base in range(20000 + (os.getpid() % 200) * 50, 32000, 50):
        socks = []
        try:
            for port in range(base, base + span):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free block of ports")


def move_ports(text: str, base: int) -> str:
    """The README's ports (``README_BASE`` .. + ``PORT_SPAN``) moved to ``base``."""

    def repl(m: re.Match[str]) -> str:
        n = int(m.group(0))
        return str(base + n - README_BASE) if README_BASE <= n < README_BASE + PORT_SPAN else m[0]

    return re.sub(r"(?<![\d.])\d{4}(?![\d.])", repl, text)


def shims(bin_dir: Path) -> None:
    """``metaledger`` and ``python3`` of this tree and this interpreter, first on PATH."""
    bin_dir.mkdir()
    for name, cmd in (
        ("metaledger", f'exec {shlex.quote(sys.executable)} -m nameserver.cli "$@"'),
        ("python3", f'exec {shlex.quote(sys.executable)} "$@"'),
    ):
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{cmd}\n")
        path.chmod(0o755)


def test_every_bash_block_of_the_readme_runs(tmp_path: Path) -> None:
    text = README.read_text()
    blocks = bash_blocks(text)
    assert any(CLUSTER_UP.search(b) for b in blocks), "the README starts a cluster"
    base = free_base()
    work = tmp_path / "work"
    work.mkdir()
    (work / "README.md").write_text(text)
    shims(tmp_path / "bin")
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "METALEDGER_ENDPOINTS": f"127.0.0.1:{base}",
    }
    env.pop("ETCDCTL_ENDPOINTS", None)
    cluster: subprocess.Popen[bytes] | None = None
    log = open(tmp_path / "cluster-up.log", "wb")

    def answers() -> bool:
        """`cluster up` said it is up (nodes, and the broker group when it starts one)."""
        if b"cluster up:" not in (tmp_path / "cluster-up.log").read_bytes():
            return False
        r = subprocess.run(
            ["metaledger", "status"], cwd=work, env=env, capture_output=True, timeout=30
        )
        return r.returncode == 0

    def run(script: str, what: str) -> None:
        r = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert r.returncode == 0, (
            f"README block {what} failed (exit {r.returncode}):\n{script}\n"
            f"--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}"
        )

    try:
        for i, block in enumerate(blocks, 1):
            script = move_ports(block, base)
            up = CLUSTER_UP.search(script)
            if up is not None:
                run(script[: up.start()], f"{i} (before cluster up)")
                argv = [*shlex.split(up.group(1)), "--base-port", str(base)]
                cluster = subprocess.Popen(
                    argv,
                    cwd=work,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                wait_until(
                    answers, 120, "the README's cluster is up and answers `metaledger status`"
                )
                script = script[up.end() :]
            run(script, str(i))
    finally:
        if cluster is not None:
            with_group = os.getpgid(cluster.pid)
            os.killpg(with_group, signal.SIGINT)
            try:
                cluster.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(with_group, signal.SIGKILL)
                cluster.wait(timeout=10)
            # a node `cluster restart` started may live in its own group: stop it by pid
            for pid_file in (work / "data" / "demo").glob("n*.pid"):
                stop_node(read_pid(pid_file), pid_file.stem)
        log.close()
