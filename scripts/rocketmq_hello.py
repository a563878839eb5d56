"""Send one message and consume it back with a real RocketMQ client (the ``rocketmq`` wheel's C++ core).

Usage: ``python3 scripts/rocketmq_hello.py NAMESRV TOPIC [TEXT]`` (NAMESRV: a metaledger
node's RocketMQ remoting address, e.g. ``127.0.0.1:9879``). The producer finds the topic's
route through metaledger, sends to the broker group's master and prints the send result;
a push consumer (group ``hello-<pid>``, so it starts at the queue's beginning) prints the
message when it arrives. Exit 0 once it did, 1 if it did not within 30 s.
"""

from __future__ import annotations

import os
import sys
import threading
import time


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    namesrv, topic = argv[0], argv[1]
    text = argv[2] if len(argv) > 2 else "hello from a RocketMQ client"
    from rocketmq.client import Message, Producer, PushConsumer

    producer = Producer(f"hello-producer-{os.getpid()}", timeout=10000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        msg = Message(topic)
        msg.set_keys(f"hello-{os.getpid()}")
        msg.set_tags("hello")
        msg.set_body(text)
        result = producer.send_sync(msg)
        print(f"sent: status={result.status.name} msgId={result.msg_id} offset={result.offset}")
    finally:
        producer.shutdown()

    got = threading.Event()

    def on_message(received: object) -> None:  # returning is success, raising retries
        body = received.body  # type: ignore[attr-defined]
        body = body.decode() if isinstance(body, bytes) else str(body)
        if body == text:
            print(f"received: {body!r} (topic {topic}, tags hello)", flush=True)
            got.set()

    consumer = PushConsumer(f"hello-{os.getpid()}")
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, on_message, "hello")
    consumer.start()
    try:
        deadline = time.monotonic() + 30
        while not got.wait(0.2):
            if time.monotonic() >= deadline:
                print("not received within 30 s", file=sys.stderr)
                return 1
        return 0
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
