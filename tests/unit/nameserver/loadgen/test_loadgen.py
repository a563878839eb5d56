"""nameserver.loadgen (``metaledger bench``'s engine) stands apart from the server and bench/."""

from __future__ import annotations

import subprocess
import sys


def test_loadgen_imports_no_server_module_and_no_bench() -> None:
    code = (
        "import sys, nameserver.loadgen, nameserver.loadgen.__main__; "
        "print(' '.join(sorted(m for m in sys.modules "
        "if m.split('.')[0] in {'nameserver', 'raftlog', 'snapshots', 'bench'})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out and all(m == "nameserver" or m.startswith("nameserver.loadgen") for m in out), out
