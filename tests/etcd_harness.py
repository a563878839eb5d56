"""A real etcd 3.4 (``/usr/bin/etcd``) and the real ``etcdctl``, for side-by-side tests.

Issue 20 compares metaledger with etcd command by command: the same ``etcdctl`` command
against both, the same output shape and exit code. :class:`EtcdServer` runs one etcd
member on free loopback ports in its own session (stopped by PID, always);
:func:`etcdctl` runs the client against any endpoint with a clean environment.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.harness import free_ports, wait_until
from tests.ports import PortTaken, port_taken, start_on_fresh_ports

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"


def etcdctl(
    endpoint: str,
    *args: str,
    flags: Sequence[str] = (),
    stdin: str | None = None,
    timeout_s: float = 30.0,
    command_timeout_s: int = 10,
) -> subprocess.CompletedProcess[str]:
    """``etcdctl --endpoints endpoint [flags] args`` (v3 API, no ETCDCTL_* from outside);
    the result whatever its exit code."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ETCDCTL_")}
    env["ETCDCTL_API"] = "3"
    argv = [
        ETCDCTL,
        f"--endpoints={endpoint}",
        f"--command-timeout={command_timeout_s}s",
        *flags,
        *args,
    ]
    return subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, env=env
    )


def etcdctl_ok(endpoint: str, *args: str, user: str | None = None, stdin: str | None = None) -> str:
    """:func:`etcdctl` (``--user`` when given) that must succeed: its stdout."""
    done = etcdctl(endpoint, *args, flags=[f"--user={user}"] if user else [], stdin=stdin)
    assert done.returncode == 0, f"etcdctl {' '.join(args)}: {done.stderr}"
    return done.stdout


def etcdctl_json(endpoint: str, *args: str, user: str | None = None) -> Any:
    """:func:`etcdctl_ok` with ``-w json``, decoded."""
    return json.loads(etcdctl_ok(endpoint, *args, "-w", "json", user=user))


def kv_fields(doc: dict[str, Any]) -> dict[bytes, tuple[bytes, int, int, int, int]]:
    """key -> (value, create_revision, mod_revision, version, lease) from ``get -w json``."""
    return {
        base64.b64decode(kv["key"]): (
            base64.b64decode(kv.get("value", "")),
            int(kv.get("create_revision", 0)),
            int(kv.get("mod_revision", 0)),
            int(kv.get("version", 0)),
            int(kv.get("lease", 0)),
        )
        for kv in doc.get("kvs", ())
    }


def etcdctl_restore(snapshot: Path, root: Path) -> tuple[int, int]:
    """``etcdctl snapshot restore`` of ``snapshot`` into ``root/data`` as member ``e0`` on free
    ports: the (client, peer) ports to start :class:`EtcdServer` on (``root``, ``ports=``)."""
    client, peer = free_ports(2)
    peer_url = f"http://127.0.0.1:{peer}"
    etcdctl_ok(
        "http://127.0.0.1:1",  # restore dials no endpoint
        "snapshot",
        "restore",
        str(snapshot),
        f"--data-dir={root / 'data'}",
        "--name=e0",
        f"--initial-cluster=e0={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
    )
    return client, peer


class EtcdServer:
    """One etcd member on 127.0.0.1 (``extra`` are more etcd flags: TLS, quota, auth…).

    ``scheme`` is the client URL's scheme (``https`` when the extra flags give a server
    certificate); ``ports`` the client and peer ports (free ones when not given), so a data
    dir that ``etcdctl snapshot restore`` made for member ``e0`` at that peer URL can be
    served from ``root / "data"``. Use as a context manager; :meth:`stop` kills the process group by PID.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        extra: Sequence[str] = (),
        scheme: str = "http",
        ports: tuple[int, int] | None = None,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.log_path = self.root / "etcd.log"
        self.extra = list(extra)
        if ports is not None:
            self._start(scheme, *ports)
            return
        fresh = not (self.root / "data").exists()

        def repick() -> None:  # and forget what the failed start wrote
            if fresh:
                shutil.rmtree(self.root / "data", ignore_errors=True)
            picked[:] = free_ports(2)

        picked = free_ports(2)
        # ports picked here are picked again if one was taken before etcd bound it
        start_on_fresh_ports(lambda: self._start(scheme, picked[0], picked[1]), repick)

    def _start(self, scheme: str, client: int, peer: int) -> None:
        self.endpoint = f"{scheme}://127.0.0.1:{client}"
        self.address = f"127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        argv = [
            ETCD,
            "--name=e0",
            f"--data-dir={self.root / 'data'}",
            f"--listen-client-urls={self.endpoint}",
            f"--advertise-client-urls={self.endpoint}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=e0={peer_url}",
            f"--initial-cluster-token=etcd-harness-{os.getpid()}-{client}",
            *self.extra,
        ]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        # until etcd holds both ports: a cluster started next picks its free ports then, and
        # cannot pick one of these (free_ports probes by binding)
        try:
            for port in (client, peer):
                wait_until(
                    lambda port=port: self._listening(port),
                    30,
                    lambda: f"etcd does not listen:\n{self.log_tail()}",
                )
        except AssertionError:
            self.stop()
            if port_taken(self.proc.returncode, self.log_tail(), codes=(1,)):
                raise PortTaken(f"etcd: port {client} or {peer} taken") from None
            raise
        except BaseException:
            self.stop()
            raise

    def _listening(self, port: int) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"etcd exited {self.proc.returncode}:\n{self.log_tail()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    def wait_ready(self, flags: Sequence[str] = (), timeout: float = 30.0) -> EtcdServer:
        """Until ``etcdctl endpoint health`` passes (``flags``: TLS or user options)."""

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"etcd exited {self.proc.returncode}:\n{self.log_tail()}")
            return etcdctl(self.endpoint, "endpoint", "health", flags=flags).returncode == 0

        wait_until(healthy, timeout, lambda: f"etcd not healthy:\n{self.log_tail()}")
        return self

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout)

    def __enter__(self) -> EtcdServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
