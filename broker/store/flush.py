"""Flush policies: SYNC_FLUSH (group commit before the answer) and ASYNC_FLUSH (a timer).

``SYNC_FLUSH``: ``put`` returns after ``CommitLog.wait_durable`` (appends that arrive while
an fdatasync runs share the next one). ``ASYNC_FLUSH``: ``put`` returns after the write;
an ``AsyncFlusher`` thread calls ``flush`` every ``interval_ms``. Either way the store's
checkpoint is written by the same thread, so recovery starts near the end.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable


class FlushMode(enum.Enum):
    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


class AsyncFlusher:
    """Calls ``flush`` every ``interval_ms`` until stopped (and once more on stop)."""

    def __init__(self, flush: Callable[[], None], interval_ms: int) -> None:
        self._flush = flush
        self._interval = interval_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="store-flush", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._flush()
            except Exception as e:  # kept for the owner to report; the next round retries
                self.error = e

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._flush()
