"""RocketMQ 5's Python producer (``rocketmq-python-client`` 5.x, gRPC) sending continuously,
for the gRPC failover test; run with the 5.x client's own venv (see
``tests/integration/broker/grpc_producer.py``).

``python grpc_failover_producer.py "h1:p1;h2:p2;h3:p3" TOPIC MAX_SECONDS STOP_FILE``: sends
bodies ``g0000000``, ``g0000001``, ... one after the other until ``STOP_FILE`` exists or
``MAX_SECONDS`` passed; prints one JSON line per send: ``{"body", "sent", "t"}`` for an
acknowledged one (``sent`` when the send began, ``t`` when its receipt came, Unix seconds) or
``{"error", "sent", "t"}``. A failed send is not retried by the script (the client retried it
already); the next body goes 50 ms later.
"""

from __future__ import annotations

import json
import os
import sys
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def main() -> int:
    endpoints, topic, max_s, stop_file = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    producer = Producer(ClientConfiguration(endpoints, Credentials(), request_timeout=3), (topic,))
    producer.startup()
    deadline = time.time() + max_s
    seq = 0
    try:
        while time.time() < deadline and not os.path.exists(stop_file):
            body = f"g{seq:07d}"
            seq += 1
            m = Message()
            m.topic = topic
            m.body = body.encode()
            sent = time.time()
            try:
                producer.send(m)
                out = {"body": body, "sent": sent, "t": time.time()}
            except Exception as exc:  # counted by the test; the next body goes
                out = {
                    "error": f"{type(exc).__name__}: {exc}"[:300],
                    "sent": sent,
                    "t": time.time(),
                }
                time.sleep(0.05)
            print(json.dumps(out), flush=True)
    finally:
        producer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
