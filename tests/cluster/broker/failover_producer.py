"""A real producer sending continuously, for the client failover tests: RocketMQ 5's Python
producer (``rocketmq-python-client`` 5.x, gRPC; run with the 5.x client's own venv, see
``tests/integration/broker/grpc_producer.py``) or the ``rocketmq`` 0.4.4 wheel's (C++ core,
remoting; run with the interpreter holding the wheel). Both ship a ``rocketmq`` package,
imported by the mode that needs it.

``python failover_producer.py grpc "h1:p1;h2:p2;h3:p3" TOPIC MAX_SECONDS STOP_FILE`` or
``python failover_producer.py wheel NAMESRV TOPIC MAX_SECONDS STOP_FILE``: sends bodies
``m0000000``, ``m0000001``, ... one after the other until ``STOP_FILE`` exists or
``MAX_SECONDS`` passed; prints one JSON line per send: ``{"body", "sent", "t"}`` for an
acknowledged one (``sent`` when the send began, ``t`` when its answer came, Unix seconds) or
``{"error", "sent", "t"}``. A failed send is not repeated by the script (the client retried
it already); the next body goes 50 ms later.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Send = Callable[[str, bytes], None]  # topic, body; raises when not acknowledged


@contextmanager
def grpc_producer(endpoints: str, topic: str) -> Iterator[Send]:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    producer = Producer(ClientConfiguration(endpoints, Credentials(), request_timeout=3), (topic,))
    producer.startup()

    def send(topic: str, body: bytes) -> None:
        m = Message()
        m.topic = topic
        m.body = body
        producer.send(m)

    try:
        yield send
    finally:
        producer.shutdown()


@contextmanager
def wheel_producer(namesrv: str, topic: str) -> Iterator[Send]:
    from rocketmq.client import Message, Producer

    producer = Producer("fo-wheel", timeout=3000)
    producer.set_namesrv_addr(namesrv)
    producer.start()

    def send(topic: str, body: bytes) -> None:
        msg = Message(topic)
        msg.set_body(body.decode())
        status = int(producer.send_sync(msg).status)
        if status != 0:
            raise RuntimeError(f"send status {status}")

    try:
        yield send
    finally:
        producer.shutdown()


def run(send: Send, topic: str, until: float, stop_file: str) -> None:
    seq = 0
    while time.time() < until and not os.path.exists(stop_file):
        body = f"m{seq:07d}"
        seq += 1
        line: dict[str, object] = {"sent": time.time()}
        try:
            send(topic, body.encode())
            line["body"] = body
        except Exception as exc:  # counted by the test; the next body goes
            line["error"] = f"{type(exc).__name__}: {exc}"[:300]
        line["t"] = time.time()
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        if "error" in line:
            time.sleep(0.05)


def main() -> int:
    mode, address, topic, max_s, stop_file = sys.argv[1:6]
    producer = {"grpc": grpc_producer, "wheel": wheel_producer}[mode]
    with producer(address, topic) as send:
        run(send, topic, time.time() + float(max_s), stop_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
