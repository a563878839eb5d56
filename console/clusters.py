"""One cluster as the console sees it: its status now, and a bounded history of samples.

:meth:`ClusterView.status` asks every member what ``metaledger status`` asks (Admin.Status of
the endpoints given, then of every other member the member list names, at its first client
URL) and the raised alarms; a member that does not answer is listed as down. The
:class:`Sampler` thread calls it every ``sample_every_s`` and keeps ``(time, commit offset,
apply lag)`` in a ring of ``samples_kept`` entries, so memory stays bounded however long the
console runs; the commits/s chart is the difference of consecutive samples. The first failure
to reach a cluster, and each return, is one log line.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from console.config import ClusterSpec, ConsoleConfig
from nameserver.client import Client, ClientError, NodeStatus

__all__ = ["ClusterView", "Sample", "Sampler"]

log = logging.getLogger("console")


def _first_url(urls: list[str]) -> str:
    for url in urls:
        return url.removeprefix("http://").removeprefix("https://").rstrip("/")
    return ""


@dataclass(frozen=True, slots=True)
class Sample:
    t: float
    commit_offset: int
    apply_lag: int


class ClusterView:
    """A client of one cluster; thread-safe (the client is, and the status client is swapped
    under a lock when the member list names other endpoints)."""

    def __init__(self, spec: ClusterSpec, config: ConsoleConfig) -> None:
        self.name = spec.name
        self.endpoints = list(spec.connection.endpoints)
        self.config = config
        self._kwargs = spec.connection.client_kwargs()
        self.client = Client(self.endpoints, timeout_s=config.timeout_s, **self._kwargs)
        self._lock = threading.Lock()
        self._status_clients: dict[tuple[str, ...], Client] = {}

    @property
    def user(self) -> str | None:
        """The ``--user`` the console itself connects as (None: anonymous)."""
        user = self._kwargs.get("user")
        return str(user) if user is not None else None

    def connect_as(self, user: str, password: str) -> Client:
        """A client of this cluster as ``user`` (the console's TLS files, not its user)."""
        kwargs = {k: v for k, v in self._kwargs.items() if k not in ("user", "password")}
        return Client(
            self.endpoints, timeout_s=self.config.timeout_s, user=user, password=password, **kwargs
        )

    def close(self) -> None:
        with self._lock:
            clients, self._status_clients = list(self._status_clients.values()), {}
        for c in clients:
            c.close()
        self.client.close()

    def _status_client(self, endpoints: tuple[str, ...]) -> Client:
        with self._lock:
            c = self._status_clients.get(endpoints)
            if c is None:
                c = Client(list(endpoints), timeout_s=self.config.timeout_s, **self._kwargs)
                self._status_clients[endpoints] = c
            return c

    def status(self) -> dict[str, Any]:
        """The Cluster page's numbers (JSON-ready); ``reachable`` is False, with ``error``,
        when no endpoint answered."""
        answers = self.client.status_all()
        up = [a for a in answers if isinstance(a, NodeStatus)]
        errors = {a.endpoint: a for a in answers if isinstance(a, ClientError)}
        out: dict[str, Any] = {
            "cluster": self.name,
            "endpoints": self.endpoints,
            "reachable": bool(up),
            "quota_bytes": self.config.quota_bytes,
            "sampled_at": time.time(),
        }
        if not up:
            first = next(iter(errors.values()), None)
            out["error"] = first.message if first else "no endpoint"
            out["members"], out["alarms"] = [], []
            return out
        names: dict[int, str] = {}
        try:
            members = self.client.members()
            alarms = self.client.alarms()
        except ClientError as exc:
            members, alarms = [], []
            out["warning"] = exc.message
        known = {s.member_id for s in up} | {s.id for s in up}
        rest = tuple(
            _first_url(m.client_urls)
            for m in members
            if m.member_id not in known and m.name not in known and m.client_urls
        )
        if rest:
            for a in self._status_client(rest).status_all():
                if isinstance(a, NodeStatus):
                    up.append(a)
                    known |= {a.member_id, a.id}
                else:
                    errors[a.endpoint] = a
        rows = [_row(s) for s in up]
        for m in members:
            names[m.member_id] = m.name
            if m.member_id in known or m.name in known:
                continue
            endpoint = _first_url(m.client_urls)
            err = errors.get(endpoint)
            rows.append(
                {
                    "name": m.name or f"{m.member_id:x}",
                    "member_id": f"{m.member_id:x}",
                    "endpoint": endpoint or "-",
                    "up": False,
                    "error": err.message if err else "has not announced its client URL",
                }
            )
        leader = _leader(up)
        out["leader"] = leader.id if leader else ""
        out["term"] = max(s.term for s in up)
        if leader is not None:
            for row in rows:
                if row["up"]:
                    row["lag"] = max(0, leader.commit_offset - row["apply_offset"])
        rows.sort(key=lambda r: str(r["name"]))
        out["members"] = rows
        out["alarms"] = [
            {"member": names.get(mid, f"{mid:x}"), "member_id": f"{mid:x}", "alarm": alarm}
            for mid, alarm in alarms
        ]
        out["db_size_bytes"] = max(s.db_size_bytes for s in up)
        out["commit_offset"] = max(s.commit_offset for s in up)
        out["apply_lag"] = max(s.applied_lag for s in up)
        return out


def _leader(up: list[NodeStatus]) -> NodeStatus | None:
    """The member that says it leads in the highest term."""
    leaders = [s for s in up if s.role == "leader"]
    return max(leaders, key=lambda s: s.term) if leaders else None


def _row(s: NodeStatus) -> dict[str, Any]:
    return {
        "name": s.id,
        "member_id": f"{s.member_id:x}",
        "endpoint": s.endpoint,
        "up": True,
        "role": s.role,
        "term": s.term,
        "leader": s.leader,
        "end_offset": s.end_offset,
        "commit_offset": s.commit_offset,
        "apply_offset": s.apply_offset,
        "applied_lag": s.applied_lag,
        "db_size_bytes": s.db_size_bytes,
        "has_quorum": s.has_quorum,
    }


class Sampler:
    """A daemon thread sampling each view every ``sample_every_s`` into a bounded ring."""

    def __init__(self, views: list[ClusterView], config: ConsoleConfig) -> None:
        self.views = views
        self.config = config
        self.rings: dict[str, deque[Sample]] = {
            v.name: deque(maxlen=config.samples_kept) for v in views
        }
        self.last: dict[str, dict[str, Any]] = {}
        self._reachable: dict[str, bool | None] = {v.name: None for v in views}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.config.timeout_s * 4 + 5)

    def sample_once(self) -> None:
        for view in self.views:
            try:
                st = view.status()
            except ClientError as exc:
                st = {"cluster": view.name, "reachable": False, "error": exc.message}
            self.last[view.name] = st
            self._note(view, st)
            if st["reachable"]:
                self.rings[view.name].append(
                    Sample(st["sampled_at"], st["commit_offset"], st["apply_lag"])
                )

    def _note(self, view: ClusterView, st: dict[str, Any]) -> None:
        was, now = self._reachable[view.name], bool(st["reachable"])
        if was is not now:
            if not now:
                log.warning(
                    "cluster %s is unreachable at %s: %s",
                    view.name,
                    ",".join(view.endpoints),
                    st.get("error", ""),
                )
            elif was is False:
                log.info("cluster %s is reachable again", view.name)
        self._reachable[view.name] = now

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.sample_once()
            except Exception:  # the sampler must outlive any one bad answer
                log.exception("sampling failed")
            self._stop.wait(max(0.0, self.config.sample_every_s - (time.monotonic() - began)))

    def series(self, name: str, seconds: float) -> dict[str, list[float]]:
        """Commits/s and apply lag over the last ``seconds``: uPlot's column arrays."""
        ring = list(self.rings[name])
        since = time.time() - seconds
        t: list[float] = []
        rate: list[float] = []
        lag: list[float] = []
        for prev, cur in itertools.pairwise(ring):
            if cur.t < since or cur.t <= prev.t:
                continue
            t.append(round(cur.t, 3))
            rate.append(round(max(0, cur.commit_offset - prev.commit_offset) / (cur.t - prev.t), 2))
            lag.append(cur.apply_lag)
        return {"t": t, "commits_per_s": rate, "apply_lag": lag}
