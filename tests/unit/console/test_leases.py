"""The Leases, locks and elections page's reads against an in-memory cluster: 10,000 leases
page (only the page's leases are asked their TTL), contender keys are recognised as the
recipes write them, the holder is the lowest create revision and its token that revision,
and a scan stops within its budget and goes on from its cursor."""

from __future__ import annotations

from typing import Any

import pytest

from console import leases
from console.errors import BadInput
from nameserver.client import KeyValue, LeaseTimeToLive
from tests.unit.console.test_keys import FakeKv


class FakeCluster(FakeKv):
    def __init__(self) -> None:
        super().__init__()
        self.leases: dict[int, tuple[int, int]] = {}  # id -> (granted, remaining)
        self.ttl_calls = 0

    def grant(self, lease_id: int, granted: int, remaining: int) -> None:
        self.leases[lease_id] = (granted, remaining)

    def attach(self, key: str, value: str, lease_id: int) -> None:
        self.put(key, value)
        k = key.encode()
        self.versions[k][-1] = KeyValue(
            k, value.encode(), self.revision, self.revision, 1, lease_id
        )

    def lease_leases(self) -> list[int]:
        return list(reversed(self.leases))

    def lease_time_to_live(self, lease_id: int, keys: bool = False) -> LeaseTimeToLive:
        self.ttl_calls += 1
        if lease_id not in self.leases:
            return LeaseTimeToLive(lease_id, -1, 0, [])
        granted, remaining = self.leases[lease_id]
        attached = [k for k, vs in self.versions.items() if vs and vs[-1].lease == lease_id]
        return LeaseTimeToLive(lease_id, remaining, granted, sorted(attached) if keys else [])


def test_ten_thousand_leases_page_and_only_the_page_is_asked() -> None:
    c = FakeCluster()
    for i in range(1, 10_001):
        c.grant(i, 60, 30)
    c.attach("svc/a", "x", 7)
    c.attach("svc/b", "y", 7)
    page = leases.lease_page(c, 0, 100)  # type: ignore[arg-type]
    assert page["total"] == 10_000
    assert [row["id"] for row in page["leases"]] == [f"{i:x}" for i in range(1, 101)]
    assert c.ttl_calls == 100
    row = page["leases"][6]
    assert (row["granted_ttl"], row["ttl"], row["keys"]) == (60, 30, 2)
    assert row["first_keys"] == ["svc/a", "svc/b"]
    seen = 100
    cursor = page["next"]
    while cursor:
        page = leases.lease_page(c, leases.parse_lease_id(cursor), 500)  # type: ignore[arg-type]
        seen += len(page["leases"])
        cursor = page["next"]
    assert seen == 10_000


def test_a_lease_gone_between_the_list_and_its_ttl_shows_expired() -> None:
    c = FakeCluster()
    c.grant(5, 10, 3)
    c.lease_leases = lambda: [5, 6]  # type: ignore[method-assign]
    rows = leases.lease_page(c)["leases"]  # type: ignore[arg-type]
    assert [(r["id"], r["expired"]) for r in rows] == [("5", False), ("6", True)]


@pytest.mark.parametrize("raw", ["zz", "-1", "0", ""])
def test_a_bad_lease_cursor_is_named(raw: str) -> None:
    with pytest.raises(BadInput):
        leases.parse_lease_id(raw)


def _contend(c: FakeCluster, name: str, lease_id: int, value: str = "") -> None:
    c.attach(f"{name}/{lease_id:x}", value, lease_id)


def test_the_holder_is_the_lowest_create_revision_and_its_token_that_revision() -> None:
    c = FakeCluster()
    _contend(c, "locks/jobs", 0x2B)
    holder_rev = c.revision
    _contend(c, "locks/jobs", 0x1A)  # sorts first by key, but created later: a waiter
    _contend(c, "elect/brokers", 0x99, "10.0.0.1:10911")
    c.attach("elect/brokers/notalease", "v", 0x98)  # its tail is not its lease
    c.put("locks/plain/1", "no lease")
    page = leases.lock_page(c, b"")  # type: ignore[arg-type]
    rows = {r["name"]: r for r in page["locks"]}
    assert set(rows) == {"locks/jobs", "elect/brokers"}
    jobs = rows["locks/jobs"]
    assert (jobs["holder_key"], jobs["lease"], jobs["token"]) == ("locks/jobs/2b", "2b", holder_rev)
    assert jobs["waiters"] == 1 and jobs["waiting"] == [{"key": "locks/jobs/1a", "lease": "1a"}]
    assert rows["elect/brokers"]["value"] == "10.0.0.1:10911"
    assert page["next"] is None
    only = leases.lock_page(c, b"elect/")  # type: ignore[arg-type]
    assert [r["name"] for r in only["locks"]] == ["elect/brokers"]


def _all_names(c: FakeCluster, **kw: Any) -> list[str]:
    names: list[str] = []
    cursor = None
    for _ in range(1000):
        page = leases.lock_page(c, b"", cursor, **kw)  # type: ignore[arg-type]
        names += [r["name"] for r in page["locks"]]
        if page["next"] is None:
            return names
        cursor = bytes.fromhex(page["next"])
    raise AssertionError("the scan never ended")


def test_locks_page_by_name_and_stop_within_the_budget() -> None:
    c = FakeCluster()
    lease_id = 1
    for n in range(30):
        for _ in range(3):
            _contend(c, f"l/{n:03d}", lease_id)
            lease_id += 1
        for i in range(20):
            c.put(f"l/{n:03d}x/{i}", "noise")
    want = [f"l/{n:03d}" for n in range(30)]
    assert _all_names(c, limit=7) == want
    assert _all_names(c, limit=50, budget=40) == want  # no name split across pages
    page = leases.lock_page(c, b"", limit=50, budget=40)  # type: ignore[arg-type]
    assert page["scanned"] <= 40 + 500
    assert all(r["waiters"] == 2 for r in page["locks"])
