"""The Keys page's diff of two revisions, and export and import of a prefix: an export is
one snapshot at one revision whatever is written meanwhile, comes out a page at a time, keeps
keys and values that are not UTF-8, and imports back; an import needs --allow-writes, a
confirmation naming the prefix, and keys under it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from console import transfer
from console.errors import BadInput, NotFound, ReadOnly
from nameserver.client import Op, TxnResult
from tests.unit.console.test_keys import FakeKv


class FakeTxnKv(FakeKv):
    def __init__(self) -> None:
        super().__init__()
        self.txns = 0

    def txn(self, compares: list[Any], success: list[Op]) -> TxnResult:
        assert compares == [] and len(success) <= transfer.TXN_OPS
        self.txns += 1
        for op in success:
            self.put(op.request.request_put.key, op.request.request_put.value)
        return TxnResult(self.revision, True, [])


def test_a_diff_of_two_revisions() -> None:
    kv = FakeTxnKv()
    kv.put("cfg", "a\nb\nc\n")
    first = kv.revision
    kv.put("cfg", "a\nB\nc\n")
    d = transfer.diff(kv, b"cfg", first, 0)  # type: ignore[arg-type]
    assert d["text"] and not d["same"]
    assert [line for line in d["lines"] if line[:1] in "+-"] == [
        f"--- revision {first}",
        "+++ now",
        "-b",
        "+B",
    ]
    assert transfer.diff(kv, b"cfg", first, first)["same"]  # type: ignore[arg-type]
    kv.put("bin", b"\xff\x00")
    kv.put("bin", b"\xff\x01")
    d = transfer.diff(kv, b"bin", kv.revision - 1, kv.revision)  # type: ignore[arg-type]
    assert not d["text"] and any("ff 01" in line for line in d["lines"])
    with pytest.raises(NotFound):
        transfer.diff(kv, b"cfg", 1, 0)  # type: ignore[arg-type]
    with pytest.raises(BadInput):
        transfer.diff(kv, b"cfg", 0, 0)  # type: ignore[arg-type]


def _export(kv: FakeTxnKv, prefix: bytes, between: Any = None) -> tuple[str, int]:
    chunks = transfer.export_chunks(kv, prefix)  # type: ignore[arg-type]
    out = []
    for n, chunk in enumerate(chunks):
        out.append(chunk)
        if n == 1 and between:
            between()
    return "".join(out), len(out)


def test_an_export_is_one_revision_a_page_at_a_time_and_imports_back() -> None:
    kv = FakeTxnKv()
    for i in range(1234):
        kv.put(f"app/{i:05d}", f"value {i}")
    kv.put(b"app/\xff", b"\x00\xfe")
    kv.put("other/x", "not exported")
    text, pieces = _export(kv, b"app/", between=lambda: kv.put("app/01000", "changed"))
    assert pieces == 2 + 3  # the head, three pages, the end
    doc = json.loads(text)
    assert doc["format"] == transfer.EXPORT_FORMAT and doc["prefix"] == "app/"
    assert len(doc["kvs"]) == 1235
    # read on the third page, as of the export's first
    assert doc["kvs"][1000] == {"key": "app/01000", "value": "value 1000"}
    assert doc["kvs"][-1] == {"key_b64": "YXBwL/8=", "value_b64": "AP4="}

    dest = FakeTxnKv()
    out = transfer.import_kvs(dest, True, doc, "app/")  # type: ignore[arg-type]
    assert out["written"] == 1235 and dest.txns == 10
    assert dest.get(b"app/\xff").kvs[0].value == b"\x00\xfe"
    assert dest.get(b"app/01233").kvs[0].value == b"value 1233"


def test_an_import_is_refused_read_only_unconfirmed_or_outside_its_prefix() -> None:
    kv = FakeTxnKv()
    doc = {
        "format": transfer.EXPORT_FORMAT,
        "prefix": "app/",
        "kvs": [{"key": "app/a", "value": "1"}],
    }
    with pytest.raises(ReadOnly):
        transfer.import_kvs(kv, False, doc, "app/")  # type: ignore[arg-type]
    with pytest.raises(BadInput, match="must name the prefix"):
        transfer.import_kvs(kv, True, doc, "ap")  # type: ignore[arg-type]
    for bad in (
        {**doc, "format": "etcdkeeper"},
        {**doc, "kvs": [{"key": "elsewhere", "value": "1"}]},
        {**doc, "kvs": [{"key": "app/a"}]},
        {**doc, "kvs": [{"key_b64": "!!", "value": "1"}]},
        {**doc, "kvs": "app/a=1"},
        [],
    ):
        with pytest.raises(BadInput):
            transfer.import_kvs(kv, True, bad, "app/")  # type: ignore[arg-type]
    assert kv.sorted == []
