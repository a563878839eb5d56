"""GET_CONSUME_STATS' body: RocketMQ's ``ConsumeStats`` (``remoting/.../admin/ConsumeStats.java``)
as fastjson writes it, and back.

``{"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:
{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":0,"pullOffset":8}}}``: fastjson writes
a map keyed by ``MessageQueue`` with the key object itself before the colon (not JSON: a
standard parser refuses it), fields in alphabetical order. An ``OffsetWrapper`` here may carry
one field more, ``inflight`` (messages popped and not acked yet: metaledger's, fastjson and
the dashboard ignore it). ``pullOffset - consumerOffset`` is RocketMQ's "in flight"
(``ConsumeStats.computeInflightTotalDiff``); for a POP group that span also holds messages
acked above ``consumerOffset``, so ``inflight`` counts exactly.

Two more metaledger fields give the lag in time: ``nextTimestamp``, the store time of the
first message not consumed (at ``consumerOffset``: a POP group's lowest not acked), and
``newestTimestamp``, the store time of the queue's newest message (at ``brokerOffset - 1``);
the lag in time is their difference (:attr:`QueueOffsets.lag_ms`, RocketMQ 5's "consumer lag
latency" measured against the newest message instead of the clock). Both are 0 when the group
is caught up, and written only when not 0 (a row without lag is the bytes it always was).

Sans-I/O, no metaledger imports, like the rest of ``rmq``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["ConsumeStatsError", "QueueOffsets", "decode_consume_stats", "encode_consume_stats"]


class ConsumeStatsError(ValueError):
    """A body that is not a ConsumeStats."""


@dataclass(frozen=True)
class QueueOffsets:
    """One queue's row: ``MessageQueue`` + ``OffsetWrapper``."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    pull_offset: int
    last_timestamp: int = 0
    inflight: int = 0
    next_timestamp: int = 0
    newest_timestamp: int = 0

    @property
    def lag_ms(self) -> int:
        """How much older the first message not consumed is than the newest (0 when caught
        up or when a time is not known)."""
        if self.next_timestamp <= 0 or self.newest_timestamp <= 0:
            return 0
        return max(0, self.newest_timestamp - self.next_timestamp)

    @property
    def lag(self) -> int:
        """Messages not consumed: never delivered (``broker - pull``) plus in flight."""
        return max(0, self.broker_offset - self.pull_offset) + self.inflight


def _compact(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _wrapper(r: QueueOffsets) -> dict[str, int]:
    out = {
        "brokerOffset": r.broker_offset,
        "consumerOffset": r.consumer_offset,
        "inflight": r.inflight,
        "lastTimestamp": r.last_timestamp,
        "pullOffset": r.pull_offset,
    }
    if r.next_timestamp or r.newest_timestamp:
        out["newestTimestamp"] = r.newest_timestamp
        out["nextTimestamp"] = r.next_timestamp
    return out


def encode_consume_stats(rows: list[QueueOffsets], consume_tps: float = 0.0) -> bytes:
    table = ",".join(
        _compact({"brokerName": r.broker_name, "queueId": r.queue_id, "topic": r.topic})
        + ":"
        + _compact(_wrapper(r))
        for r in rows
    )
    return f'{{"consumeTps":{float(consume_tps)!r},"offsetTable":{{{table}}}}}'.encode()


def _int(doc: dict[str, object], name: str, default: int | None = None) -> int:
    value = doc.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConsumeStatsError(f"ConsumeStats: {name} is not an integer: {value!r}")
    return value


def decode_consume_stats(body: bytes) -> tuple[list[QueueOffsets], float]:
    """The rows and consumeTps of a ConsumeStats body (fastjson's object keys, or a key
    written as a JSON string of the object, as a standard writer would)."""
    try:
        text = body.decode("utf-8")
        return _decode(text, json.JSONDecoder())
    except ConsumeStatsError:
        raise
    except (ValueError, LookupError, TypeError, AttributeError, RecursionError) as exc:
        raise ConsumeStatsError(f"ConsumeStats: {exc}") from None


def _skip(text: str, pos: int, char: str | None = None) -> int:
    while text[pos].isspace():
        pos += 1
    if char is not None and text[pos] != char:
        raise ConsumeStatsError(f"ConsumeStats: {char!r} expected at {pos}")
    return pos + (char is not None)


def _decode(text: str, decoder: json.JSONDecoder) -> tuple[list[QueueOffsets], float]:
    pos = _skip(text, 0, "{")
    tps = 0.0
    rows: list[QueueOffsets] = []
    while True:
        pos = _skip(text, pos)
        if text[pos] == "}":
            return rows, tps
        name, pos = decoder.raw_decode(text, pos)
        pos = _skip(text, _skip(text, pos, ":"))
        if name == "offsetTable":
            pos = _skip(text, pos, "{")
            while text[(pos := _skip(text, pos))] != "}":
                key, pos = decoder.raw_decode(text, pos)
                if isinstance(key, str):
                    key = json.loads(key)
                value, pos = decoder.raw_decode(text, _skip(text, _skip(text, pos, ":")))
                rows.append(
                    QueueOffsets(
                        topic=str(key["topic"]),
                        broker_name=str(key["brokerName"]),
                        queue_id=_int(key, "queueId"),
                        broker_offset=_int(value, "brokerOffset", 0),
                        consumer_offset=_int(value, "consumerOffset", 0),
                        pull_offset=_int(value, "pullOffset", 0),
                        last_timestamp=_int(value, "lastTimestamp", 0),
                        inflight=_int(value, "inflight", 0),
                        next_timestamp=_int(value, "nextTimestamp", 0),
                        newest_timestamp=_int(value, "newestTimestamp", 0),
                    )
                )
                pos = _skip(text, pos)
                if text[pos] == ",":
                    pos += 1
            pos += 1
        else:
            value, pos = decoder.raw_decode(text, pos)
            if name == "consumeTps":
                tps = float(value)
        pos = _skip(text, pos)
        if text[pos] == ",":
            pos += 1
