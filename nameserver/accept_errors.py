"""Out of descriptors on accept: one log line now and then, not a traceback per attempt.

With the standard asyncio loop (``--no-uvloop``), a listening socket that meets EMFILE or
ENFILE logs "socket.accept() out of system resource" with a traceback for every pending
connection, then pauses that listener for a second and tries again (it does recover when
descriptors come back): hundreds of ERROR lines a second while the node is out of them.
uvloop (the default) drains such connections silently. :func:`install` puts a filter on
the ``asyncio`` logger that lets one WARNING line through per ``every_s`` for these
records, without the traceback, and leaves every other record alone.
"""

from __future__ import annotations

import logging
import time

__all__ = ["AcceptErrorFilter", "install"]

_MESSAGE = "socket.accept() out of system resource"


class AcceptErrorFilter(logging.Filter):
    def __init__(self, every_s: float = 30.0) -> None:
        super().__init__()
        self._every_s = every_s
        self._last = float("-inf")
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.msg, str) or not record.msg.startswith(_MESSAGE):
            return True
        now = time.monotonic()
        if now - self._last < self._every_s:
            self._dropped += 1
            return False
        exc = record.exc_info[1] if record.exc_info else None
        record.msg = f"{_MESSAGE} ({exc}); new connections wait until descriptors are free" + (
            f" ({self._dropped} more since the last line)" if self._dropped else ""
        )
        record.args = ()
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self._last, self._dropped = now, 0
        return True


def install(every_s: float = 30.0) -> AcceptErrorFilter:
    """Filter the ``asyncio`` logger's accept errors (idempotent per process)."""
    logger = logging.getLogger("asyncio")
    for f in logger.filters:
        if isinstance(f, AcceptErrorFilter):
            return f
    f = AcceptErrorFilter(every_s)
    logger.addFilter(f)
    return f
