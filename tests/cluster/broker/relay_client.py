"""RocketMQ 5's Python producers (``rocketmq-python-client`` 5.x) given one replica's gRPC
endpoint, for ``test_grpc_relay.py``; run with the 5.x client's own venv (see
``tests/integration/broker/grpc_producer.py``).

Run as ``python relay_client.py ENDPOINT TOPIC GO_FILE``. One producer sends ``plain``;
another prepares ``checked`` and ``after-kill`` and ends neither. Both have the
TransactionChecker (a check goes to any producer of the topic: a gRPC half's producer group is
its topic, as with RocketMQ's proxy), which answers COMMIT for ``checked`` at once, for
``after-kill`` only once GO_FILE exists (UNKNOWN before, so the half stays open). Every Heartbeat answer is recorded
(the client only logs them). Prints JSON lines: ``{"sent": {body: message id}}``, then
``{"checked": [message ids]}`` and ``{"heartbeats": [codes]}`` once ``checked`` was checked
and 12 s passed (the heartbeats come 1 s after the start, then every 10 s), then
``{"after_kill": [check times]}`` once ``after-kill`` was committed by a check (or 180 s).
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
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.v5.client.connection.rpc_client import RpcClient

HEARTBEATS: list[int] = []
_heartbeat_async = RpcClient.heartbeat_async


def recorded_heartbeat(self: Any, endpoints: Any, req: Any, metadata: Any, timeout: int = 3) -> Any:
    future = _heartbeat_async(self, endpoints, req, metadata=metadata, timeout=timeout)

    def done(f: Any) -> None:
        try:
            HEARTBEATS.append(int(f.result().status.code))
        except Exception:  # not answered: recorded as 0
            HEARTBEATS.append(0)

    future.add_done_callback(done)
    return future


RpcClient.heartbeat_async = recorded_heartbeat  # type: ignore[method-assign]


class Checker(TransactionChecker):
    def __init__(self, go: str) -> None:
        self.go = go
        self.lock = threading.Lock()
        self.committed: dict[bytes, list[float]] = {}

    def check(self, message: Message) -> TransactionResolution:
        if message.body == b"after-kill" and not os.path.exists(self.go):
            return TransactionResolution.UNKNOWN
        with self.lock:
            self.committed.setdefault(message.body, []).append(time.time())
        return TransactionResolution.COMMIT


def wait(condition: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)


def main() -> int:
    endpoint, topic, go = sys.argv[1], sys.argv[2], sys.argv[3]
    started = time.monotonic()
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    checker = Checker(go)
    plain = Producer(config, (topic,), checker)
    tx = Producer(
        ClientConfiguration(endpoint, Credentials(), request_timeout=10), (topic,), checker
    )
    plain.startup()
    tx.startup()
    try:
        sent = {}
        m = Message()
        m.topic, m.body = topic, b"plain"
        sent["plain"] = plain.send(m).message_id
        for body in (b"checked", b"after-kill"):
            m = Message()
            m.topic, m.body = topic, body
            sent[body.decode()] = tx.send(m, tx.begin_transaction()).message_id
        print(json.dumps({"sent": sent}), flush=True)
        wait(lambda: b"checked" in checker.committed, 60)
        time.sleep(max(1.0, started + 12 - time.monotonic()))  # the check's end went out
        print(
            json.dumps({"checked": [sent["checked"]] if b"checked" in checker.committed else []}),
            flush=True,
        )
        print(json.dumps({"heartbeats": list(HEARTBEATS)}), flush=True)
        wait(lambda: b"after-kill" in checker.committed, 180)
        time.sleep(1.0)
        print(json.dumps({"after_kill": checker.committed.get(b"after-kill", [])}), flush=True)
    finally:
        tx.shutdown()
        plain.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
