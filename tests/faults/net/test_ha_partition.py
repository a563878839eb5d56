"""The broker's HA stream across a partition: master and slave in network namespaces of
their own (tests/faults/net/), the stream black-holed for 8 s while the master keeps
appending, then healed. The slave must notice the silent master (heartbeats every second,
5 s deadlines, TCP_USER_TIMEOUT), dial again, and hold everything the master held at the
heal within 5 s of it. With the old 20 s idle timeout the stream stayed on its stuck
connection until TCP's backed-off retransmission came through."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.faults.net.netns import Net, unavailable_reason
from tests.faults.net.run import _env, stop_all

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]

HA_PORT = 10912


class Lines:
    """The JSON lines a node prints, read by a thread as they come."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.rows: list[dict[str, float]] = []
        assert proc.stdout is not None
        self._out = proc.stdout
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._out:
            try:
                self.rows.append(json.loads(line))
            except ValueError:
                continue

    def last(self) -> dict[str, float]:
        return self.rows[-1] if self.rows else {"t": 0.0, "end": 0, "sessions": 0}


def _wait(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {what}")
        time.sleep(0.05)


def test_the_slave_catches_up_within_5_s_of_the_heal(tmp_path: Path) -> None:
    procs: list[subprocess.Popen[bytes] | None] = []
    with Net(2) as net:
        try:
            for role, i, extra in (
                ("master", 0, ["--listen", f"{net.ips[0]}:{HA_PORT}"]),
                ("slave", 1, ["--master", f"{net.ips[0]}:{HA_PORT}"]),
            ):
                cmd = [
                    *net.exec_prefix(net.members[i]),
                    sys.executable,
                    "-m",
                    "tests.faults.net.ha_node",
                    role,
                    "--dir",
                    str(tmp_path / role),
                    *extra,
                ]
                procs.append(
                    subprocess.Popen(
                        cmd, stdout=subprocess.PIPE, env=_env(), start_new_session=True
                    )
                )
            master, slave = Lines(procs[0]), Lines(procs[1])  # type: ignore[arg-type]
            _wait(lambda: slave.last()["end"] > 0, 30, "the slave did not start copying")
            net.cut(0, 1)
            threading.Event().wait(8.0)  # the partition's length
            net.heal()
            healed = time.monotonic()
            target = master.last()["end"]
            _wait(
                lambda: slave.last()["end"] >= target,
                20,
                f"the slave did not reach {target} after the heal",
            )
            caught = next(r["t"] for r in slave.rows if r["end"] >= target)
            assert caught - healed <= 5.0, f"the slave caught up {caught - healed:.2f} s after"
        finally:
            stop_all(procs)
