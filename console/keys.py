"""The Keys page's reads and writes, each bounded however large the prefix.

- :func:`list_children`: one level of the prefix tree (keys split at ``/``), a page at a
  time: keys are read ``keys_only`` in batches of at most a page, and a child "directory" is
  jumped over with one range request (its range end), so a prefix of 100,000 keys under one
  child costs one request, not 100,000 keys.
- :func:`search`: keys under a prefix whose key or value contains a string, scanning at most
  ``budget`` keys or half a second per call and handing back a cursor to go on from.
- :func:`value_views`: one value as text, pretty JSON and a hex dump (each when it applies).
- :func:`history`: a key's versions by revision, newest first (each one a read at the
  revision before the last change), until its first version or the compacted revision.
- :func:`put` and :func:`delete`: refused unless writes are allowed, and unless the request
  confirms by naming the key it changes.
"""

from __future__ import annotations

import json
import time
from typing import Any

from console.errors import BadInput, NotFound, ReadOnly
from nameserver.client import Client, KeyValue, OutOfRange, prefix_range_end

__all__ = ["delete", "history", "list_children", "put", "search", "value_views"]

DELIMITER = b"/"
MAX_PAGE = 500
#: range requests one listing may make (each one page at most)
MAX_CALLS = 50
#: bytes of a value shown as a hex dump
HEX_BYTES = 4096
#: the time one search call scans for at most (the page answers within a second)
SEARCH_SECONDS = 0.5
#: versions :func:`history` walks back at most
MAX_VERSIONS = 50


def key_text(key: bytes) -> str:
    return key.decode("utf-8", errors="replace")


def _entry(key: bytes, prefix: bytes, is_dir: bool) -> dict[str, Any]:
    return {
        "name": key_text(key[len(prefix) :]),
        "key": key_text(key),
        "key_hex": key.hex(),
        "dir": is_dir,
    }


def _page_range(prefix: bytes, cursor: bytes | None, limit: int) -> tuple[bytes, bytes]:
    """Where a page under ``prefix`` starts (its first key, or ``cursor``) and its range end
    ("" = every key); BadInput for a ``limit`` out of bounds."""
    if not 1 <= limit <= MAX_PAGE:
        raise BadInput(f"limit must be 1..{MAX_PAGE}")
    first, end = (prefix, prefix_range_end(prefix)) if prefix else (b"\0", b"\0")
    return (max(cursor, first) if cursor else first), end


def _after(key: bytes, end: bytes) -> bytes | None:
    """The first key past ``key``'s own subtree start, None at the end of the range."""
    return None if end != b"\0" and key >= end else key


def list_children(
    client: Client, prefix: bytes, cursor: bytes | None = None, limit: int = 100
) -> dict[str, Any]:
    """Up to ``limit`` children of ``prefix`` in key order: keys, and "directories" (a
    child ending in ``/`` with keys under it); ``next`` is the cursor of the next page."""
    start: bytes | None
    start, end = _page_range(prefix, cursor, limit)
    entries: list[dict[str, Any]] = []
    calls = 0
    while start is not None and len(entries) < limit and calls < MAX_CALLS:
        r = client.get(start, range_end=end, limit=limit - len(entries), keys_only=True)
        calls += 1
        if not r.kvs:
            start = None
            break
        jumped = False
        for kv in r.kvs:
            rest = kv.key[len(prefix) :]
            cut = rest.find(DELIMITER)
            if cut >= 0 and cut + 1 < len(rest):  # a key below a child directory
                child = prefix + rest[: cut + 1]
                entries.append(_entry(child, prefix, True))
                nxt = prefix_range_end(child)
                start = None if nxt == b"\0" else _after(nxt, end)
                jumped = True
                break
            entries.append(_entry(kv.key, prefix, False))
            start = kv.key + b"\0"
        if not jumped and not r.more:
            start = None
    if start is not None and len(entries) >= limit:  # is there anything left?
        probe = client.get(start, range_end=end, limit=1, keys_only=True)
        start = start if probe.kvs else None
    return {
        "prefix": key_text(prefix),
        "prefix_hex": prefix.hex(),
        "entries": entries,
        "next": start.hex() if start is not None else None,
    }


