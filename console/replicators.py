"""The Replicators page: every Redis and RocketMQ replicator job, as the records the
replicators keep in metaledger say it (the console reads them through the client, as
``metaledger replicate status`` does; it imports nothing of the replicators).

What a job keeps (docs/redis-replicator.md, docs/rocketmq-replicator.md):

- A Redis job's workers campaign in the election ``replicators/redis/<job>``: one key per
  worker, ``replicators/redis/<job>/<lease in hex>`` holding the worker's name, the lowest
  create revision the active one. The active worker publishes its status every second under
  ``/replicators/redis/<job>/status`` (on its lease: it vanishes with the worker).
- A RocketMQ job's workers each hold ``/replicators/rocketmq/<job>/workers/<worker>`` and one
  claim per source queue, ``/replicators/rocketmq/<job>/claims/<topic/broker/queue>``, and
  each publishes ``/replicators/rocketmq/<job>/w/<worker>/status``: its queues with their
  lag, and (the first worker) the heartbeat's round trip through the destination.

:func:`overview` reads both prefixes (at most :data:`MAX_KEYS` keys each) and folds them into
one row per job: its workers (the active or leading one first), source and destination, lag
in bytes (Redis) or messages (RocketMQ) and seconds, the heartbeat round trip, and alarms:
what the workers report (errors, stopped queues, lost offsets, a heartbeat link down) and a
status older than :data:`STALE_S`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from nameserver.client import Client

__all__ = ["MAX_KEYS", "STALE_S", "fold", "overview"]

#: the records' prefixes: statuses, members and claims; the Redis elections
RECORDS = b"/replicators/"
ELECTIONS = b"replicators/redis/"
#: keys read of each prefix at most (a job has a few keys per worker and one per queue)
MAX_KEYS = 20_000
#: a status not updated for this long raises an alarm (workers publish every second)
STALE_S = 10.0


def overview(client: Client, now: float | None = None) -> dict[str, Any]:
    """The page's JSON: ``jobs`` (see :func:`fold`), ``revision`` read at, ``truncated``."""
    records = client.get(RECORDS, prefix=True, limit=MAX_KEYS)
    elections = client.get(
        ELECTIONS, prefix=True, limit=MAX_KEYS, keys_only=False, revision=records.revision
    )
    kvs = [(kv.key, kv.value, kv.create_revision) for kv in records.kvs]
    kvs += [(kv.key, kv.value, kv.create_revision) for kv in elections.kvs]
    out = fold(kvs, time.time() if now is None else now)
    out["revision"] = records.revision
    out["truncated"] = records.more or elections.more
    return out


