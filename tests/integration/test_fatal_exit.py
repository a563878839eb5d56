"""A node that cannot go on exits non-zero with the reason (issue 14): a bug on the apply
path (here: the state machine's publish raising, planted in a real node process) is logged
once with its traceback, and the process exits with FATAL_EXIT_CODE instead of staying up
as a follower that applies nothing more."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from nameserver.server import FATAL_EXIT_CODE
from protos.etcdserverpb import rpc_pb2
from tests.harness import LAUNCHER_ENV, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.faults]

#: Run before the node: publishing an image that holds the key "boom" raises (a bug).
PLANT_BUG = """
from nameserver.state.machine import MetadataStateMachine
_publish = MetadataStateMachine.publish
def _buggy_publish(self):
    delta = self._delta
    if delta is not None and delta.kv.get(b"boom") is not None:
        raise RuntimeError("planted bug in publish")
    _publish(self)
MetadataStateMachine.publish = _buggy_publish
"""


class _BuggyCluster(Cluster):
    def command(self, i: int) -> list[str]:
        cmd = super().command(i)
        assert cmd[1] == "-c", cmd  # the python launcher (LAUNCHER_ENV)
        cmd[2] = PLANT_BUG + cmd[2]
        return cmd


def test_a_bug_in_apply_stops_the_node_with_a_non_zero_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LAUNCHER_ENV, "python")
    with _BuggyCluster(tmp_path, n=1) as c:
        c.wait_ready()
        c.put(0, b"fine", b"1")
        with pytest.raises(grpc.RpcError):
            c.stub(0).Put(rpc_pb2.PutRequest(key=b"boom", value=b"x"), timeout=5)
        assert c.wait_exit(0, 30) == FATAL_EXIT_CODE
        log = c.log_text(0)
    assert log.count("Traceback") == 1, log
    assert "CRITICAL" in log and "planted bug in publish" in log, log
    assert "stopped: apply failed at offsets" in log, log
