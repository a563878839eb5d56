"""Run one function in a forked child process and get its string result (BGSAVE-style).

Why: a snapshot of a 1M-key image takes seconds of pure-Python encoding. On a thread it
holds the GIL half of that time, and the apply, consensus and gRPC threads wait for it
(commit stalls of 70-150 ms were measured). A forked child gets a copy-on-write view of the
immutable image as of the fork, encodes and writes the file on its own interpreter, and
exits; the parent's thread only waits in ``read``/``waitpid``, which release the GIL.

What the child may do: compute and touch files. It must not log, use gRPC, or take any
lock another thread of the parent may have held at the fork (only the forking thread
exists in the child). It leaves through ``os._exit`` whatever happens, so no ``atexit``
handler, ``finally`` of another frame or buffered stream of the parent runs twice.
It dies with the thread that forked it (``PR_SET_PDEATHSIG``, Linux), so killing a node
never leaves a writer behind.

Errors::

    ChildFailedError     the child raised (its message), exited non-zero or was killed
    ForkError            no child could be started (os.fork or os.pipe failed, e.g. ENOMEM
                         under strict overcommit); also an OSError
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

__all__ = [
    "ChildFailedError",
    "ChildResult",
    "ForkError",
    "can_fork",
    "error_message",
    "exit_child",
    "run_in_child",
]

_PR_SET_PDEATHSIG = 1
try:  # loaded here, not in the child: dlopen takes a lock another thread may hold at fork
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - no C library to load
    _LIBC = None
_OK = b"ok:"
_CHILD_NICENESS = 10
_MAX_MESSAGE_BYTES = 4096


class ChildFailedError(Exception):
    """The child did not return a result: `reason` says why (its exception, exit status or
    signal)."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what} in a child process failed: {reason}")
        self.reason = reason


class ForkError(OSError):
    """No child could be started; nothing ran."""


def can_fork() -> bool:
    return hasattr(os, "fork")


@dataclass(frozen=True, slots=True)
class ChildResult:
    """What :func:`run_in_child` returns: `fn`'s result, and what the child cost: the
    fork call in the parent (the only time the parent's threads wait for it: the kernel
    copies the page tables) and the child's CPU seconds."""

    value: str
    pid: int
    fork_ms: float
    cpu_s: float


def run_in_child(fn: Callable[[], str], what: str) -> ChildResult:
    """``fn()`` computed in a forked child; blocks the calling thread (not the GIL) until
    the child exits. Raises ChildFailedError if `fn` raised in the child (its type and
    message), or the child died (e.g. killed), ForkError if no child could be started."""
    try:
        read_fd, write_fd = os.pipe()
    except OSError as exc:
        raise ForkError(exc.errno, f"{what}: no pipe to a child: {exc.strerror}") from exc
    parent = os.getpid()
    started = time.perf_counter()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        raise ForkError(exc.errno, f"{what}: fork failed: {exc.strerror}") from exc
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(read_fd)
        _child(fn, write_fd, parent)
    fork_ms = (time.perf_counter() - started) * 1000
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        message = pipe.read()  # until the child closes it, as it ends (EOF)
    _, status, usage = os.wait4(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and message.startswith(_OK):
        cpu_s = usage.ru_utime + usage.ru_stime
        return ChildResult(message[len(_OK) :].decode(), pid, fork_ms, cpu_s)
    if os.WIFSIGNALED(status):
        reason = f"killed by signal {signal.Signals(os.WTERMSIG(status)).name}"
    else:
        text = message.decode(errors="replace") or "no message"
        reason = f"exit status {os.waitstatus_to_exitcode(status)}: {text}"
    raise ChildFailedError(what, reason)


def _child(fn: Callable[[], str], write_fd: int, parent: int) -> None:  # pragma: no cover
    status = 1
    # A collection would touch every object of the inherited heap (copying it page by
    # page) to free nothing: this process lives for one function call.
    gc.disable()
    try:
        # The parent's handlers would run here (and write to its event loop's wakeup fd).
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        _die_with_parent(parent)
        _lower_priority()
        result = _OK + fn().encode()
        status = 0
    except BaseException as exc:
        result = error_message(exc)
    exit_child(write_fd, result, status)


def error_message(exc: BaseException) -> bytes:
    """What a child says of the error it ends with: its type and message, at most 4 KiB."""
    return f"{type(exc).__name__}: {exc}".encode(errors="replace")[:_MAX_MESSAGE_BYTES]


def exit_child(write_fd: int, message: bytes, status: int) -> NoReturn:  # pragma: no cover
    """The end of a forked child: ``message`` written whole to ``write_fd``, which is
    closed (its reader sees the end at once, not after this process's memory is freed), then
    ``os._exit(status)`` whatever happens (no handler or buffer of the parent runs twice)."""
    try:
        view = memoryview(message)
        while view:
            view = view[os.write(write_fd, view) :]
        os.close(write_fd)
    finally:
        os._exit(status)


def _lower_priority() -> None:  # pragma: no cover - runs in the child
    """Background work: on a busy machine the node's own threads (the commit path) go
    first; the child takes what CPU is left.

    With the kernel's session autogroups (Linux, on by default on desktops and many VMs)
    CPU time is shared fairly between sessions first and nice only orders the tasks of one
    session: a child in its parent's session would spend the node's share, and the node's
    threads would wake up behind other sessions. So the child starts a session of its own
    and lowers that session's weight, and lowers its own nice for kernels without
    autogroups."""
    try:
        os.setsid()
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(_CHILD_NICENESS))
    except OSError:
        pass
    os.nice(_CHILD_NICENESS)


def _die_with_parent(parent: int) -> None:  # pragma: no cover - runs in the child
    try:
        assert _LIBC is not None
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (AssertionError, AttributeError):  # not Linux: the child finishes its file, exits
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
