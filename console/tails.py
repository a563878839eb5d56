"""The Keys page's live watch tail of a prefix: the client's watch, polled by the page.

``open`` reads the prefix's revision (one count-only range) and starts a watch of the prefix
from the revision after it in a thread of its own, so nothing written after the open is
missed, whenever the watch stream comes up. The thread keeps the last :data:`BUFFER` events
in a ring, numbered; the page polls ``events(after=N)`` every second for those past ``N``
(``dropped`` says how many it missed when it fell behind the ring).

Bounded: at most ``cap`` tails are open at once (one more is refused with a clear message);
a tail is closed when the page goes (``close``, sent as the page unloads) or, should that
never arrive (a killed browser), after ``idle_s`` without a poll (a reaper thread). Closing
one closes its watch stream, which ends its thread.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import deque
from typing import Any

from console.errors import BadInput, NotFound
from nameserver.client import Client, ClientError, WatchEvent

__all__ = ["BUFFER", "Tail", "Tails"]

log = logging.getLogger("console")

#: events a tail keeps for its page
BUFFER = 500
#: characters of a value shown in the tail
PREVIEW = 200


def _event(seq: int, ev: WatchEvent) -> dict[str, Any]:
    kv = ev.kv
    key = kv.key if kv is not None else b""
    value = kv.value if kv is not None else b""
    text = value.decode("utf-8", errors="replace")
    return {
        "seq": seq,
        "type": ev.type,
        "key": key.decode("utf-8", errors="replace"),
        "key_hex": key.hex(),
        "value": text[:PREVIEW] + ("…" if len(text) > PREVIEW else ""),
        "size": len(value),
        "revision": ev.revision,
        "lease": f"{kv.lease:x}" if kv is not None and kv.lease else "",
        "at": round(time.time(), 3),
    }


class Tail:
    """One watched prefix and its ring of events (see the module docstring)."""

    def __init__(self, tail_id: str, cluster: str, client: Client, prefix: bytes) -> None:
        self.id = tail_id
        self.cluster = cluster
        self.prefix = prefix
        # the revision the tail starts after: everything written later is in it
        self.revision = client.get(prefix or b"\0", prefix=True, count_only=True).revision
        self.events: deque[dict[str, Any]] = deque(maxlen=BUFFER)
        self.seq = 0
        self.error = ""
        self.last_poll = time.monotonic()
        self._lock = threading.Lock()
        self._watch = client.watch(prefix, prefix=True, start_revision=self.revision + 1)
        self._thread = threading.Thread(target=self._run, name=f"console-tail-{tail_id[:6]}")
        self._thread.daemon = True
        self._thread.start()

    def _run(self) -> None:
        try:
            for ev in self._watch:
                with self._lock:
                    self.seq += 1
                    self.events.append(_event(self.seq, ev))
        except ClientError as exc:
            with self._lock:
                self.error = exc.message
        except Exception as exc:  # a stream closed under it: the tail is going anyway
            with self._lock:
                self.error = self.error or f"the watch ended ({type(exc).__name__})"

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def since(self, after: int) -> dict[str, Any]:
        self.last_poll = time.monotonic()
        with self._lock:
            events = [e for e in self.events if e["seq"] > after]
            oldest = self.events[0]["seq"] if self.events else self.seq + 1
            return {
                "id": self.id,
                "events": events,
                "next": self.seq,
                "dropped": max(0, oldest - after - 1) if after < self.seq else 0,
                "error": self.error,
            }

    def close(self) -> None:
        self._watch.close()
        self._thread.join(5)


class Tails:
    """The open tails: at most ``cap``, each closed after ``idle_s`` without a poll."""

    def __init__(self, cap: int = 16, idle_s: float = 15.0) -> None:
        self.cap = cap
        self.idle_s = idle_s
        self._tails: dict[str, Tail | None] = {}  # None: being opened
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="console-tails", daemon=True)
        self._started = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._tails)

    def open(self, cluster: str, client: Client, prefix: bytes) -> dict[str, Any]:
        self.reap()
        with self._lock:
            if len(self._tails) >= self.cap:
                raise BadInput(
                    f"{self.cap} live tails are open already (the most the console keeps):"
                    " close one, or wait for an abandoned one to end"
                )
            if not self._started:
                self._started = True
                self._reaper.start()
            tail_id = secrets.token_hex(12)
            # reserved before the (blocking) open, so the cap holds under concurrent opens
            self._tails[tail_id] = None
        try:
            tail = Tail(tail_id, cluster, client, prefix)
        except BaseException:
            with self._lock:
                self._tails.pop(tail_id, None)
            raise
        with self._lock:
            self._tails[tail_id] = tail
        log.info("tail %s of %r on cluster %s opened", tail_id[:6], prefix, cluster)
        return {"id": tail_id, "revision": tail.revision, "prefix": prefix.decode(errors="replace")}

    def get(self, tail_id: str) -> Tail:
        with self._lock:
            tail = self._tails.get(tail_id)
        if tail is None:
            raise NotFound(f"no open tail {tail_id!r} (closed, or idle for {self.idle_s:.0f} s)")
        return tail

    def close(self, tail_id: str) -> bool:
        with self._lock:
            tail = self._tails.pop(tail_id, None)
        if tail is None:
            return False
        tail.close()
        log.info("tail %s closed", tail_id[:6])
        return True

    def reap(self) -> int:
        """Close the tails idle for longer than ``idle_s``; how many."""
        now = time.monotonic()
        with self._lock:
            idle = [t for t in self._tails.values() if t and now - t.last_poll > self.idle_s]
        return sum(self.close(t.id) for t in idle)

    def _reap_loop(self) -> None:
        while True:
            if self._stop.wait(max(0.5, self.idle_s / 3)):
                return
            try:
                self.reap()
            except Exception:  # the reaper must outlive any one bad close
                log.exception("closing idle tails failed")

    def close_all(self) -> None:
        self._stop.set()
        with self._lock:
            ids = [i for i, t in self._tails.items() if t is not None]
        for tail_id in ids:
            self.close(tail_id)
