"""The Redis command table: which commands write, and which arguments are their keys.

Read from the server itself (``COMMAND INFO`` and ``COMMAND DOCS`` on an ordinary redis-py
connection, subcommands such as ``xgroup|create`` included), never from a hand-kept list: a
Redis release that adds a command or changes its keys updates this table by itself. A
snapshot taken from redis-server 7.0.15 is checked in (``command_table.json``, written by
``scripts/gen_redis_command_table.py``; a test regenerates it and fails on drift) so the
replicator works offline and tests are deterministic.

Keys are found by the command's key specs exactly as Redis's ``getKeysUsingKeySpecs``
(``db.c``) does:

- ``begin_search``: ``index`` (argv position) or ``keyword`` (search from ``startfrom``,
  backwards when negative, for a token; the keys start after it);
- ``find_keys``: ``range`` (``lastkey`` relative to the first key, or from the end when
  negative; ``keystep``; ``limit`` divides what is left, e.g. XREADGROUP's STREAMS k1 k2 id1
  id2) or ``keynum`` (the count at ``keynumidx``, keys from ``firstkey`` every ``keystep``).

A spec of type ``unknown`` or flagged ``incomplete`` (SORT … STORE, MIGRATE … KEYS) means the
keys cannot all be named from argv: :class:`FoundKeys` says so (``complete`` false) and
routing then sends the command to every queue. "Is a write" is the ``write`` flag (the
``@write`` ACL category agrees for every 7.0 command); what else counts as an effect is
:attr:`CommandSpec.is_effect`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

SNAPSHOT_FILE = "command_table.json"


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One key spec of a command (``COMMAND INFO``'s ``key_specifications`` entry)."""

    flags: frozenset[
        str
    ]  # lower case: rw ro ow rm access update insert delete not_key incomplete …
    begin_search: str  # "index" | "keyword" | "unknown"
    index: int = 0
    keyword: bytes = b""
    startfrom: int = 0
    find_keys: str = "unknown"  # "range" | "keynum" | "unknown"
    lastkey: int = 0
    keystep: int = 1
    limit: int = 0
    keynumidx: int = 0
    firstkey: int = 0


# not frozen (read-only by convention, hashable as before): a frozen dataclass's __init__
# sets each field through object.__setattr__, and this one is built once a message
@dataclass(slots=True, unsafe_hash=True)
class KeyRef:
    index: int  # position in argv
    key: bytes
    flags: frozenset[str]


# not frozen (read-only by convention, hashable as before): a frozen dataclass's __init__
# sets each field through object.__setattr__, and this one is built once a message
@dataclass(slots=True, unsafe_hash=True)
class FoundKeys:
    keys: tuple[KeyRef, ...]
    complete: (
        bool  # false: some key cannot be named from argv (unknown/incomplete spec, bad numkeys)
    )


@dataclass(frozen=True, slots=True)
class CommandSpec:
    name: str  # lower case; a subcommand is "container|sub" (e.g. "xgroup|create")
    arity: int
    flags: frozenset[str]
    acl_categories: frozenset[str]
    key_specs: tuple[KeySpec, ...]
    group: str = ""  # COMMAND DOCS group: "string", "generic", "scripting", "server", …
    subcommands: tuple[str, ...] = ()

    @property
    def is_write(self) -> bool:
        return "write" in self.flags or "@write" in self.acl_categories

    @property
    def is_scripting(self) -> bool:
        """EVAL, FCALL, FUNCTION …, SCRIPT …: user code or the code cache."""
        return "@scripting" in self.acl_categories

    @property
    def is_effect(self) -> bool:
        """What a replica must apply when it finds this in the stream: a write, or a
        scripting command that is not read-only (7.0 propagates a script's effects, but FUNCTION
        LOAD is a write and an older master sends EVAL/SCRIPT LOAD verbatim). PING, REPLCONF,
        SELECT, MULTI, EXEC and PUBLISH are not: they change no data."""
        return self.is_write or (self.is_scripting and "readonly" not in self.flags)

    def find_keys(self, argv: Sequence[bytes]) -> FoundKeys:
        keys: list[KeyRef] = []
        complete = True
        for spec in self.key_specs:
            if "not_key" in spec.flags:
                continue
            found = _spec_keys(spec, argv)
            if found is None:
                complete = False
                continue
            keys.extend(KeyRef(i, argv[i], spec.flags) for i in found)
            if "incomplete" in spec.flags:
                complete = False
        return FoundKeys(tuple(keys), complete)


