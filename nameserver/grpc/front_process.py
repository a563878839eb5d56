"""The Go gRPC front's process: finding its binary, running it, keeping it running.

:class:`FrontProcess` starts the binary with its ``listening`` line awaited, starts it
again (1 s later) if it exits while the node runs, and sends SIGTERM then SIGKILL on stop.
Only the PID it started is ever signalled. :func:`find_binary` says where it looked when
there is none.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nameserver.startup import StartupError

__all__ = ["BINARY_ENV", "FrontProcess", "find_binary"]

log = logging.getLogger("nameserver.grpc.front")  # the front's lines, as before the split

#: The front binary's path, if set (else the repository's build, else PATH).
BINARY_ENV = "METALEDGER_FRONT"
BINARY_NAME = "metaledger-front"
BUILD_SCRIPT = "scripts/build_front.sh"
#: How long the front may take to print ``listening``.
START_TIMEOUT_S = 10.0
#: Wait before starting a front that exited again.
RESTART_BACKOFF_S = 1.0
#: After SIGTERM, how long the front may take to finish before SIGKILL.
STOP_GRACE_S = 2.0


def find_binary() -> str:
    """The front binary: ``$METALEDGER_FRONT``, else this repository's
    ``front/bin/metaledger-front``, else ``metaledger-front`` on PATH."""
    looked = []
    given = os.environ.get(BINARY_ENV)
    if given:
        if os.access(given, os.X_OK) and os.path.isfile(given):
            return given
        looked.append(f"${BINARY_ENV}={given}")
    built = Path(__file__).resolve().parents[2] / "front" / "bin" / BINARY_NAME
    if os.access(built, os.X_OK):
        return str(built)
    looked.append(str(built))
    on_path = shutil.which(BINARY_NAME)
    if on_path:
        return on_path
    looked.append(f"{BINARY_NAME} on PATH")
    raise StartupError(
        f"--grpc-front go: no front binary ({', '.join(looked)}); build it with {BUILD_SCRIPT}"
    )


class FrontProcess:
    """The front binary run with ``argv`` and kept running until :meth:`stop`;
    ``stdin_line`` is written to each start's stdin first (the identity key)."""

    def __init__(self, argv: Sequence[str], stdin_line: bytes = b"") -> None:
        self.argv = list(argv)
        self._stdin_line = stdin_line
        self.proc: asyncio.subprocess.Process | None = None
        self.address = ""  # what it said it listens on
        self.starts = 0
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._readers: set[asyncio.Task[None]] = set()
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def stderr_tail(self) -> str:
        return " | ".join(self._stderr) or "(nothing on stderr)"

    async def start(self) -> None:
        """Start the front and wait for its ``listening`` line; supervise it from then on.
        StartupError (one line) if it cannot start."""
        await self._spawn()
        self._supervisor = asyncio.get_running_loop().create_task(
            self._supervise(), name="gRPC front supervisor"
        )

    async def _spawn(self) -> None:
        self._stderr.clear()
        proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,  # kept open: the front exits on EOF
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        self.proc = proc
        self.starts += 1
        assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
        if self._stdin_line:
            proc.stdin.write(self._stdin_line)
            with contextlib.suppress(ConnectionError):  # an exit: said by its stdout below
                await proc.stdin.drain()
        self._read(self._keep_stderr(proc.stderr))
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
        except TimeoutError:
            await self._end(proc)
            raise StartupError(
                f"--grpc-front go: {self.argv[0]} did not say it listens within "
                f"{START_TIMEOUT_S:g} s: {self.stderr_tail()}"
            ) from None
        text = line.decode(errors="replace").strip()
        if not text.startswith("listening "):
            await self._end(proc)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*self._readers), 1.0)
            why = f"exited {proc.returncode}" if not text else f"said {text!r}"
            raise StartupError(f"--grpc-front go: {self.argv[0]} {why}: {self.stderr_tail()}")
        self.address = text.removeprefix("listening ")
        self._read(self._drain(proc.stdout))
        log.info("gRPC front pid %d listening on %s", proc.pid, self.address)

    def _read(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._readers.add(task)
        task.add_done_callback(self._readers.discard)

    async def _keep_stderr(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            text = line.decode(errors="replace").rstrip()
            self._stderr.append(text)
            log.warning("gRPC front: %s", text)

    @staticmethod
    async def _drain(stream: asyncio.StreamReader) -> None:
        while await stream.read(4096):
            pass

    async def _supervise(self) -> None:
        while not self._stopping:
            proc = self.proc
            assert proc is not None
            code = await proc.wait()
            if self._stopping:
                return
            if proc.stdin is not None:
                proc.stdin.close()
            await asyncio.sleep(0.1)  # the last of its stderr
            log.error(
                "gRPC front pid %d exited (%s); starting it again in %g s; its stderr: %s",
                proc.pid,
                code,
                RESTART_BACKOFF_S,
                self.stderr_tail(),
            )
            while not self._stopping:
                await asyncio.sleep(RESTART_BACKOFF_S)
                try:
                    await self._spawn()
                    break
                except (StartupError, OSError) as exc:
                    log.error("gRPC front: %s; trying again in %g s", exc, RESTART_BACKOFF_S)

    async def _end(self, proc: asyncio.subprocess.Process) -> None:
        """SIGTERM ``proc`` (the one this started), SIGKILL after the grace period."""
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()

    async def stop(self) -> None:
        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        if self.proc is not None:
            await self._end(self.proc)
        for task in list(self._readers):
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
