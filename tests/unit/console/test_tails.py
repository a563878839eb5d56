"""The Keys page's live tail: it starts after the revision it was opened at, keeps a bounded
ring of events the page polls past a sequence number, refuses more than its cap of open
tails, and closes a tail (its watch) on request or after it was left unpolled."""

from __future__ import annotations

import queue
from typing import Any

import pytest

from console import tails
from console.errors import BadInput, NotFound
from console.tails import Tails
from nameserver.client import KeyValue, RangeResult, WatchEvent
from tests.harness import wait_until


class FakeWatch:
    def __init__(self) -> None:
        self.q: queue.SimpleQueue[WatchEvent | None] = queue.SimpleQueue()
        self.closed = False

    def __iter__(self) -> FakeWatch:
        return self

    def __next__(self) -> WatchEvent:
        ev = self.q.get()
        if ev is None:
            raise StopIteration
        return ev

    def close(self) -> None:
        self.closed = True
        self.q.put(None)


class FakeClient:
    def __init__(self) -> None:
        self.watches: list[tuple[bytes, dict[str, Any], FakeWatch]] = []

    def get(self, key: bytes, prefix: bool = False, count_only: bool = False) -> RangeResult:
        return RangeResult(41, [], False, 0)

    def watch(self, key: bytes, **kwargs: Any) -> FakeWatch:
        w = FakeWatch()
        self.watches.append((key, kwargs, w))
        return w


def _put(w: FakeWatch, key: str, value: str, rev: int) -> None:
    kv = KeyValue(key.encode(), value.encode(), rev, rev, 1, 0)
    w.q.put(WatchEvent("PUT", kv, None, rev))


def test_a_tail_watches_from_after_its_open_and_pages_by_sequence() -> None:
    client = FakeClient()
    ts = Tails(cap=2, idle_s=60)
    opened = ts.open("default", client, b"app/")  # type: ignore[arg-type]
    assert opened["revision"] == 41 and opened["prefix"] == "app/"
    key, kwargs, w = client.watches[0]
    assert key == b"app/" and kwargs == {"prefix": True, "start_revision": 42}
    tail = ts.get(opened["id"])
    _put(w, "app/a", "1", 42)
    _put(w, "app/b", "x" * 300, 43)
    wait_until(lambda: tail.since(0)["next"] == 2, 5, "two events")
    got = tail.since(0)
    assert [(e["seq"], e["key"], e["revision"]) for e in got["events"]] == [
        (1, "app/a", 42), (2, "app/b", 43)]  # fmt: skip
    assert got["events"][1]["size"] == 300 and len(got["events"][1]["value"]) == tails.PREVIEW + 1
    assert tail.since(1)["events"][0]["key"] == "app/b"
    assert tail.since(2)["events"] == [] and tail.since(2)["dropped"] == 0
    assert ts.close(opened["id"]) and w.closed
    assert not ts.close(opened["id"])
    with pytest.raises(NotFound):
        ts.get(opened["id"])
    ts.close_all()


def test_the_ring_is_bounded_and_says_what_a_slow_page_missed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tails, "BUFFER", 3)
    client = FakeClient()
    ts = Tails()
    tail = ts.get(ts.open("default", client, b"")["id"])  # type: ignore[arg-type]
    w = client.watches[0][2]
    for i in range(5):
        _put(w, f"k{i}", "v", 42 + i)
    wait_until(lambda: tail.since(5)["next"] == 5, 5, "five events")
    got = tail.since(0)
    assert [e["seq"] for e in got["events"]] == [3, 4, 5] and got["dropped"] == 2
    ts.close_all()
    assert w.closed


def test_the_cap_refuses_one_more_and_an_unpolled_tail_is_closed() -> None:
    client = FakeClient()
    ts = Tails(cap=2, idle_s=0.2)
    a = ts.open("default", client, b"a/")["id"]  # type: ignore[arg-type]
    ts.open("default", client, b"b/")  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="2 live tails are open already"):
        ts.open("default", client, b"c/")  # type: ignore[arg-type]

    def only_a_left() -> bool:
        ts.get(a).since(0)  # a is polled, b is not
        return len(ts) == 1

    wait_until(only_a_left, 5, "the unpolled tail closed by the reaper")
    assert len(ts) == 1 and ts.get(a)
    assert client.watches[1][2].closed and not client.watches[0][2].closed
    ts.close_all()
