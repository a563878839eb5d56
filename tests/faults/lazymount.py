"""Mount :mod:`tests.faults.lazyfs` for a test, cut its power, mount it again, clean up.

``LazyMount(root)`` makes ``root/backing``, ``root/mnt`` (and the filesystem's side
directory) and serves ``root/mnt`` from a child process; :meth:`LazyMount.cut` unmounts it
(lazily, by that path), which makes the child drop every unsynced write and exit, then
mounts it again; a child the kernel does not release within :data:`RELEASE_S` (another
mount namespace holds a copy of the mount) has its FUSE connection aborted (fusectl),
which ends it the same way. :meth:`LazyMount.close` unmounts and stops the child (by its PID) even
after a failure. ``fuse_unavailable()`` says why a test must skip, or None.
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.harness import wait_until

REPO = Path(__file__).resolve().parents[2]


def fuse_unavailable() -> str | None:
    """Why this machine cannot serve a FUSE filesystem (None when it can)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    if os.geteuid() != 0:
        return "mounting FUSE here needs root"
    if ctypes.util.find_library("fuse") is None:
        return "libfuse 2 is not installed (Debian: libfuse2)"
    try:
        import fuse  # type: ignore[import-untyped]  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"fusepy does not load: {exc}"
    return None


FUSECTL = Path("/sys/fs/fuse/connections")
#: after its lazy unmount a lazyfs child exits once the kernel lets the filesystem go; if
#: it has not after this long, its FUSE connection is aborted (fusectl)
RELEASE_S = 10.0


def _fusectl() -> bool:
    """The kernel's FUSE control filesystem, mounted if it was not (Debian does not)."""
    if any(FUSECTL.iterdir()) or os.path.ismount(FUSECTL):
        return True
    done = subprocess.run(
        ["mount", "-t", "fusectl", "fusectl", str(FUSECTL)], capture_output=True, check=False
    )
    return done.returncode == 0


def _abort(connection: int) -> str:
    """Abort FUSE connection ``connection`` (its requests fail, its daemon's loop ends);
    what it was waiting on, for the record."""
    if not _fusectl():
        return f"fuse connection {connection}: fusectl cannot be mounted"
    conn = FUSECTL / str(connection)
    try:
        waiting = (conn / "waiting").read_text().strip()
        (conn / "abort").write_text("1")
    except OSError as exc:
        return f"fuse connection {connection}: {exc}"
    return f"fuse connection {connection} aborted ({waiting} requests were waiting)"


def _why_stuck(pid: int) -> str:
    """What a lazyfs child that outlived its unmount is doing: the kernel's FUSE
    connections with requests still waiting, and the child's Python threads (py-spy)."""
    out = []
    for conn in sorted(FUSECTL.glob("*")):
        try:
            waiting = (conn / "waiting").read_text().strip()
        except OSError:
            continue
        out.append(f"fuse connection {conn.name}: {waiting} requests waiting")
    spy = shutil.which("py-spy")
    if spy is not None:
        try:
            dump = subprocess.run(
                [spy, "dump", "-p", str(pid)], capture_output=True, text=True, timeout=20
            )
            out.append(dump.stdout[-4000:] or dump.stderr[-500:])
        except subprocess.TimeoutExpired:
            out.append("py-spy dump: no answer within 20 s")
    return "\n".join(out)


def _mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f)


class LazyMount:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.backing = self.root / "backing"
        self.mnt = self.root / "mnt"
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mnt.mkdir(parents=True, exist_ok=True)
        self.log = self.root / "lazyfs.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.cuts = 0
        self.stuck = ""  # what a cut that did not finish was waiting for
        self.connection: int | None = None  # the kernel's FUSE connection (fusectl's number)
        self.aborts: list[str] = []  # cuts the kernel did not let go of by itself

    def mount(self, timeout: float = 20.0) -> None:
        assert self.proc is None, "already mounted"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.lazyfs", str(self.backing), str(self.mnt)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=REPO,
            )
        proc = self.proc

        def up() -> bool:
            assert proc.poll() is None, f"lazyfs exited {proc.returncode}: {self.log_text()}"
            return _mounted(self.mnt)

        wait_until(up, timeout, f"lazyfs to mount {self.mnt}", interval=0.02)
        self.connection = os.minor(os.stat(self.mnt).st_dev)

    def _unmount(self, timeout: float) -> int | None:
        """Lazy unmount by our path, then wait for the child (its exit code, None if it
        had to be killed)."""
        if _mounted(self.mnt):
            subprocess.run(["umount", "-l", str(self.mnt)], check=False, capture_output=True)
        proc, self.proc = self.proc, None
        if proc is None:
            return 0
        try:
            return proc.wait(min(timeout, RELEASE_S))
        except subprocess.TimeoutExpired:
            pass
        # The kernel lets the filesystem go once no mount namespace holds it, and a lazy
        # unmount here reaches only this one: the host's mounts are private, so a process
        # that `ip netns exec` started while this was mounted (a network fault test or
        # campaign running beside this test) keeps a copy of the mount until it exits.
        # That held cuts for over a minute. Aborting the connection ends the child's loop;
        # it then cuts the power as after any unmount. Said on the test's output.
        if self.connection is not None:
            said = _abort(self.connection)
            self.aborts.append(said)
            print(f"lazyfs: {self.mnt}: not released {RELEASE_S:g} s after its unmount; {said}")
        try:
            return proc.wait(max(1.0, timeout - RELEASE_S))
        except subprocess.TimeoutExpired:
            self.stuck = _why_stuck(proc.pid)  # for the failure's message
            proc.kill()
            proc.wait(10)
            return None

    def cut(self, timeout: float = 60.0) -> None:
        """Power cut: drop every unsynced write and entry, then mount again. Whatever had
        files open under the mount must be gone (SIGKILLed) first."""
        code = self._unmount(timeout)
        assert code == 0, (
            f"lazyfs did not finish its cut (exit {code}): {self.log_text()}\n{self.stuck}"
        )
        self.cuts += 1
        self.mount()

    def close(self) -> None:
        self._unmount(30)

    def __enter__(self) -> LazyMount:
        self.mount()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""
