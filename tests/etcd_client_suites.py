"""Runs python-etcd3's own suite against a metaledger cluster laid out as the suite expects.

The suite was written for ``pifpaf run etcd --cluster``: three members named pifpaf0..2, the
first on localhost:2379, which a few of its tests dial with no address at all; its
serializable-read tests pause the other two members with ``pgrep -f -- '--name pifpaf[12]'``
and SIGSTOP. So this runs in namespaces of its own (``unshare --net --pid --mount-proc``,
which :func:`argv` builds): port 2379 is free there whatever runs on the machine, and pgrep
sees only this run's processes. Nodes are named pifpaf0..2 and nodes 1 and 2 carry
``--name pifpafN`` in their command lines (an ``-X`` option, which Python ignores).

    python -m tests.etcd_client_suites SRC_ROOT OUT_DIR [RUN ...]

runs ``SRC_ROOT/tests/test_etcd3.py`` (a copy of tests/thirdparty/python-etcd3) as its
upstream runner's two settings do, and writes each run's JUnit XML and output in ``OUT_DIR``
(:data:`RUNS`, or the ones named): every test but ``TestFailoverClient`` with
``PYTHON_ETCD_HTTP_URL`` (node 0), then ``TestFailoverClient`` alone with ``ETCDCTL_ENDPOINTS``
(all three nodes), which it needs and which etcdctl 3.4 refuses beside the ``--endpoints`` the
suite gives it when ``PYTHON_ETCD_HTTP_URL`` is set. The first setting's tests are two runs:
the few that mostly wait on the suite's own sleeps (:data:`SLEEPY`, about 50 of the suite's
100 s) and the others, so that :data:`SHARDS` can run them at once, each shard on a cluster of
its own in namespaces of its own (every test of the suite cleans the whole keyspace after
itself, and the serializable-read tests stop nodes 1 and 2: one cluster runs one test at a
time). The exit code is the first nonzero pytest exit code, or 3 when the cluster did not come
up.
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


#: the suite's tests that need ``ETCDCTL_ENDPOINTS`` (its pifpaf runner's multi-node setting)
FAILOVER_TESTS = "tests/test_etcd3.py::TestFailoverClient"
#: tests that mostly sleep (the suite's own ``time.sleep``: 9-10 s of lock TTLs, 5-7 s of
#: watch pauses each), run beside the others on a cluster of their own. pytest's
#: ``--deselect`` takes node id prefixes: every test whose name starts with one of these
#: names is here too (``test_watch_prefix``, ``test_watch_prefix_callback``, ...)
SLEEPY = tuple(
    f"tests/test_etcd3.py::TestEtcd3::{name}"
    for name in (
        "test_lock_acquire_none",
        "test_lock_refresh",
        "test_lock_expire",
        "test_watch_prefix",
        "test_watch_prefix_callback",
        "test_watch_prefix_callback_with_filter",
    )
)
#: the runs: name (their ``NAME.xml`` and ``NAME.log`` in OUT_DIR) and pytest's selection
RUNS = (
    (
        "suite",
        (
            "tests/test_etcd3.py",
            *("--deselect", FAILOVER_TESTS),
            *(a for test in SLEEPY for a in ("--deselect", test)),
        ),
    ),
    ("sleepy", SLEEPY),
    ("failover", (FAILOVER_TESTS,)),
)
#: the runs each cluster runs, one after the other; the clusters run at once
SHARDS = (("sleepy",), ("suite", "failover"))


def argv(src_root: Path, out_dir: Path, runs: tuple[str, ...] = ()) -> list[str]:
    """The command that runs this module (``runs``: those of :data:`RUNS`, all when empty)
    in new network, PID and mount namespaces."""
    return [
        *("unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"),
        *(sys.executable, "-m", "tests.etcd_client_suites", str(src_root), str(out_dir)),
        *runs,
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


def suite_env(
    src_root: Path, version: str, *, failover_endpoints: list[str] | None = None
) -> dict[str, str]:
    """What upstream's tox and pifpaf give the suite: the source tree and its ``etcd3/`` on
    PYTHONPATH (one test patches ``etcdrpc.AuthStub``), the etcd version, and either the
    endpoint (``PYTHON_ETCD_HTTP_URL``) or, for the failover run, every member's
    (``ETCDCTL_ENDPOINTS``): etcdctl 3.4 refuses the two together."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "PYTHONPATH" and not k.upper().startswith(("ETCDCTL_", "PYTHON_ETCD_"))
    }
    env["PYTHONPATH"] = f"{src_root}{os.pathsep}{src_root / 'etcd3'}"
    if failover_endpoints is None:
        env["PYTHON_ETCD_HTTP_URL"] = f"http://localhost:{DEFAULT_CLIENT_PORT}"
    else:
        env["ETCDCTL_ENDPOINTS"] = ",".join(failover_endpoints)
    env["TEST_ETCD_VERSION"] = f"v{version}"
    return env


def loopback_up() -> None:
    """Bring up ``lo``, down in a new network namespace (``ip link set lo up``, by ioctl)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def main(src_root: Path, out_dir: Path, names: tuple[str, ...] = ()) -> int:
    unknown = set(names) - {name for name, _ in RUNS}
    if unknown:
        raise SystemExit(f"no such runs: {sorted(unknown)}")
    loopback_up()
    with tempfile.TemporaryDirectory(prefix="pifpaf-") as tmp:
        cluster = PifpafCluster(Path(tmp))
        failed = True
        try:
            for i in range(cluster.n):
                cluster.start(i)
            cluster.wait_ready(60)
            status = cluster.maintenance(0).Status(rpc_pb2.StatusRequest(), timeout=5)
            endpoints = [f"http://localhost:{s.client_port}" for s in cluster.nodes]
            code = 0
            for name, selection in RUNS:
                if names and name not in names:
                    continue
                env = suite_env(
                    src_root,
                    status.version,
                    failover_endpoints=endpoints if name == "failover" else None,
                )
                with open(out_dir / f"{name}.log", "wb") as out:
                    done = subprocess.run(
                        [
                            *(sys.executable, "-m", "pytest", "-c", str(src_root / "pytest.ini")),
                            *("--rootdir", str(src_root), "-p", "no:cacheprovider"),
                            *("--timeout", "120", "-o", "junit_family=xunit1"),
                            f"--junitxml={out_dir / f'{name}.xml'}",
                            *selection,
                        ],
                        cwd=src_root,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        timeout=900,
                    )
                code = code or done.returncode
            failed = False
            return code
        finally:
            cluster.close(failed=failed)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), tuple(sys.argv[3:])))
