"""Properties decoded from bytes that are kept, so a record can store them as they came.

A SEND_BATCH_MESSAGE item carries its properties encoded (``name 0x01 value 0x02``); the
broker reads a few of them (TAGS, KEYS, UNIQ_KEY, TRAN_MSG, the replica trail) and stores
the rest untouched, as RocketMQ's broker does (``CommitLog.MessageExtEncoder.encodeBatch``
copies each item's properties bytes). :class:`KeptProperties` is the decoded mapping with
those bytes beside it; :func:`rmq.message.encode_stored` writes them instead of encoding the
mapping again (a Redis full sync's messages carry ten or eleven properties: about 1 µs a
message). Decoding them again gives the same mapping, whatever their form (a repeated name,
a piece without a separator), because it is the same decoder.

Read-only, so the bytes cannot go stale: a change makes a new mapping (``dict(props)``),
which is encoded anew. Not compiled by mypyc (a subclass of ``dict``).
"""

from __future__ import annotations

from typing import NoReturn

__all__ = ["KeptProperties", "keep"]


class KeptProperties(dict[str, str]):
    """A read-only ``dict`` of decoded properties and the ``encoded`` bytes they came from;
    made by :func:`keep` (dict's own constructor, then the bytes: half the time of an
    ``__init__`` of ours, per batch item)."""

    __slots__ = ("encoded",)
    encoded: bytes

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("kept properties are read-only: change a copy, dict(props)")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only

    def __reduce__(self) -> tuple[object, ...]:
        # copy and pickle build it from its parts (dict's way sets items one by one)
        return (keep, (dict(self), self.encoded))


def keep(decoded: dict[str, str], encoded: bytes) -> KeptProperties:
    """``decoded`` (what :func:`rmq.message.decode_properties` made of ``encoded``), kept
    with its bytes."""
    props = KeptProperties(decoded)
    props.encoded = encoded
    return props
