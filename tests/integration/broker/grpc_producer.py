"""RocketMQ 5's Python producer (``rocketmq-python-client`` 5.x, gRPC) as a subprocess.

Run as ``python grpc_producer.py ENDPOINT TOPIC < spec.json`` with the 5.x client's own venv
(it ships a ``rocketmq`` package, as the 4.x ``rocketmq`` wheel does, and its own generated
``apache.rocketmq.v2``, which cannot share a process with metaledger's). The spec: a list of
``{"body_hex", "tag", "keys", "props", "group", "delivery_timestamp"}`` or ``{"sleep_s"}``
(the producer stays online that long) (``group``: the
message group of a FIFO message), ``"encoding"`` (``zlib`` or ``gzip``: the client's request
is sent with the body compressed so and ``body_encoding`` GZIP, as the Java client sends a
body above its 4 KiB threshold (a zlib stream) and the C# and Go clients (gzip); ``corrupt``:
GZIP with a body that is neither); prints one JSON line per message: ``{"message_id"}`` or
``{"error"}`` (what the client raised).
"""

from __future__ import annotations

import gzip
import json
import sys
import time
import zlib
from typing import Any

from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import Encoding

#: how the next message's body goes out ("": as the client sends it, IDENTITY)
ENCODING = {"next": ""}
COMPRESS = {
    "zlib": lambda b: zlib.compress(b, 5),  # the Java client: Deflater, level 5
    "gzip": gzip.compress,
    "corrupt": lambda b: b"\x78\x9c\xff" + b,  # a zlib header, then a reserved block type
}
_send_req = Producer._Producer__send_req  # type: ignore[attr-defined]


def _encoded_send_req(self: Any, message: Any) -> Any:
    """The client's own request (its checks, ids, properties), its body then encoded."""
    req = _send_req(self, message)
    how = ENCODING["next"]
    if how:
        m = req.messages[0]
        m.body = COMPRESS[how](m.body)
        m.system_properties.body_encoding = Encoding.GZIP
    return req


Producer._Producer__send_req = _encoded_send_req  # type: ignore[attr-defined]


def main() -> int:
    endpoint, topic = sys.argv[1], sys.argv[2]
    spec = json.load(sys.stdin)
    producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), (topic,))
    producer.startup()
    try:
        for item in spec:
            if "sleep_s" in item:  # stay online (its Telemetry stream open) for a while
                print(json.dumps({"sleeping": item["sleep_s"]}), flush=True)
                time.sleep(item["sleep_s"])
                continue
            try:
                m = Message()
                m.topic = topic
                m.body = bytes.fromhex(item["body_hex"])
                if item.get("tag"):
                    m.tag = item["tag"]
                if item.get("group"):
                    m.message_group = item["group"]
                for key in item.get("keys", []):
                    m.keys = key
                for k, v in item.get("props", {}).items():
                    m.add_property(k, v)
                if item.get("delivery_timestamp"):  # a DELAY message (timer)
                    # 5.1.2 writes this into Timestamp.seconds as given: seconds, then
                    m.delivery_timestamp = item["delivery_timestamp"]
                ENCODING["next"] = item.get("encoding", "")
                receipt = producer.send(m)
                out = {"message_id": receipt.message_id}
            except Exception as exc:  # reported, the next message still goes
                out = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(out), flush=True)
    finally:
        producer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
