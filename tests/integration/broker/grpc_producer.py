"""RocketMQ 5's Python producer (``rocketmq-python-client`` 5.x, gRPC) as a subprocess.

Run as ``python grpc_producer.py ENDPOINT TOPIC < spec.json`` with the 5.x client's own venv
(it ships a ``rocketmq`` package, as the 4.x ``rocketmq`` wheel does, and its own generated
``apache.rocketmq.v2``, which cannot share a process with metaledger's). The spec: a list of
``{"body_hex", "tag", "keys", "props", "group"}`` (``group``: the message group of a FIFO
message); prints one JSON line per message: ``{"message_id"}``
or ``{"error"}`` (what the client raised).
"""

from __future__ import annotations

import json
import sys

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def main() -> int:
    endpoint, topic = sys.argv[1], sys.argv[2]
    spec = json.load(sys.stdin)
    producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), (topic,))
    producer.startup()
    try:
        for item in spec:
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
