"""Runs python-etcd3's own suite against a metaledger cluster laid out as the suite expects.

The suite was written for ``pifpaf run etcd --cluster``: three members named pifpaf0..2, the
first on localhost:2379, which a few of its tests dial with no address at all; its
serializable-read tests pause the other two members with ``pgrep -f -- '--name pifpaf[12]'``
and SIGSTOP. So this runs in namespaces of its own (``unshare --net --pid --mount-proc``,
which :func:`argv` builds): port 2379 is free there whatever runs on the machine, and pgrep
sees only this run's processes. Nodes are named pifpaf0..2 and nodes 1 and 2 carry
``--name pifpafN`` in their command lines (an ``-X`` option, which Python ignores).

    python -m tests.etcd_client_suites SRC_ROOT JUNIT_XML LOG

runs ``SRC_ROOT/tests/test_etcd3.py`` (the unpacked source distribution) and writes its JUnit
XML; the exit code is pytest's, or 3 when the cluster did not come up.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from protos.etcdserverpb import rpc_pb2
from tests.harness import Cluster

#: the client port python-etcd3's tests dial when they are given none
DEFAULT_CLIENT_PORT = 2379
#: <linux/sockios.h>, <net/if.h>
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def argv(src_root: Path, xml: Path, log: Path) -> list[str]:
    """The command that runs this module in new network, PID and mount namespaces."""
    return [
        *("unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"),
        *(sys.executable, "-m", "tests.etcd_client_suites"),
        *(str(src_root), str(xml), str(log)),
    ]


class PifpafCluster(Cluster):
    """Nodes pifpaf0..2, node 0 on the client port 2379, nodes 1 and 2 findable by pgrep."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, 3, start=False)
        self.nodes = [
            dataclasses.replace(
                s,
                id=f"pifpaf{i}",
                client_port=DEFAULT_CLIENT_PORT if i == 0 else s.client_port,
                data_dir=self.root / f"pifpaf{i}",
                log_path=self.root / f"pifpaf{i}.log",
            )
            for i, s in enumerate(self.nodes)
        ]
        self.initial_cluster = ",".join(f"{s.id}={s.peer_addr}" for s in self.nodes)

    def command(self, i: int) -> list[str]:
        cmd = super().command(i)
        return [cmd[0], "-X", f"--name pifpaf{i}", *cmd[1:]]


def suite_env(src_root: Path, version: str) -> dict[str, str]:
    """What upstream's tox and pifpaf give the suite: the source tree and its ``etcd3/`` on
    PYTHONPATH (one test patches ``etcdrpc.AuthStub``), the endpoint, the etcd version.
    Not ``ETCDCTL_ENDPOINTS``: etcdctl 3.4 refuses it beside the suite's ``--endpoints``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "PYTHONPATH" and not k.upper().startswith("ETCDCTL_")
    }
    env["PYTHONPATH"] = f"{src_root}{os.pathsep}{src_root / 'etcd3'}"
    env["PYTHON_ETCD_HTTP_URL"] = f"http://localhost:{DEFAULT_CLIENT_PORT}"
    env["TEST_ETCD_VERSION"] = f"v{version}"
    # the released client's generated code predates protobuf 4's C backend
    env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"
    return env


def loopback_up() -> None:
    """Bring up ``lo``, down in a new network namespace (``ip link set lo up``, by ioctl)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def main(src_root: Path, xml: Path, log: Path) -> int:
    loopback_up()
    with tempfile.TemporaryDirectory(prefix="pifpaf-") as tmp:
        cluster = PifpafCluster(Path(tmp))
        failed = True
        try:
            for i in range(cluster.n):
                cluster.start(i)
            cluster.wait_ready(60)
            status = cluster.maintenance(0).Status(rpc_pb2.StatusRequest(), timeout=5)
            with open(log, "wb") as out:
                done = subprocess.run(
                    [
                        *(sys.executable, "-m", "pytest", "-c", str(src_root / "pytest.ini")),
                        *("--rootdir", str(src_root), "-p", "no:cacheprovider"),
                        *("--timeout", "120", f"--junitxml={xml}", "-o", "junit_family=xunit1"),
                        "tests/test_etcd3.py",
                    ],
                    cwd=src_root,
                    env=suite_env(src_root, status.version),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=900,
                )
            failed = False
            return done.returncode
        finally:
            cluster.close(failed=failed)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
