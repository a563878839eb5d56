"""Output of the ``metaledger`` command: ``--output table`` (for people) or ``json`` (for scripts).

The table printer writes KV results the way ``etcdctl`` does (``OK``; key and value on their own
lines; SUCCESS/FAILURE then each op's result after a blank line) and tables for status, members
and free-form reports (benchmarks). The JSON printer writes one JSON document per command. Keys and values are
strings when both are UTF-8, else base64, as the kv's ``encoding`` says.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TextIO

if TYPE_CHECKING:  # (a command that talks to no cluster imports no client: see txn())
    from nameserver.client import (
        DeleteResult,
        KeyValue,
        Member,
        NodeStatus,
        PutResult,
        RangeResult,
        TxnResult,
    )

OUTPUTS = ("table", "json")


class Printer(Protocol):
    def put(self, result: PutResult) -> None: ...
    def get(self, result: RangeResult, *, count_only: bool = False) -> None: ...
    def delete(self, result: DeleteResult) -> None: ...
    def txn(self, result: TxnResult) -> None: ...
    def status(self, nodes: Sequence[NodeStatus]) -> None: ...
    def members(self, members: Sequence[Member]) -> None: ...
    def report(self, doc: Mapping[str, Any], text: str) -> None:
        """A free-form result: ``text`` for people, ``doc`` as JSON."""


def get_printer(output: str, out: TextIO | None = None) -> Printer:
    stream = out if out is not None else sys.stdout
    if output == "json":
        return JsonPrinter(stream)
    if output == "table":
        return TablePrinter(stream)
    raise ValueError(f"unknown output {output!r} (choose from {', '.join(OUTPUTS)})")


def display(data: bytes) -> str:
    """Bytes as text for people: UTF-8, with undecodable bytes shown as ``\\xNN``."""
    return data.decode("utf-8", "backslashreplace")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(headers), *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)


STATUS_HEADERS = ("ID", "ENDPOINT", "ROLE", "TERM", "LEADER", "END", "COMMIT", "APPLY", "QUORUM")


#: the role ``status`` gives a member that did not answer
DOWN = "down"


def status_rows(nodes: Sequence[NodeStatus]) -> list[list[object]]:
    return [
        [n.id, n.endpoint, DOWN, *["-"] * (len(STATUS_HEADERS) - 3)]
        if n.role == DOWN
        else [
            n.id,
            n.endpoint,
            n.role,
            n.term,
            n.leader or "-",
            n.end_offset,
            n.commit_offset,
            n.apply_offset,
            "yes" if n.has_quorum else "no",
        ]
        for n in nodes
    ]


class TablePrinter:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def _line(self, text: str = "") -> None:
        print(text, file=self.out)

    def _kv(self, kv: KeyValue) -> None:
        self._line(display(kv.key))
        self._line(display(kv.value))

    def put(self, result: PutResult) -> None:
        self._line("OK")
        if result.prev_kv is not None:
            self._kv(result.prev_kv)

    def get(self, result: RangeResult, *, count_only: bool = False) -> None:
        if count_only:
            self._line(str(result.count))
        for kv in result.kvs:
            self._kv(kv)

    def delete(self, result: DeleteResult) -> None:
        self._line(str(result.deleted))
        for kv in result.prev_kvs:
            self._kv(kv)

    def txn(self, result: TxnResult) -> None:
        from nameserver.client import DeleteResult, PutResult, RangeResult

        self._line("SUCCESS" if result.succeeded else "FAILURE")
        for r in result.responses:
            self._line()
            if isinstance(r, PutResult):
                self.put(r)
            elif isinstance(r, RangeResult):
                self.get(r)
            elif isinstance(r, DeleteResult):
                self.delete(r)
            else:
                self.txn(r)

    def status(self, nodes: Sequence[NodeStatus]) -> None:
        self._line(format_table(STATUS_HEADERS, status_rows(nodes)))

    def members(self, members: Sequence[Member]) -> None:
        rows = [
            [
                f"{m.member_id:x}",
                m.name or "(unstarted)",
                ",".join(m.peer_urls),
                ",".join(m.client_urls),
                "yes" if m.is_learner else "no",
            ]
            for m in members
        ]
        self._line(format_table(("ID", "NAME", "PEER URLS", "CLIENT URLS", "LEARNER"), rows))

    def report(self, doc: Mapping[str, Any], text: str) -> None:
        self._line(text)


def kv_json(kv: KeyValue) -> dict[str, Any]:
    try:
        key, value, encoding = kv.key.decode(), kv.value.decode(), "utf-8"
    except UnicodeDecodeError:
        key, value = base64.b64encode(kv.key).decode(), base64.b64encode(kv.value).decode()
        encoding = "base64"
    return {
        "key": key,
        "value": value,
        "encoding": encoding,
        "create_revision": kv.create_revision,
        "mod_revision": kv.mod_revision,
        "version": kv.version,
        "lease": kv.lease,
    }


def result_json(result: PutResult | RangeResult | DeleteResult | TxnResult) -> dict[str, Any]:
    from nameserver.client import DeleteResult, PutResult, RangeResult

    if isinstance(result, PutResult):
        prev = kv_json(result.prev_kv) if result.prev_kv is not None else None
        return {"revision": result.revision, "prev_kv": prev}
    if isinstance(result, RangeResult):
        return {
            "revision": result.revision,
            "count": result.count,
            "more": result.more,
            "kvs": [kv_json(kv) for kv in result.kvs],
        }
    if isinstance(result, DeleteResult):
        return {
            "revision": result.revision,
            "deleted": result.deleted,
            "prev_kvs": [kv_json(kv) for kv in result.prev_kvs],
        }
    kinds = {PutResult: "put", RangeResult: "range", DeleteResult: "delete_range", TxnResult: "txn"}
    return {
        "revision": result.revision,
        "succeeded": result.succeeded,
        "responses": [{kinds[type(r)]: result_json(r)} for r in result.responses],
    }


def status_json(node: NodeStatus) -> dict[str, Any]:
    """The status contract: id, endpoint, role, term, leader, three offsets, then the rest."""
    return dataclasses.asdict(node)


class JsonPrinter:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def _dump(self, doc: Mapping[str, Any]) -> None:
        print(json.dumps(doc, ensure_ascii=False), file=self.out)

    def put(self, result: PutResult) -> None:
        self._dump(result_json(result))

    def get(self, result: RangeResult, *, count_only: bool = False) -> None:
        self._dump(result_json(result))

    def delete(self, result: DeleteResult) -> None:
        self._dump(result_json(result))

    def txn(self, result: TxnResult) -> None:
        self._dump(result_json(result))

    def status(self, nodes: Sequence[NodeStatus]) -> None:
        self._dump({"nodes": [status_json(n) for n in nodes]})

    def members(self, members: Sequence[Member]) -> None:
        self._dump({"members": [dataclasses.asdict(m) for m in members]})

    def report(self, doc: Mapping[str, Any], text: str) -> None:
        self._dump(doc)
