"""RocketMQ 5's Python transactional producer (``rocketmq-python-client`` 5.x, gRPC) as a
subprocess.

Run as ``python grpc_transaction.py ENDPOINT TOPIC < spec.json`` with the 5.x client's own venv
(see ``grpc_producer.py``). The spec: a list of ``{"body_hex", "action"}``, action ``commit``,
``rollback`` or ``check`` (neither: the server's check-back asks the producer's
TransactionChecker, which answers COMMIT). Prints one JSON line per message
(``{"message_id", "transaction_id"}`` or ``{"error"}``), then ``{"checked": [message ids]}`` once
every ``check`` message was checked (or 60 s passed).
"""

from __future__ import annotations

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)


class Checker(TransactionChecker):
    def __init__(self) -> None:
        self.checked: list[str] = []
        self.lock = threading.Lock()

    def check(self, message: Message) -> TransactionResolution:
        with self.lock:
            self.checked.append(message.message_id)
        return TransactionResolution.COMMIT


def main() -> int:
    endpoint, topic = sys.argv[1], sys.argv[2]
    spec = json.load(sys.stdin)
    checker = Checker()
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    producer = Producer(config, (topic,), checker)
    producer.startup()
    waiting = 0
    try:
        for item in spec:
            try:
                m = Message()
                m.topic = topic
                m.body = bytes.fromhex(item["body_hex"])
                transaction = producer.begin_transaction()
                receipt = producer.send(m, transaction)
                if item["action"] == "commit":
                    transaction.commit()
                elif item["action"] == "rollback":
                    transaction.rollback()
                else:
                    waiting += 1
                out = {"message_id": receipt.message_id, "transaction_id": receipt.transaction_id}
            except Exception as exc:  # reported, the next message still goes
                out = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(out), flush=True)
        deadline = time.monotonic() + 60
        while len(set(checker.checked)) < waiting and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # the checker's EndTransaction goes out asynchronously
        print(json.dumps({"checked": sorted(set(checker.checked))}), flush=True)
    finally:
        producer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
