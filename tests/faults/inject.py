"""Fault injection for tests that run real metaledger processes (the ``faults`` marker).

    with tmpfs(path, size_mb=30):          # a small file system to fill (root only; else skip)
        ...
    flip_byte(path, position)              # one corrupted byte, in place
    limit_descriptors(pid, soft)           # RLIMIT_NOFILE of another process (prlimit)
    writer = Writer(cluster, b"k/")        # puts in a thread; remembers what was acknowledged
    assert_acknowledged_everywhere(cluster, writer.acked, nodes)
    pause_then_kill_leader(cluster, 4, 2, goes_on)  # goes_on(what): still making progress

Every check ends the same way: every acknowledged write is present on every node, and the
nodes' images are equal (a content hash of a serializable full read of each node, taken
once all of them have applied the same offset; and etcd's Maintenance.Hash, over every
record type, equal at one revision).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from tests.harness import CHANNEL_OPTIONS, Cluster, wait_until


# --------------------------------------------------------------------------- file systems
@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int) -> Iterator[Path]:
    """Mount a ``size_mb`` tmpfs on ``path`` for the block; unmounted (lazily) after it.

    Needs root (CI runs as root); elsewhere the test is skipped, saying why."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs to fill needs root (CI runs as root)")
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@contextlib.contextmanager
def small_tmpfs(path: Path, size_bytes: int) -> Iterator[None]:
    """Mount a tmpfs of ``size_bytes`` at ``path`` (root only); always unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(
            "a disk-full test needs to mount a tmpfs (root or CAP_SYS_ADMIN): "
            f"{done.stderr.strip() or done.returncode}"
        )
    try:
        yield
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path, leave_bytes: int = 0) -> Path:
    """Write a filler file in ``path`` until at most ``leave_bytes`` are free; returns it."""
    filler = path / "filler"
    chunk = b"\0" * (256 * 1024)
    with open(filler, "ab") as f:
        while True:
            room = free_bytes(path) - leave_bytes
            if room <= 0:
                break
            try:
                f.write(chunk[: min(len(chunk), room)])
                f.flush()
            except OSError:
                break
    return filler


def flip_byte(path: Path, position: int) -> None:
    """Invert the byte at ``position`` of ``path`` in place."""
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        assert b, f"{path} has no byte {position}"
        f.seek(position)
        f.write(bytes([b[0] ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())


# --------------------------------------------------------------------------- processes
def limit_descriptors(pid: int, soft: int) -> tuple[int, int]:
    """Set another process's RLIMIT_NOFILE soft limit; returns the limits it had."""
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, old[1]))
    return old


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def raise_own_descriptor_limit(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))


def pause_then_kill_leader(
    cluster: Cluster, pause_s: float, kill_s: float, goes_on: Callable[[str], None]
) -> None:
    """The leader paused (SIGSTOP: silent, its connections open) for ``pause_s``, then the
    next leader killed for ``kill_s`` and started again; ``goes_on(what)`` after each step
    checks that the system under test still makes progress."""
    hold = threading.Event()  # never set: each fault lasts its time
    leader = cluster.leader()
    cluster.kill(leader, signal.SIGSTOP)
    hold.wait(pause_s)
    goes_on("with the metaledger leader paused")
    cluster.kill(leader, signal.SIGCONT)
    leader = cluster.leader()
    cluster.kill(leader)
    hold.wait(kill_s)
    goes_on("with the metaledger leader killed")
    cluster.start(leader)
    goes_on("with the old leader back")


# --------------------------------------------------------------------------- load
class Writer:
    """Puts unique keys through every node in turn from a thread, until stopped or bounded
    (``max_puts``, ``max_seconds``); ``acked`` holds each put the server acknowledged.

    A put that failed (any status) may still have been applied: only acknowledged ones are
    promised. Its own channels survive node restarts (short reconnect backoff)."""

    def __init__(
        self,
        cluster: Cluster,
        prefix: bytes,
        value_bytes: int = 64,
        max_puts: int = 200_000,
        max_seconds: float = 240.0,
        timeout_s: float = 3.0,
    ) -> None:
        self.prefix = prefix
        self.value_bytes = value_bytes
        self.max_puts = max_puts
        self.max_seconds = max_seconds
        self.timeout_s = timeout_s
        self.acked: dict[bytes, bytes] = {}
        self.errors: collections.Counter[str] = collections.Counter()
        self.last_error = ""
        self.attempts = 0
        self._channels = [
            grpc.insecure_channel(addr, options=CHANNEL_OPTIONS) for addr in cluster.endpoints
        ]
        self._stubs = [rpc_pb2_grpc.KVStub(ch) for ch in self._channels]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-writer", daemon=True)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        n = 0
        while not self._stop.is_set() and n < self.max_puts and time.monotonic() < deadline:
            key = self.prefix + b"%08d" % n
            value = (b"%08d:" % n).ljust(self.value_bytes, b"v")
            stub = self._stubs[n % len(self._stubs)]
            n += 1
            self.attempts = n
            try:
                stub.Put(rpc_pb2.PutRequest(key=key, value=value), timeout=self.timeout_s)
            except grpc.RpcError as exc:
                self.errors[exc.code().name] += 1
                self.last_error = f"{exc.code().name}: {exc.details()}"
                self._stop.wait(0.02)  # back off a little from a node that is down
            else:
                self.acked[key] = value

    def wait_acked(self, count: int, timeout: float) -> None:
        """Wait until ``count`` more puts than now were acknowledged."""
        target = len(self.acked) + count
        wait_until(
            lambda: len(self.acked) >= target,
            timeout,
            lambda: (
                f"the writer's acknowledged puts did not reach {target} "
                f"(errors {dict(self.errors)}, last {self.last_error!r})"
            ),
            interval=0.05,
        )

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        for ch in self._channels:
            ch.close()


# --------------------------------------------------------------------------- checks
def image_digest(cluster: Cluster, i: int) -> str:
    """A content hash of node i's kv image: every key, value and revision, in key order."""
    h = hashlib.sha256()
    for key, (value, create, mod, version) in sorted(
        cluster.range_all(i, serializable=True, timeout=30).items()
    ):
        h.update(b"%d:%s%d:%s%d %d %d\n" % (len(key), key, len(value), value, create, mod, version))
    return h.hexdigest()


def assert_acknowledged_everywhere(
    cluster: Cluster, acked: dict[bytes, bytes], nodes: list[int], timeout: float = 60.0
) -> None:
    """Once ``nodes`` applied all the leader has: every acknowledged put is on each of them
    with its value, and their images hash the same."""
    cluster.wait_converged(nodes, timeout=timeout)
    digests = {}
    for i in nodes:
        image = cluster.range_all(i, serializable=True, timeout=30)
        missing = [k for k, v in acked.items() if image.get(k, (None,))[0] != v]
        assert not missing, (
            f"{cluster.nodes[i].id} lost {len(missing)} of {len(acked)} acknowledged puts, "
            f"first {sorted(missing)[:5]}\n{cluster.log_tail(i)}"
        )
        digests[cluster.nodes[i].id] = image_digest(cluster, i)
    assert len(set(digests.values())) == 1, f"the nodes' images differ: {digests}"

    def same_hash() -> bool:  # every record type, at one apply offset
        got = {
            (r.header.revision, r.hash)
            for r in (cluster.maintenance(i).Hash(rpc_pb2.HashRequest(), timeout=5) for i in nodes)
        }
        return len(got) == 1

    wait_until(same_hash, timeout, "the nodes' Maintenance.Hash at one revision to agree")
