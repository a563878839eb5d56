"""The Leases, locks and elections page's reads, each bounded however many there are.

- :func:`lease_page`: live leases a page at a time, ascending by id. LeaseLeases answers ids
  only (8 bytes each: 10,000 leases are 80 KB), and only the page's leases are asked their
  TimeToLive (granted TTL, remaining TTL and attached keys), so a page costs ``limit + 1``
  requests whatever the count.
- :func:`lock_page`: the locks and elections under a prefix. Both recipes (etcd's
  ``concurrency`` mutex and election, which ``metaledger lock``/``elect`` and the Lock and
  Election services run) keep one key per contender, ``NAME/<lease id in hex>``, created with
  that lease; the holder (the leader) is the contender with the lowest create revision, and that
  create revision is its fencing token (``HeldLock.token``, ``LeaderKey.rev``). The scan reads
  keys only, at most ``budget`` keys per call, and hands back a cursor; the holder's value (an
  election's leader value; a lock's is empty) is one read per name shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from console.errors import BadInput
from console.keys import MAX_PAGE, key_text
from nameserver.client import Client, KeyValue, prefix_range_end

__all__ = ["lease_page", "lock_page", "parse_lease_id"]

#: keys of a lease listed by name on the page (the count is always whole)
KEYS_SHOWN = 5
#: keys :func:`lock_page` reads per call at most
LOCK_BUDGET = 20_000


def parse_lease_id(raw: str) -> int:
    """A lease id as etcdctl prints it (hex)."""
    try:
        value = int(raw, 16)
    except ValueError:
        raise BadInput(f"a lease id is hex (as etcdctl prints it), not {raw!r}") from None
    if value <= 0:
        raise BadInput(f"a lease id must be positive, not {raw!r}")
    return value


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise BadInput(f"limit must be 1..{MAX_PAGE}")


def lease_page(client: Client, cursor: int = 0, limit: int = 100) -> dict[str, Any]:
    """Up to ``limit`` live leases with ids above ``cursor``: each one's granted and remaining
    TTL (seconds) and its keys (the count, and the first :data:`KEYS_SHOWN`); ``next`` is the
    cursor of the next page (hex) and ``total`` the number of live leases."""
    _check_limit(limit)
    ids = sorted(client.lease_leases())
    after = [i for i in ids if i > cursor]
    page, rest = after[:limit], after[limit:]
    leases = []
    for lease_id in page:
        t = client.lease_time_to_live(lease_id, keys=True)
        leases.append(
            {
                "id": f"{lease_id:x}",
                "granted_ttl": t.granted_ttl_s,
                "ttl": t.ttl_s,
                "expired": not t.exists,
                "keys": len(t.keys),
                "first_keys": [key_text(k) for k in t.keys[:KEYS_SHOWN]],
            }
        )
    return {
        "total": len(ids),
        "leases": leases,
        "next": f"{page[-1]:x}" if rest else None,
    }


def contender_name(kv: KeyValue) -> bytes | None:
    """``NAME`` when ``kv`` is a lock's or election's contender key ``NAME/<lease hex>``
    created with that lease, else None."""
    if not kv.lease:
        return None
    cut = kv.key.rfind(b"/")
    if cut <= 0 or kv.key[cut + 1 :] != f"{kv.lease:x}".encode():
        return None
    return kv.key[:cut]


@dataclass
class _Name:
    name: bytes
    first_key: bytes
    contenders: list[KeyValue] = field(default_factory=list)


def lock_page(
    client: Client,
    prefix: bytes = b"",
    cursor: bytes | None = None,
    limit: int = 50,
    budget: int = LOCK_BUDGET,
) -> dict[str, Any]:
    """Up to ``limit`` locks or elections under ``prefix`` (their names start with it): each
    one's holder key, lease, fencing token (the holder's create revision), value and waiters;
    a call reads at most ``budget`` keys and ``next`` goes on from there."""
    _check_limit(limit)
    first, end = (prefix, prefix_range_end(prefix)) if prefix else (b"\0", b"\0")
    start: bytes | None = max(cursor, first) if cursor else first
    names: dict[bytes, _Name] = {}
    scanned = 0
    stopped_by_budget = False
    while start is not None:
        if scanned >= budget:
            stopped_by_budget = True
            break
        r = client.get(start, range_end=end, limit=MAX_PAGE, keys_only=True)
        if not r.kvs:
            start = None
            break
        for kv in r.kvs:
            name = contender_name(kv)
            if name is not None and name not in names and len(names) >= limit:
                start = kv.key  # the next page starts at this name
                break
            scanned += 1
            start = kv.key + b"\0"
            if name is not None:
                names.setdefault(name, _Name(name, kv.key)).contenders.append(kv)
        else:
            if not r.more:
                start = None
            continue
        break
    if stopped_by_budget and len(names) > 1:
        # the last name may have more contenders past the budget: it opens the next page
        last = names.pop(next(reversed(names)))
        start = last.first_key
    rows = []
    for n in names.values():
        ranked = sorted(n.contenders, key=lambda kv: kv.create_revision)
        holder = ranked[0]
        got = client.get(holder.key)
        value = got.kvs[0].value if got.kvs else b""
        rows.append(
            {
                "name": key_text(n.name),
                "holder_key": key_text(holder.key),
                "lease": f"{holder.lease:x}",
                "token": holder.create_revision,
                "value": key_text(value),
                "waiters": len(ranked) - 1,
                "waiting": [
                    {"key": key_text(kv.key), "lease": f"{kv.lease:x}"}
                    for kv in ranked[1 : 1 + KEYS_SHOWN]
                ],
            }
        )
    return {
        "prefix": key_text(prefix),
        "locks": rows,
        "scanned": scanned,
        "next": start.hex() if start is not None else None,
    }
