"""RocketMQ 5's Python consumers (``rocketmq-python-client`` 5.x, gRPC) as a subprocess.

Run as ``python grpc_consumer.py ENDPOINT TOPIC GROUP MODE < spec.json`` with the 5.x client's
own venv (see grpc_producer.py). Prints one JSON line per event; a message is
``{"event", "message_id", "body_hex", "tag", "keys", "props", "message_group", "attempt",
"born_host", "corrupted", "t"}``.

- ``simple``: a SimpleConsumer runs the spec's steps in order, holding the messages it received
  (by message id, the newest receipt handle): ``{"op": "receive", "expect": N, "invisible_s",
  "max", "within_s"}`` receives until N messages came (``received`` events); ``{"op": "ack"}``
  and ``{"op": "change", "invisible_s"}`` act on every held message (``acked`` / ``changed``
  events, ``error`` on a refusal) and let them go (ack) or keep them (change); ``{"op":
  "sleep", "s"}``; ``{"op": "wait_file", "path", "within_s"}`` waits until the test made
  ``path`` (or ``within_s`` passed).
- ``push``: a PushConsumer whose listener fails a message the first ``fail`` times it sees it
  (the user property ``fail``), holds it ``hold_s`` seconds the first time (the user
  property ``hold_s``: a slow listener), records every call (``consume`` events, with the thread and
  ``ok``), and stops once ``expect`` messages were consumed successfully or after
  ``within_s``; then it waits ``linger_s`` for the acks to go out.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
    SimpleConsumer,
)

LOCK = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    with LOCK:
        print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def record(m: Any) -> dict[str, Any]:
    return {
        "message_id": m.message_id,
        "topic": m.topic,
        "body_hex": bytes(m.body or b"").hex(),
        "tag": m.tag,
        "keys": sorted(m.keys or ()),
        "props": dict(m.properties or {}),
        "message_group": m.message_group,
        "attempt": m.delivery_attempt,
        "born_host": m.born_host,
        "corrupted": m.corrupted,
    }


def simple(config: ClientConfiguration, topic: str, group: str, spec: dict[str, Any]) -> None:
    consumer = SimpleConsumer(
        config,
        group,
        {topic: FilterExpression(spec.get("tag", "*"))},
        await_duration=spec.get("await_s", 5),
    )
    consumer.startup()
    held: dict[str, Any] = {}
    try:
        for step in spec["steps"]:
            op = step["op"]
            if op == "receive":
                deadline = time.time() + step.get("within_s", 30)
                got = 0
                while got < step["expect"] and time.time() < deadline:
                    try:
                        messages = consumer.receive(step.get("max", 32), step["invisible_s"])
                    except Exception as exc:
                        emit("error", op=op, error=f"{type(exc).__name__}: {exc}")
                        continue
                    for m in messages:
                        held[m.message_id] = m
                        emit("received", **record(m))
                        got += 1
            elif op in ("ack", "change"):
                for message_id, m in list(held.items()):
                    try:
                        if op == "ack":
                            consumer.ack(m)
                            del held[message_id]
                            emit("acked", message_id=message_id)
                        else:
                            consumer.change_invisible_duration(m, step["invisible_s"])
                            emit("changed", message_id=message_id)
                    except Exception as exc:
                        emit("error", op=op, message_id=message_id,
                             error=f"{type(exc).__name__}: {exc}")  # fmt: skip
            elif op == "sleep":
                time.sleep(step["s"])
            elif op == "wait_file":
                deadline = time.time() + step.get("within_s", 30)
                while not os.path.exists(step["path"]) and time.time() < deadline:
                    time.sleep(0.05)  # polling the test's signal, with a deadline
    finally:
        consumer.shutdown()


class Listener(MessageListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.done: set[str] = set()

    def consume(self, message: Any) -> Any:
        n = self.calls[message.message_id] = self.calls.get(message.message_id, 0) + 1
        hold = float((message.properties or {}).get("hold_s", "0"))
        if hold and n == 1:
            emit("holding", message_id=message.message_id, s=hold)
            time.sleep(hold)
        ok = n > int((message.properties or {}).get("fail", "0"))
        emit("consume", ok=ok, call=n, thread=threading.current_thread().name, **record(message))
        if ok:
            with LOCK:
                self.done.add(message.message_id)
        return ConsumeResult.SUCCESS if ok else ConsumeResult.FAILURE


def push(config: ClientConfiguration, topic: str, group: str, spec: dict[str, Any]) -> None:
    listener = Listener()
    consumer = PushConsumer(
        config, group, listener, {topic: FilterExpression(spec.get("tag", "*"))}
    )
    consumer.startup()
    emit("started", fifo=consumer.fifo)
    try:
        deadline = time.time() + spec.get("within_s", 60)
        while time.time() < deadline:
            with LOCK:
                if len(listener.done) >= spec["expect"]:
                    break
            time.sleep(0.1)
        time.sleep(spec.get("linger_s", 2))
    finally:
        consumer.shutdown()


def main() -> int:
    endpoint, topic, group, mode = sys.argv[1:5]
    spec = json.load(sys.stdin)
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    {"simple": simple, "push": push}[mode](config, topic, group, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
