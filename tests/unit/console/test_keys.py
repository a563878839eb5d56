"""The Keys page's reads against an in-memory keyspace: listings page and jump over child
directories (a 100,000-key prefix costs a handful of requests), search scans within its
budget, history walks versions by revision, writes need --allow-writes and a confirmation."""

from __future__ import annotations

import bisect
import dataclasses
from typing import Any

import pytest

from console import keys
from console.errors import BadInput, NotFound, ReadOnly
from nameserver.client import KeyValue, OutOfRange, PutResult, RangeResult


class FakeKv:
    """etcd's Range over sorted keys with every version kept (from revision ``compacted``)."""

    def __init__(self) -> None:
        self.revision = 1
        self.compacted = 0
        self.versions: dict[bytes, list[KeyValue]] = {}
        self.sorted: list[bytes] = []
        self.calls = 0

    def put(self, key: bytes | str, value: bytes | str, prev_kv: bool = False) -> PutResult:
        k = key.encode() if isinstance(key, str) else key
        v = value.encode() if isinstance(value, str) else value
        self.revision += 1
        old = self.versions.setdefault(k, [])
        if not old:
            bisect.insort(self.sorted, k)
        create = old[0].create_revision if old else self.revision
        old.append(KeyValue(k, v, create, self.revision, len(old) + 1, 0))
        return PutResult(self.revision, old[-2] if prev_kv and len(old) > 1 else None)

    def _at(self, key: bytes, revision: int) -> KeyValue | None:
        found = [kv for kv in self.versions.get(key, []) if kv.mod_revision <= revision]
        return found[-1] if found else None

    def get(
        self,
        key: bytes,
        range_end: bytes | None = None,
        limit: int = 0,
        keys_only: bool = False,
        revision: int = 0,
    ) -> RangeResult:
        self.calls += 1
        if revision and revision < self.compacted:
            raise OutOfRange("required revision has been compacted")
        at = revision or self.revision
        if range_end is None:
            kv = self._at(key, at)
            return RangeResult(self.revision, [kv] if kv else [], False, int(kv is not None))
        lo = bisect.bisect_left(self.sorted, key)
        hi = len(self.sorted) if range_end == b"\0" else bisect.bisect_left(self.sorted, range_end)
        out: list[KeyValue] = []
        for k in self.sorted[lo:hi]:
            kv = self._at(k, at)
            if kv is None:
                continue
            if limit and len(out) == limit:
                return RangeResult(self.revision, out, True, hi - lo)
            out.append(dataclasses.replace(kv, value=b"") if keys_only else kv)
        return RangeResult(self.revision, out, False, len(out))


def _fake(**prefixes: int) -> FakeKv:
    kv = FakeKv()
    for prefix, n in prefixes.items():
        for i in range(n):
            kv.put(f"{prefix}/{i:06d}", f"value {i}")
    return kv


def _names(listing: dict[str, Any]) -> list[str]:
    return [e["name"] for e in listing["entries"]]


def test_a_listing_jumps_over_a_directory_of_100k_keys() -> None:
    kv = _fake(**{"app/big": 100_000, "app/small": 3})
    kv.put("app/top", "1")
    listing = keys.list_children(kv, b"app/")  # type: ignore[arg-type]
    assert _names(listing) == ["big/", "small/", "top"]
    assert [e["dir"] for e in listing["entries"]] == [True, True, False]
    assert listing["next"] is None
    assert kv.calls <= 5


def test_a_listing_pages_with_its_cursor() -> None:
    kv = _fake(app=250)
    seen: list[str] = []
    cursor = None
    for _ in range(3):
        page = keys.list_children(kv, b"app/", cursor and bytes.fromhex(cursor), limit=100)  # type: ignore[arg-type]
        seen += _names(page)
        cursor = page["next"]
    assert seen == [f"{i:06d}" for i in range(250)]
    assert cursor is None


def test_the_whole_keyspace_lists_from_the_top() -> None:
    kv = _fake(a=2, b=1)
    assert _names(keys.list_children(kv, b"")) == ["a/", "b/"]  # type: ignore[arg-type]


def test_search_by_key_and_by_value_goes_on_from_its_cursor() -> None:
    kv = _fake(app=1000)
    kv.put("app/zz", "needle in the hay")
    r = keys.search(kv, b"app/", b"0009", by="key", limit=5)  # type: ignore[arg-type]
    assert [m["key"] for m in r["matches"]] == [f"app/{i:06d}" for i in (9, 90, 91, 92, 93)]
    assert r["next"] is not None
    r = keys.search(kv, b"app/", b"needle", by="value", budget=300)  # type: ignore[arg-type]
    assert r["matches"] == [] and r["scanned"] <= 400 and r["next"] is not None
    while r["next"] and not r["matches"]:
        r = keys.search(kv, b"app/", b"needle", "value", bytes.fromhex(r["next"]), budget=300)  # type: ignore[arg-type]
    assert [m["key"] for m in r["matches"]] == ["app/zz"]
    assert "needle" in r["matches"][0]["snippet"]
    with pytest.raises(BadInput):
        keys.search(kv, b"app/", b"", by="key")  # type: ignore[arg-type]
    with pytest.raises(BadInput):
        keys.search(kv, b"app/", b"x", by="lease")  # type: ignore[arg-type]


def test_value_views_text_json_hex() -> None:
    kv = FakeKv()
    kv.put("j", '{"a": [1, 2]}')
    kv.put("b", b"\xff\x00ab")
    j = keys.get_value(kv, b"j")  # type: ignore[arg-type]
    assert j["json"] == '{\n  "a": [\n    1,\n    2\n  ]\n}' and j["text"] == '{"a": [1, 2]}'
    b = keys.get_value(kv, b"b")  # type: ignore[arg-type]
    assert b["text"] is None and b["json"] is None
    assert b["hex"].startswith("00000000  ff 00 61 62") and b["hex"].endswith("..ab")
    with pytest.raises(NotFound):
        keys.get_value(kv, b"missing")  # type: ignore[arg-type]


def test_history_walks_back_by_revision_until_the_first_version_or_compaction() -> None:
    kv = FakeKv()
    for n in range(4):
        kv.put("k", f"v{n}")
        kv.put("other", "x")
    h = keys.history(kv, b"k")  # type: ignore[arg-type]
    assert [v["preview"] for v in h["versions"]] == ["v3", "v2", "v1", "v0"]
    assert h["end"] == "first version"
    kv.compacted = kv.versions[b"k"][2].mod_revision
    h = keys.history(kv, b"k")  # type: ignore[arg-type]
    assert [v["preview"] for v in h["versions"]] == ["v3", "v2"] and h["end"] == "compacted"


def test_writes_need_allow_writes_and_a_confirmation_naming_the_key() -> None:
    kv = FakeKv()
    kv.put("k", "old")
    with pytest.raises(ReadOnly):
        keys.put(kv, False, b"k", b"new", "k")  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="confirm"):
        keys.put(kv, True, b"k", b"new", "other")  # type: ignore[arg-type]
    assert kv.get(b"k").kvs[0].value == b"old"
    r = keys.put(kv, True, b"k", b"new", "k")  # type: ignore[arg-type]
    assert r["previous_size"] == 3 and kv.get(b"k").kvs[0].value == b"new"