def _doc(value: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def fold(kvs: list[tuple[bytes, bytes, int]], now: float) -> dict[str, Any]:
    """One row per job from ``(key, value, create revision)`` of both prefixes."""
    redis: dict[str, dict[str, Any]] = {}
    rmq: dict[str, dict[str, Any]] = {}
    for key, value, created in kvs:
        if key.startswith(ELECTIONS):
            job, _, lease = _text(key[len(ELECTIONS) :]).rpartition("/")
            if job:
                r = redis.setdefault(job, {"candidates": [], "status": None})
                r["candidates"].append((created, _text(value), lease))
            continue
        parts = _text(key[len(RECORDS) :]).split("/")
        if len(parts) < 3:
            continue
        kind, job, rest = parts[0], parts[1], parts[2:]
        if kind == "redis" and rest == ["status"]:
            redis.setdefault(job, {"candidates": [], "status": None})["status"] = _doc(value)
        elif kind == "rocketmq":
            r = rmq.setdefault(job, {"members": [], "claims": 0, "statuses": []})
            if rest[0] == "workers" and len(rest) == 2:
                r["members"].append((created, rest[1]))
            elif rest[0] == "claims":
                r["claims"] += 1
            elif rest[0] == "w" and rest[-1] == "status":
                doc = _doc(value)
                if doc is not None:
                    r["statuses"].append(doc)
    jobs = [_redis_job(job, r, now) for job, r in sorted(redis.items())]
    jobs += [_rocketmq_job(job, r, now) for job, r in sorted(rmq.items())]
    return {"jobs": jobs}


def _age(doc: dict[str, Any], now: float) -> float | None:
    updated = doc.get("updated")
    return round(max(0.0, now - float(updated)), 1) if isinstance(updated, int | float) else None


def _stale(job: str, age: float | None, alarms: list[str]) -> None:
    if age is not None and age > STALE_S:
        alarms.append(f"{job}: status not updated for {age:.0f} s")


def _redis_job(job: str, r: dict[str, Any], now: float) -> dict[str, Any]:
    candidates = sorted(r["candidates"])
    st: dict[str, Any] = r["status"] or {}
    active = str(st.get("worker") or (candidates[0][1] if candidates else ""))
    workers = [{"name": name, "lease": lease, "active": name == active}
               for _, name, lease in candidates]  # fmt: skip
    if active and not any(w["name"] == active for w in workers):
        workers.insert(0, {"name": active, "lease": "", "active": True})
    age = _age(st, now)
    alarms: list[str] = []
    if st.get("last_error"):
        alarms.append(str(st["last_error"]))
    if not st:
        alarms.append("no active worker publishes a status")
    _stale(job, age, alarms)
    return {
        "kind": "redis",
        "job": job,
        "workers": workers,
        "active": active,
        "source": st.get("source", ""),
        "destination": f"topic {st['topic']}" if st.get("topic") else "",
        "phase": st.get("phase", ""),
        "lag_bytes": st.get("lag_bytes"),
        "lag_messages": None,
        "in_flight": st.get("in_flight"),
        "lag_s": st.get("lag_s"),
        "rtt_ms": None,
        "offsets": {
            k: st.get(k)
            for k in ("parsed_offset", "confirmed_offset", "acked_offset", "checkpoint_offset")
        },
        "sent": st.get("sent"),
        "confirmed": st.get("confirmed"),
        "age_s": age,
        "alarms": alarms,
        "queues": [],
    }


def _rocketmq_job(job: str, r: dict[str, Any], now: float) -> dict[str, Any]:
    members = [name for _, name in sorted(r["members"], key=lambda m: m[1])]
    statuses = sorted(r["statuses"], key=lambda d: str(d.get("worker", "")))
    leader = next((str(d.get("worker")) for d in statuses if d.get("leader")), "")
    names = set(members) | {str(d.get("worker", "")) for d in statuses}
    workers = [{"name": n, "lease": "", "active": n == leader} for n in sorted(names) if n]
    alarms: list[str] = []
    queues: list[dict[str, Any]] = []
    rtt: float | None = None
    lag_s = 0.0
    ages: list[float] = []
    first = statuses[0] if statuses else {}
    for d in statuses:
        worker = str(d.get("worker", ""))
        age = _age(d, now)
        if age is not None:
            ages.append(age)
        _stale(f"{job}/{worker}", age, alarms)
        if d.get("last_failure"):
            alarms.append(f"{worker}: {d['last_failure']}")
        hb = d.get("heartbeat") or {}
        if isinstance(hb, dict) and hb.get("enabled"):
            if hb.get("rtt_ms") is not None:
                rtt = float(hb["rtt_ms"])
            if hb.get("link_down"):
                alarms.append(
                    f"{worker}: heartbeat link down (last seen {hb.get('last_seen_s')} s ago)"
                )
        for q in d.get("queues") or []:
            if not isinstance(q, dict):
                continue
            queues.append({**q, "worker": worker})
            lag_s = max(lag_s, float(q.get("lag_s") or 0.0))
            alarms.extend(f"{q.get('partition')}: {a}" for a in q.get("alarms") or [])
            if q.get("stopped"):
                alarms.append(f"{q.get('partition')}: stopped ({q['stopped']})")
    queues.sort(key=lambda q: str(q.get("partition", "")))
    if not statuses:
        alarms.append("no worker publishes a status")
    dest_cluster = first.get("dest_cluster") or ""
    source_cluster = first.get("source_cluster") or ""
    return {
        "kind": "rocketmq",
        "job": job,
        "workers": workers,
        "active": leader,
        "source": _where(first.get("source", ""), source_cluster),
        "destination": _where(first.get("dest", ""), dest_cluster),
        "phase": "",
        "lag_bytes": None,
        "lag_messages": sum(int(q.get("lag_messages") or 0) for q in queues),
        "in_flight": sum(int(q.get("in_flight") or 0) for q in queues),
        "lag_s": round(lag_s, 3),
        "rtt_ms": rtt,
        "offsets": {},
        "sent": sum(int(q.get("sent") or 0) for q in queues),
        "confirmed": sum(int(q.get("acked") or 0) for q in queues),
        "claims": r["claims"],
        "age_s": max(ages) if ages else None,
        "alarms": alarms,
        "queues": queues,
    }


def _where(namesrv: Any, cluster: Any) -> str:
    text = str(namesrv or "")
    return f"{text} (cluster {cluster})" if cluster else text
