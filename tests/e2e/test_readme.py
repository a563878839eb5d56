"""The README, run: ``scripts/demo.sh`` as a user starts it, then every ```console block of
README.md against it, top to bottom, each command's output checked against the README's.

A console block is a shell session: ``$ command`` lines (a command goes on over lines ending
in ``\\`` and through a here-document), each followed by the output it prints on stdout.
In the expected output ``...`` stands for anything within a line, and a line of only ``...``
for any number of lines (as doctest's ELLIPSIS). The blocks are one bash session, as a user's
one terminal: a variable set by one command is there for the next, in its block and after it.
Every command must exit 0. ```text blocks are not run.

What the test changes is only where things live: the ports (the README's 9877.. become a free
block of ports here, in the README's text and through the demo's ``METALEDGER_BASE_PORT``),
the working directory (a temporary one, whose ``./data/demo`` is the demo's data), and which
``metaledger`` and ``python3`` run (this tree's, with this interpreter). Commands reach the
demo through the default endpoint, which ``METALEDGER_ENDPOINTS`` moves to the free ports.
The demo runs in its own process group and is stopped with Ctrl-C's SIGINT at the end, as a
user stops it; a node the README restarted is stopped by its pid file.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
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
HEREDOC = re.compile(r"<<-?\s*'?\"?(\w+)'?\"?")
MARK = "@@readme-command-done@@"


@dataclass(frozen=True)
class Step:
    """One ``$ command`` of a console block and the stdout the README shows for it."""

    command: str
    expected: list[str]


def console_blocks(text: str) -> list[str]:
    """The README's ```console blocks, in order."""
    return [body for lang, body in BLOCK.findall(text) if lang == "console"]


def steps(block: str) -> list[Step]:
    """A console block as commands and their expected output."""
    out: list[Step] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            raise AssertionError(f"output before any command in a console block: {line!r}")
        command = [line[2:]]
        i += 1
        while command[-1].endswith("\\") and i < len(lines):
            command.append(lines[i])
            i += 1
        heredoc = HEREDOC.search(command[0])
        if heredoc is not None:
            while i < len(lines):
                command.append(lines[i])
                i += 1
                if command[-1] == heredoc.group(1):
                    break
        expected = []
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        out.append(Step("\n".join(command), expected))
    return out


def output_pattern(expected: list[str]) -> re.Pattern[str]:
    """``expected`` as a regex over the whole output (``...``: any text; a line of ``...``:
    any lines); runs of spaces match runs of spaces of any width (a table's columns widen
    with the ports the test picks), and trailing spaces never count."""
    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            pieces = (re.escape(piece) for piece in _spaces(line).split("..."))
            parts.append(".*?".join(pieces) + "\n")
    return re.compile("".join(parts))


def _spaces(line: str) -> str:
    return re.sub(r"[ \t]+", " ", line.rstrip())


def matches(expected: list[str], actual: str) -> bool:
    text = "".join(_spaces(line) + "\n" for line in actual.splitlines())
    return output_pattern(expected).fullmatch(text) is not None


def test_the_output_matcher() -> None:
    """The matcher itself: exact lines, ``...`` inside a line and as lines, nothing extra."""
    assert matches(["OK"], "OK\n")
    assert not matches(["OK"], "OK\nmore\n")
    assert not matches(["OK"], "")
    assert matches([], "")
    assert matches(["lease ... granted"], "lease 7 granted\n")
    assert not matches(["lease ... granted"], "lease 7 refused\n")
    assert matches(["a", "...", "z"], "a\nb\nc\nz\n")
    assert matches(["a", "...", "z"], "a\nz\n")
    assert not matches(["a", "...", "z"], "a\nb\n")
    assert matches(["col  x"], "col  x   \n")
    assert matches(["ID  ENDPOINT        ROLE"], "ID  ENDPOINT         ROLE\n")
    assert not matches(["ID ENDPOINT"], "IDENDPOINT\n")
    assert [s.command for s in steps("$ a \\\n  b\nout\n$ c <<'EOF'\nx\nEOF\n")] == [
        "a \\\n  b",
        "c <<'EOF'\nx\nEOF",
    ]


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


def session_script(block_steps: list[Step]) -> str:
    """One bash session running every step, a marker line with its exit code after each."""
    lines = ["set -u"]
    for step in block_steps:
        lines.append(f'{{\n{step.command}\n}}; rc=$?; echo; echo "{MARK} $rc"')
    return "\n".join(lines) + "\n"


def run_session(blocks: list[str], work: Path, env: dict[str, str]) -> None:
    """Every block's steps in one bash session (a user's one terminal), each output checked."""
    session = [
        (i, k, step) for i, block in enumerate(blocks, 1) for k, step in enumerate(steps(block), 1)
    ]
    r = subprocess.run(
        ["bash", "-c", session_script([step for _, _, step in session])],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    chunks = r.stdout.split(f"{MARK} ")
    for n, (i, k, step) in enumerate(session):
        where = f"README console block {i}, command {k}:\n$ {step.command}"
        assert n + 1 < len(chunks), (
            f"{where}\ndid not finish (bash exit {r.returncode})\n--- stderr\n{r.stderr[-3000:]}"
        )
        out = chunks[n] if n == 0 else chunks[n].partition("\n")[2]
        out = out.removesuffix("\n")  # the marker's own newline
        code = chunks[n + 1].partition("\n")[0]
        assert code == "0" and matches(step.expected, out), (
            f"{where}\nexit {code}\n--- expected\n"
            + "\n".join(step.expected)
            + f"\n--- got\n{out}\n--- stderr of the session\n{r.stderr[-3000:]}"
        )


def test_every_console_block_of_the_readme_runs_against_the_demo(tmp_path: Path) -> None:
    text = README.read_text()
    assert "```bash" not in text, "runnable README examples are ```console blocks (checked)"
    blocks = console_blocks(text)
    assert len(blocks) >= 5, "the README shows its surfaces in console blocks"
    base = free_base()
    work = tmp_path / "work"
    data = work / "data" / "demo"
    data.mkdir(parents=True)
    shims(tmp_path / "bin")
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "METALEDGER_ENDPOINTS": f"127.0.0.1:{base}",
        "METALEDGER_BASE_PORT": str(base),
        "METALEDGER_DATA": str(data),
        "METALEDGER_SKIP_INSTALL": "1",
    }
    env.pop("ETCDCTL_ENDPOINTS", None)
    log_path = tmp_path / "demo.log"
    log = open(log_path, "wb")
    demo = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "demo.sh")],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def serving() -> bool:
            assert demo.poll() is None, f"the demo exited:\n{log_path.read_text()[-4000:]}"
            return b"serving; try:" in log_path.read_bytes()

        wait_until(serving, 180, "scripts/demo.sh serves")
        demo_out = log_path.read_text()
        assert "hello from metaledger" in demo_out, demo_out
        run_session([move_ports(block, base) for block in blocks], work, env)
    finally:
        group = os.getpgid(demo.pid)
        os.killpg(group, signal.SIGINT)
        try:
            demo.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            demo.wait(timeout=10)
        # a node `cluster restart` started lives in its own group: stop it by its pid file
        for pid_file in data.glob("*.pid"):
            stop_node(read_pid(pid_file), pid_file.stem)
        log.close()