def _spec_keys(spec: KeySpec, argv: Sequence[bytes]) -> list[int] | None:
    """Argv positions of ``spec``'s keys; None when the spec cannot name them (db.c's
    ``invalid_spec``); [] when a keyword spec's keyword is absent (an optional key)."""
    argc = len(argv)
    if spec.begin_search == "index":
        first = spec.index
    elif spec.begin_search == "keyword":
        start = spec.startfrom if spec.startfrom > 0 else argc + spec.startfrom
        end = argc - 1 if spec.startfrom > 0 else 1
        first = 0
        i = start
        while i != end:
            if i >= argc or i < 1:
                break
            if argv[i].lower() == spec.keyword.lower():
                first = i + 1
                break
            i = i + 1 if start <= end else i - 1
        if not first:
            return []
    else:
        return None
    if spec.find_keys == "range":
        step = spec.keystep
        if spec.lastkey >= 0:
            last = first + spec.lastkey
        elif not spec.limit:
            last = argc + spec.lastkey
        else:
            last = first + ((argc - first) // spec.limit + spec.lastkey)
    elif spec.find_keys == "keynum":
        step = spec.keystep
        at = first + spec.keynumidx
        if at >= argc or at < 0:
            return None
        try:
            numkeys = int(argv[at])
        except ValueError:
            return None
        if numkeys < 0:
            return None
        first += spec.firstkey
        last = first + numkeys - 1
        if numkeys == 0:
            return []
    else:
        return None
    if last >= argc or last < first or first >= argc or step < 1:
        return None
    return list(range(first, last + 1, step))


class CommandTable:
    """Command name (and ``container|sub``) → :class:`CommandSpec`."""

    def __init__(self, specs: Mapping[str, CommandSpec], redis_version: str = "") -> None:
        self.specs = dict(specs)
        self.redis_version = redis_version
        # argv[0] as sent → the spec of a command that is no container (the hot path: one
        # lookup a command); containers resolve by argv[1] each time
        self._plain: dict[bytes, CommandSpec] = {}

    def __len__(self) -> int:
        return len(self.specs)

    def get(self, name: str) -> CommandSpec | None:
        return self.specs.get(name.lower())

    def lookup(self, argv: Sequence[bytes]) -> CommandSpec | None:
        """The spec for a command line: a container (XGROUP, CONFIG, FUNCTION, …) resolves to
        its subcommand by argv[1]. None for a command, or a container's subcommand, that this
        table does not know (a newer server, a module): the caller must assume the worst."""
        if not argv:
            return None
        spec = self._plain.get(argv[0])
        if spec is not None:
            return spec
        name = argv[0].decode("utf-8", "replace").lower()
        spec = self.specs.get(name)
        if spec is not None and spec.subcommands:
            if len(argv) > 1:
                return self.specs.get(f"{name}|{argv[1].decode('utf-8', 'replace').lower()}")
            return spec
        if spec is not None and len(self._plain) < 1024:
            self._plain[bytes(argv[0])] = spec
        return spec

    # ---- (de)serialisation: the raw dict is the JSON snapshot's content ----

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> CommandTable:
        specs: dict[str, CommandSpec] = {}
        for name, entry in raw["commands"].items():
            specs[name] = CommandSpec(
                name=name,
                arity=int(entry["arity"]),
                flags=frozenset(entry["flags"]),
                acl_categories=frozenset(entry["acl_categories"]),
                key_specs=tuple(_key_spec(ks) for ks in entry["key_specs"]),
                group=entry.get("group", ""),
                subcommands=tuple(entry.get("subcommands", ())),
            )
        return cls(specs, raw.get("redis_version", ""))

    @classmethod
    def from_json(cls, text: str) -> CommandTable:
        return cls.from_raw(json.loads(text))

    @classmethod
    def from_server(cls, client: Any) -> CommandTable:
        return cls.from_raw(fetch_raw(client))


def _key_spec(raw: Mapping[str, Any]) -> KeySpec:
    bs, fk = raw["begin_search"], raw["find_keys"]
    bspec, fspec = bs.get("spec", {}), fk.get("spec", {})
    return KeySpec(
        flags=frozenset(f.lower() for f in raw["flags"]),
        begin_search=bs["type"],
        index=int(bspec.get("index", 0)),
        keyword=str(bspec.get("keyword", "")).encode(),
        startfrom=int(bspec.get("startfrom", 0)),
        find_keys=fk["type"],
        lastkey=int(fspec.get("lastkey", 0)),
        keystep=int(fspec.get("keystep", 1)),
        limit=int(fspec.get("limit", 0)),
        keynumidx=int(fspec.get("keynumidx", 0)),
        firstkey=int(fspec.get("firstkey", 0)),
    )


@cache
def snapshot() -> CommandTable:
    """The checked-in table of redis-server 7.0.15 (offline use, deterministic tests)."""
    return CommandTable.from_json(snapshot_text())


def snapshot_text() -> str:
    return (resources.files(__package__) / SNAPSHOT_FILE).read_text(encoding="utf-8")


# ---- reading the table from a server ----


def fetch_raw(client: Any) -> dict[str, Any]:
    """``COMMAND INFO`` and ``COMMAND DOCS`` of the server behind a redis-py client, as the
    JSON-ready dict the snapshot holds. The replies are read raw from one connection (redis-py's
    own COMMAND callback drops subcommands), RESP2 or RESP3 alike."""
    conn = client.connection_pool.get_connection()
    try:
        conn.send_command("COMMAND", "INFO")
        info = conn.read_response()
        conn.send_command("COMMAND", "DOCS")
        docs = _plain(conn.read_response())
        conn.send_command("INFO", "server")
        server_info = _plain(conn.read_response())
    finally:
        client.connection_pool.release(conn)
    groups: dict[str, str] = {}
    for name, doc in _as_map(docs).items():
        doc = _as_map(doc)
        groups[name.lower()] = str(doc.get("group", ""))
        for sub, subdoc in _as_map(doc.get("subcommands") or {}).items():
            groups[sub.lower()] = str(_as_map(subdoc).get("group", ""))
    commands: dict[str, Any] = {}
    for entry in info:
        _add_command(commands, _plain(entry), groups)
    version = ""
    for line in str(server_info).splitlines():
        if line.startswith("redis_version:"):
            version = line.split(":", 1)[1].strip()
    return {"redis_version": version, "commands": dict(sorted(commands.items()))}


def _add_command(out: dict[str, Any], entry: list[Any], groups: Mapping[str, str]) -> None:
    name = str(entry[0]).lower()
    subs = entry[9] if len(entry) > 9 else []
    out[name] = {
        "arity": int(entry[1]),
        "flags": sorted(str(f).lower() for f in entry[2]),
        "acl_categories": sorted(str(c).lower() for c in entry[6]),
        "key_specs": [_raw_key_spec(ks) for ks in entry[8]],
        "group": groups.get(name, ""),
        "subcommands": sorted(str(s[0]).lower() for s in subs),
    }
    for sub in subs:
        _add_command(out, sub, groups)


def _raw_key_spec(ks: Any) -> dict[str, Any]:
    ks = _as_map(ks)
    out: dict[str, Any] = {"flags": sorted(str(f) for f in ks["flags"])}
    for part in ("begin_search", "find_keys"):
        p = _as_map(ks[part])
        out[part] = {"type": str(p["type"]), "spec": dict(sorted(_as_map(p["spec"]).items()))}
    return out


def _plain(value: Any) -> Any:
    """bytes → str, RESP3 maps and RESP2 lists kept as they are (recursively)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _as_map(value: Any) -> dict[str, Any]:
    """A RESP3 map as is; a RESP2 flat ``[k1, v1, k2, v2 …]`` list as a dict."""
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and len(value) % 2 == 0:
        return {str(value[i]): value[i + 1] for i in range(0, len(value), 2)}
    if value is None or value == []:
        return {}
    raise ValueError(f"not a map: {value!r:.80}")
