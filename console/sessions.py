"""Logins: a browser session's metaledger users, one per cluster.

``POST /api/login`` checks a user's password against the cluster (an Authenticate, then the
user's own UserGet) and keeps a :class:`~nameserver.client.Client` of that user under a random
session id; the browser holds only that id, in an ``HttpOnly``, ``SameSite=Strict`` cookie, so
no page script sees it and no other site sends it. Every ``/api/`` call of that browser then
runs as that user (the cluster's tokens are the client's: it authenticates again when one
expires). At most :data:`MAX_SESSIONS` sessions live, each until :data:`IDLE_S` without a
request or its logout; the oldest is dropped first, so memory stays bounded.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from nameserver.client import Client

__all__ = ["COOKIE", "IDLE_S", "MAX_SESSIONS", "Sessions"]

COOKIE = "metaledger_console_session"
MAX_SESSIONS = 256
IDLE_S = 3600.0


@dataclass
class _Session:
    used: float
    #: cluster name -> (user, its client)
    logins: dict[str, tuple[str, Client]] = field(default_factory=dict)


class Sessions:
    """Thread-safe: the request handlers run in Starlette's thread pool."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, idle_s: float = IDLE_S) -> None:
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    def add(self, sid: str | None, cluster: str, user: str, client: Client) -> str:
        """Keep ``client`` as ``user``'s login to ``cluster`` in session ``sid`` (a new session
        when ``sid`` is unknown); returns the session id."""
        dropped: list[Client] = []
        with self._lock:
            dropped += self._expire_locked()
            s = self._sessions.get(sid) if sid else None
            if s is None or sid is None:
                sid = secrets.token_urlsafe(32)
                s = self._sessions[sid] = _Session(time.monotonic())
            old = s.logins.pop(cluster, None)
            if old is not None:
                dropped.append(old[1])
            s.logins[cluster] = (user, client)
            s.used = time.monotonic()
            self._sessions.move_to_end(sid)
            while len(self._sessions) > self.max_sessions:
                _, gone = self._sessions.popitem(last=False)
                dropped += [c for _, c in gone.logins.values()]
        for c in dropped:
            c.close()
        return sid

    def login(self, sid: str | None, cluster: str) -> tuple[str, Client] | None:
        """``(user, client)`` of ``sid``'s login to ``cluster``, None without one."""
        if not sid:
            return None
        with self._lock:
            s = self._sessions.get(sid)
            if s is None or time.monotonic() - s.used > self.idle_s:
                return None
            s.used = time.monotonic()
            self._sessions.move_to_end(sid)
            return s.logins.get(cluster)

    def logout(self, sid: str | None, cluster: str) -> str | None:
        """End ``sid``'s login to ``cluster``; returns the user it was."""
        if not sid:
            return None
        with self._lock:
            s = self._sessions.get(sid)
            gone = s.logins.pop(cluster, None) if s is not None else None
            if s is not None and not s.logins:
                del self._sessions[sid]
        if gone is None:
            return None
        gone[1].close()
        return gone[0]

    def _expire_locked(self) -> list[Client]:
        now = time.monotonic()
        out: list[Client] = []
        for sid in [k for k, s in self._sessions.items() if now - s.used > self.idle_s]:
            out += [c for _, c in self._sessions.pop(sid).logins.values()]
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), OrderedDict()
        for s in sessions:
            for _, c in s.logins.values():
                c.close()
