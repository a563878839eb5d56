"""A sample stored record for the tests of its encoding and of its readers."""

from __future__ import annotations

from rmq.message import Host, StoredMessage

ALL_BYTES = bytes(range(256))


def stored(body: bytes = ALL_BYTES, **kw: object) -> StoredMessage:
    """A record with every field set (UNIQ_KEY AB12, KEYS, TAGS), ``kw`` replacing any."""
    fields: dict[str, object] = {
        "topic": "T",
        "body": body,
        "queue_id": 3,
        "flag": 7,
        "queue_offset": 41,
        "physical_offset": 123456,
        "born_timestamp": 1_700_000_000_000,
        "store_timestamp": 1_700_000_000_123,
        "store_host": Host("10.1.2.3", 10911),
        "reconsume_times": 2,
        "properties": {"KEYS": "k1 k2", "TAGS": "tagA", "UNIQ_KEY": "AB12"},
    }
    fields.update(kw)
    return StoredMessage(**fields)  # type: ignore[arg-type]
