"""How the CLI prints a consumed or found message (``consume``, ``consume --pop``,
``message get``): its body as text, one line or one JSON object."""

from __future__ import annotations

import json
from typing import Any

from rmq.message import StoredMessage


def _printable(body: bytes) -> str:
    """A body as text: UTF-8 as it is, else ``0x`` and its hex."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + body.hex()


def print_message(m: StoredMessage, json_out: bool, fields: dict[str, Any], text: str = "") -> None:
    """One consumed message: a JSON object (``fields`` after its queue offset), or a line
    ``TOPIC qQUEUE@OFFSET <text>tags=… keys=… BODY``."""
    keys, body = m.properties.get("KEYS", ""), _printable(m.body)
    if json_out:
        doc = {"topic": m.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset, **fields,
               "tags": m.tags, "keys": keys, "properties": m.properties, "body": body}  # fmt: skip
        print(json.dumps(doc), flush=True)
    else:
        print(
            f"{m.topic} q{m.queue_id}@{m.queue_offset} {text}tags={m.tags!r} keys={keys!r} {body}",
            flush=True,
        )
