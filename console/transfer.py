"""The Keys page's diff of two revisions of a value, and export and import of a prefix.

- :func:`diff`: a key's value at two revisions as a unified diff (of the text, or of the hex
  dump when either is not UTF-8).
- :func:`export_chunks`: every key under a prefix as one JSON document, produced a page of
  :data:`PAGE` keys at a time, all read at the revision of the first page (one consistent
  snapshot, whatever is written meanwhile), so the console never holds more than a page. A key
  or value that is not UTF-8 is written as ``key_b64``/``value_b64``. Should the revision be
  compacted midway the stream stops and the document is left unfinished (not valid JSON), so
  it can never be imported as if it were whole.
- :func:`import_kvs`: such a document written back, refused unless writes are allowed and the
  request confirms by naming the document's prefix; every key must lie under it. The keys are
  put in transactions of :data:`TXN_OPS` (etcd's default ``--max-txn-ops``), without leases.
"""

from __future__ import annotations

import base64
import difflib
import json
from collections.abc import Iterator
from typing import Any

from console.errors import BadInput, NotFound, ReadOnly
from console.keys import hexdump, key_text
from nameserver.client import Client, Op, OutOfRange, prefix_range_end

__all__ = ["EXPORT_FORMAT", "diff", "export_chunks", "import_kvs"]

EXPORT_FORMAT = "metaledger-export-1"
PAGE = 500
TXN_OPS = 128
#: keys one import writes at most (a larger document is split by prefix)
MAX_IMPORT = 100_000
#: lines of a diff shown at most
MAX_DIFF_LINES = 2000


def _at(client: Client, key: bytes, revision: int) -> bytes:
    try:
        r = client.get(key, revision=revision)
    except OutOfRange as exc:
        raise BadInput(f"revision {revision}: {exc.message}") from None
    if not r.kvs:
        raise NotFound(f"no key {key_text(key)!r} at revision {revision}")
    return r.kvs[0].value


def diff(client: Client, key: bytes, old: int, new: int) -> dict[str, Any]:
    """``key`` at revision ``old`` against ``new`` (0: now) as unified diff lines."""
    if not key:
        raise BadInput("which key? none given")
    if old <= 0 or new < 0:
        raise BadInput("from must be a revision > 0, to a revision >= 0 (0: now)")
    a, b = _at(client, key, old), _at(client, key, new)
    try:
        left, right = a.decode("utf-8").splitlines(), b.decode("utf-8").splitlines()
        as_text = True
    except UnicodeDecodeError:
        left, right = hexdump(a).splitlines(), hexdump(b).splitlines()
        as_text = False
    now = f"revision {new}" if new else "now"
    lines = list(difflib.unified_diff(left, right, f"revision {old}", now, lineterm="", n=3))
    return {
        "key": key_text(key),
        "from": old,
        "to": new,
        "text": as_text,
        "same": a == b,
        "lines": lines[:MAX_DIFF_LINES],
        "truncated": len(lines) > MAX_DIFF_LINES,
    }


def _field(name: str, data: bytes) -> str:
    try:
        return f"{json.dumps(name)}: {json.dumps(data.decode('utf-8'), ensure_ascii=False)}"
    except UnicodeDecodeError:
        return f'"{name}_b64": "{base64.b64encode(data).decode()}"'


def export_chunks(client: Client, prefix: bytes) -> Iterator[str]:
    """The export document of ``prefix``, in pieces of at most a page of keys each."""
    first, end = (prefix, prefix_range_end(prefix)) if prefix else (b"\0", b"\0")
    r = client.get(first, range_end=end, limit=PAGE)
    revision = r.revision
    head = {"format": EXPORT_FORMAT, "prefix": key_text(prefix), "revision": revision}
    yield json.dumps(head, ensure_ascii=False)[:-1] + ', "kvs": [\n'
    sep = ""
    while True:
        parts = []
        for kv in r.kvs:
            parts.append(f"{sep}{{{_field('key', kv.key)}, {_field('value', kv.value)}}}")
            sep = ",\n"
        if parts:
            yield "".join(parts)
        if not r.more or not r.kvs:
            break
        r = client.get(r.kvs[-1].key + b"\0", range_end=end, limit=PAGE, revision=revision)
    yield "\n]}\n"


def _bytes(item: dict[str, Any], name: str, at: int) -> bytes:
    if f"{name}_b64" in item:
        try:
            return base64.b64decode(str(item[f"{name}_b64"]), validate=True)
        except ValueError:
            raise BadInput(f"kvs[{at}].{name}_b64 is not base64") from None
    value = item.get(name)
    if not isinstance(value, str):
        raise BadInput(f"kvs[{at}] has no {name} (text) or {name}_b64")
    return value.encode()


def parse_export(doc: Any) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The prefix and ``(key, value)`` pairs of an export document; BadInput naming what is
    wrong."""
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise BadInput(f"not an export of this console (its format is {EXPORT_FORMAT!r})")
    prefix = doc.get("prefix")
    kvs = doc.get("kvs")
    if not isinstance(prefix, str) or not isinstance(kvs, list):
        raise BadInput("an export has a prefix (text) and kvs (a list)")
    if len(kvs) > MAX_IMPORT:
        raise BadInput(f"{len(kvs)} keys: an import writes {MAX_IMPORT} at most")
    pairs = []
    for at, item in enumerate(kvs):
        if not isinstance(item, dict):
            raise BadInput(f"kvs[{at}] is not an object")
        key = _bytes(item, "key", at)
        if not key.startswith(prefix.encode()) or not key:
            raise BadInput(f"kvs[{at}]: {key_text(key)!r} is not under the prefix {prefix!r}")
        pairs.append((key, _bytes(item, "value", at)))
    return prefix.encode(), pairs


def import_kvs(client: Client, allow_writes: bool, doc: Any, confirm: str) -> dict[str, Any]:
    if not allow_writes:
        raise ReadOnly("this console is read-only (start it with --allow-writes to import)")
    prefix, pairs = parse_export(doc)
    if confirm != key_text(prefix):
        raise BadInput(f"not confirmed: the confirmation must name the prefix {key_text(prefix)!r}")
    revision = 0
    for at in range(0, len(pairs), TXN_OPS):
        ops = [Op.put(k, v) for k, v in pairs[at : at + TXN_OPS]]
        revision = client.txn([], success=ops).revision
    return {"prefix": key_text(prefix), "written": len(pairs), "revision": revision}
