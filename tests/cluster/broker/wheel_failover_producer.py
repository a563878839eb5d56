"""The ``rocketmq`` 0.4.4 wheel's producer (C++ core, remoting) sending continuously, for the
failover measurement of a 4.x client; run with the interpreter holding the wheel.

``python wheel_failover_producer.py NAMESRV TOPIC MAX_SECONDS STOP_FILE``: the same output as
``grpc_failover_producer.py`` (``{"body", "sent", "t"}`` per SEND_OK, ``{"error", "sent",
"t"}`` per failed send), bodies ``w0000000``, ``w0000001``, ...
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> int:
    from rocketmq.client import Message, Producer

    namesrv, topic, max_s, stop_file = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    producer = Producer("fo-wheel", timeout=3000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    deadline = time.time() + max_s
    seq = 0
    try:
        while time.time() < deadline and not os.path.exists(stop_file):
            body = f"w{seq:07d}"
            seq += 1
            msg = Message(topic)
            msg.set_body(body)
            sent = time.time()
            try:
                r = producer.send_sync(msg)
                ok = int(r.status) == 0
                out = {"body": body} if ok else {"error": f"status {int(r.status)}"}
            except Exception as exc:  # counted by the test; the next body goes
                out = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            out.update(sent=sent, t=time.time())
            if "error" in out:
                time.sleep(0.05)
            print(json.dumps(out), flush=True)
    finally:
        producer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
