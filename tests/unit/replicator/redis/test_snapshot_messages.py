"""A full sync's messages: the one-key shortcut (argv[1] the command's only key) and its
properties text from a template per db give what the general path (``plan``, the properties
dict) gives, field for field, and the text is the dict's checked properties text."""

from __future__ import annotations

import pytest

from replicator.redis.commands import CommandSpec
from replicator.redis.events import EventBuilder, OutMessage
from rmq.message import checked_properties_text

REPLID = "c" * 40

COMMANDS: list[list[bytes]] = [
    [b"SET", b"k1", b"v"],
    [b"SET", b"\xff\x00binary", b"v"],  # no KEYS
    [b"SET", b"with space", b"v"],
    [b"RPUSH", b"list", b"a", b"b"],
    [b"HSET", b"h", b"f1", b"1", b"f2", b"2"],
    [b"SADD", b"s", b"m"],
    [b"ZADD", b"z", b"1", b"m"],
    [b"PEXPIREAT", b"k1", b"1764170000000"],
    [b"DEL", b"a", b"b", b"c", b"d"],  # split by queue
    [b"MSET", b"a", b"1", b"b", b"2"],
    [b"RENAME", b"a", b"b"],  # two keys
    [b"FUNCTION", b"RESTORE", b"payload"],  # a container, no key
    [b"NOSUCHCOMMAND", b"x"],  # unknown: every queue
    [b"SET", b"big", b"y" * 100],  # fragments
]


def messages(snapshot_id: str, general: bool, monkeypatch: pytest.MonkeyPatch) -> list[OutMessage]:
    b = EventBuilder("T", 3, REPLID, max_body_bytes=64, fragment_bytes=32)
    if general:

        def never(name: bytes, spec: CommandSpec, tag: str) -> None:
            b._one_key[bytes(name)] = None

        monkeypatch.setattr(b, "_learn_one_key", never)
    b.begin_snapshot(REPLID, 77, snapshot_id)
    out: list[OutMessage] = []
    for round_ in range(2):  # the second round takes the shortcut where it applies
        for db in (0, 3):
            for argv in COMMANDS:
                out += b.snapshot_messages(db + round_, argv)
    return out


@pytest.mark.parametrize("snapshot_id", ["", "4.0123456789ab"])
def test_the_shortcut_gives_the_general_paths_messages(
    snapshot_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = messages(snapshot_id, False, monkeypatch)
    general = messages(snapshot_id, True, monkeypatch)
    assert fast == general
    for f, g in zip(fast, general, strict=True):
        assert list(f.properties.items()) == list(g.properties.items())  # the same order
        assert not g.properties_text
    texts = [m for m in fast if m.properties_text]
    assert len(texts) >= 2 * 8  # the one-key commands of the second round, in two dbs
    for m in texts:
        assert m.properties_text == checked_properties_text(m.properties)