def search(
    client: Client,
    prefix: bytes,
    query: bytes,
    by: str = "key",
    cursor: bytes | None = None,
    limit: int = 50,
    budget: int = 20_000,
    budget_s: float = SEARCH_SECONDS,
) -> dict[str, Any]:
    """Keys under ``prefix`` whose key (``by="key"``) or value (``by="value"``) contains
    ``query``; a call reads at most ``budget`` keys and stops after the batch that passes
    ``budget_s`` seconds, and ``next`` goes on from there."""
    if by not in ("key", "value"):
        raise BadInput("search by 'key' or 'value'")
    if not query:
        raise BadInput("search for what? the query is empty")
    start: bytes | None
    start, end = _page_range(prefix, cursor, limit)
    matches: list[dict[str, Any]] = []
    scanned = 0
    batch = 200 if by == "value" else MAX_PAGE
    deadline = time.monotonic() + budget_s
    while start is not None and len(matches) < limit and scanned < budget:
        if scanned and time.monotonic() > deadline:
            break
        r = client.get(start, range_end=end, limit=batch, keys_only=by == "key")
        if not r.kvs:
            start = None
            break
        for kv in r.kvs:
            scanned += 1
            start = kv.key + b"\0"
            hay = kv.key if by == "key" else kv.value
            at = hay.find(query)
            if at >= 0:
                m = _entry(kv.key, b"", False)
                m["name"] = m["key"]
                if by == "value":
                    m["snippet"] = key_text(hay[max(0, at - 40) : at + len(query) + 40])
                matches.append(m)
                if len(matches) >= limit:
                    break
        else:
            if not r.more:
                start = None
    return {
        "matches": matches,
        "scanned": scanned,
        "next": start.hex() if start is not None else None,
    }


def hexdump(data: bytes) -> str:
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at : at + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {hexes:<47}  {text}")
    return "\n".join(lines)


def _meta(kv: KeyValue) -> dict[str, Any]:
    return {
        "key": key_text(kv.key),
        "key_hex": kv.key.hex(),
        "create_revision": kv.create_revision,
        "mod_revision": kv.mod_revision,
        "version": kv.version,
        "lease": f"{kv.lease:x}" if kv.lease else "",
        "size": len(kv.value),
    }


def value_views(kv: KeyValue) -> dict[str, Any]:
    """``text`` (None unless UTF-8), ``json`` (pretty; None unless JSON), ``hex``."""
    out = _meta(kv)
    try:
        text: str | None = kv.value.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    pretty = None
    if text is not None and (text.strip()[:1] in ("{", "[", '"') or text in ("true", "false")):
        try:
            pretty = json.dumps(json.loads(kv.value), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    out["text"] = text
    out["json"] = pretty
    out["hex"] = hexdump(kv.value[:HEX_BYTES])
    out["hex_truncated"] = len(kv.value) > HEX_BYTES
    return out


def get_value(client: Client, key: bytes, revision: int = 0) -> dict[str, Any]:
    if not key:
        raise BadInput("which key? none given")
    if revision < 0:
        raise BadInput("revision must be >= 0")
    try:
        r = client.get(key, revision=revision)
    except OutOfRange as exc:
        raise BadInput(f"revision {revision}: {exc.message}") from None
    if not r.kvs:
        at = f" at revision {revision}" if revision else ""
        raise NotFound(f"no key {key_text(key)!r}{at}")
    out = value_views(r.kvs[0])
    out["revision"] = r.revision
    return out


def history(client: Client, key: bytes, limit: int = 20) -> dict[str, Any]:
    """The versions of ``key``, newest first; ``end`` says why the walk stopped."""
    if not key:
        raise BadInput("which key? none given")
    limit = max(1, min(limit, MAX_VERSIONS))
    r = client.get(key)
    if not r.kvs:
        raise NotFound(f"no key {key_text(key)!r}")
    kv = r.kvs[0]
    versions: list[dict[str, Any]] = []
    end = "more"
    while True:
        v = _meta(kv)
        v["preview"] = key_text(kv.value[:120])
        versions.append(v)
        if kv.version <= 1:
            end = "first version"
            break
        if len(versions) >= limit:
            break
        try:
            prev = client.get(key, revision=kv.mod_revision - 1)
        except OutOfRange:
            end = "compacted"
            break
        if not prev.kvs or prev.kvs[0].mod_revision >= kv.mod_revision:
            end = "first version"
            break
        kv = prev.kvs[0]
    return {"key": key_text(key), "key_hex": key.hex(), "versions": versions, "end": end}


def _confirmed(allow_writes: bool, key: bytes, confirm: str) -> None:
    if not allow_writes:
        raise ReadOnly("this console is read-only (start it with --allow-writes to change keys)")
    if not key:
        raise BadInput("which key? none given")
    if confirm != key_text(key):
        raise BadInput(f"not confirmed: the confirmation must name the key {key_text(key)!r}")


def put(
    client: Client, allow_writes: bool, key: bytes, value: bytes, confirm: str
) -> dict[str, Any]:
    _confirmed(allow_writes, key, confirm)
    r = client.put(key, value, prev_kv=True)
    return {
        "key": key_text(key),
        "revision": r.revision,
        "previous_size": len(r.prev_kv.value) if r.prev_kv else None,
        "size": len(value),
    }


def delete(client: Client, allow_writes: bool, key: bytes, confirm: str) -> dict[str, Any]:
    _confirmed(allow_writes, key, confirm)
    r = client.delete(key)
    return {"key": key_text(key), "deleted": r.deleted}
