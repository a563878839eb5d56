"""RocketMQ 5's real Python client (``rocketmq-python-client``) as bench.grpc_vs_remoting's
load: ``CONCURRENCY`` threads, each sending with ``Producer.send`` and waiting for the receipt.

    VENV/bin/python bench/grpc5_send.py ENDPOINT TOPIC SIZE CONCURRENCY WARMUP_S DURATION_S COUNT

Runs in the client's own venv without PYTHONPATH (its ``rocketmq`` package and generated
``apache.rocketmq.v2`` cannot share a process with metaledger's), so it imports nothing of
bench: the percentile is bench.broker_send's nearest rank, written again here. Prints progress
to stderr and one JSON line to stdout: sends, window_s, sends_per_s, p50_ms, p99_ms, max_ms,
errors (by exception type), client_cpu_pct.
"""

from __future__ import annotations

import collections
import json
import sys
import threading
import time


def nearest_rank(sorted_ms: list[float], q: float) -> float | None:
    if not sorted_ms:
        return None
    rank = max(1, round(q * len(sorted_ms) + 0.5 - 1e-9))
    return round(sorted_ms[min(rank, len(sorted_ms)) - 1], 2)


def main() -> int:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    endpoint, topic = sys.argv[1], sys.argv[2]
    size, concurrency = int(sys.argv[3]), int(sys.argv[4])
    warmup_s, duration_s, count = float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
    producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), (topic,))
    producer.startup()
    body = b"x" * size
    lat_ns: list[int] = []
    errors: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    stop = threading.Event()
    t0 = time.perf_counter_ns()
    window_from = t0 + int(warmup_s * 1e9)
    window_to = window_from + int(duration_s * 1e9)
    ended = [window_to]

    def sender() -> None:
        m = Message()
        m.topic, m.body = topic, body
        while not stop.is_set():
            start = time.perf_counter_ns()
            try:
                producer.send(m)
            except Exception as exc:  # counted by kind; the next send still goes
                with lock:
                    errors[type(exc).__name__] += 1
                time.sleep(0.01)
                continue
            end = time.perf_counter_ns()
            if window_from <= start and end <= window_to:
                with lock:
                    lat_ns.append(end - start)
                    if count and len(lat_ns) >= count:
                        ended[0] = end
                        stop.set()

    cpu0 = time.process_time()
    threads = [threading.Thread(target=sender, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    while not stop.wait(1.0):
        now = time.perf_counter_ns()
        print(f"  client5-send: {(now - t0) / 1e9:5.1f} s {len(lat_ns):>8} acked", file=sys.stderr)
        if now >= window_to:
            stop.set()
    for t in threads:
        t.join(15)
    elapsed = (time.perf_counter_ns() - t0) / 1e9
    cpu = time.process_time() - cpu0
    producer.shutdown()
    window_s = max(1e-9, (min(ended[0], window_to) - window_from) / 1e9)
    ms = sorted(v / 1e6 for v in lat_ns)
    print(
        json.dumps(
            {
                "sends": len(ms),
                "window_s": round(window_s, 3),
                "sends_per_s": round(len(ms) / window_s),
                "p50_ms": nearest_rank(ms, 0.50),
                "p99_ms": nearest_rank(ms, 0.99),
                "max_ms": round(ms[-1], 2) if ms else None,
                "errors": dict(errors),
                "client_cpu_pct": round(100 * cpu / elapsed),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
