"""The ``rocketmq`` 0.4.4 wheel (C++ core) as a subprocess: ``produce`` and ``consume``.

Run as ``python wheel_client.py produce NAMESRV GROUP < spec.json`` (spec: a list of
``{"topic", "body_hex", "tags", "keys", "props", "oneway", "expect_error"}``, or ``{"sleep_s"}``: stay online that long); prints one JSON
result per message, ``{"keys", "error"}`` for a send that raised when ``expect_error``) or
``python wheel_client.py consume NAMESRV GROUP TOPIC EXPECT TIMEOUT_S [FAIL_KEYS] [ORDERLY]`` (prints one JSON line per message received: keys, tags, properties,
reconsume times, body length and sha256; a message whose key is in FAIL_KEYS is failed,
i.e. RECONSUME_LATER: returned by our own ctypes callback, see ``callback``). A subprocess, so the C++ core's threads and logs stay out of pytest.

Bodies go in with ``SetByteMessageBody`` (the wheel's ``set_body`` stops at a NUL byte) and are
read back with the length the producer put in the ``len`` property (``GetMessageBody`` returns
a C string pointer into the message's std::string, which holds every byte).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import sys
import threading
import time


def text(value: object) -> str:
    """The wheel returns some fields as bytes and others as str."""
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def produce(namesrv: str, group: str) -> None:
    from rocketmq.client import Message, Producer
    from rocketmq.ffi import dll

    spec = json.load(sys.stdin)
    producer = Producer(group, timeout=10000, max_message_size=8 * 1024 * 1024)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    set_bytes = dll["SetByteMessageBody"]
    set_bytes.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    try:
        for item in spec:
            if "sleep_s" in item:  # stay online (heartbeats going) for a while
                print(json.dumps({"sleeping": item["sleep_s"]}), flush=True)
                time.sleep(item["sleep_s"])
                continue
            body = bytes.fromhex(item["body_hex"])
            msg = Message(item["topic"])
            if item.get("tags"):
                msg.set_tags(item["tags"])
            if item.get("keys"):
                msg.set_keys(item["keys"])
            for k, v in {**item.get("props", {}), "len": str(len(body))}.items():
                msg.set_property(k, v)
            set_bytes(msg._handle, body, len(body))
            if item.get("oneway"):
                producer.send_oneway(msg)
                print(json.dumps({"keys": item.get("keys"), "oneway": True}), flush=True)
            elif item.get("expect_error"):  # a refusal: print it, go on with the next
                try:
                    r = producer.send_sync(msg)
                except Exception as exc:
                    print(json.dumps({"keys": item.get("keys"), "error": repr(exc)}), flush=True)
                else:
                    print(json.dumps({"keys": item.get("keys"), "status": int(r.status)}))
            else:
                r = producer.send_sync(msg)
                print(
                    json.dumps(
                        {
                            "keys": item.get("keys"),
                            "status": int(r.status),
                            "msg_id": r.msg_id,
                            "offset": r.offset,
                        }
                    ),
                    flush=True,
                )
    finally:
        producer.shutdown()


def consume(
    namesrv: str,
    group: str,
    topic: str,
    expect: int,
    timeout_s: float,
    fail_keys: set[str],
    orderly: bool,
) -> None:
    from rocketmq.client import PushConsumer, RecvMessage, _to_bytes
    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import dll

    get_body = dll["GetMessageBody"]
    get_body.restype = ctypes.c_void_p
    get_body.argtypes = [ctypes.c_void_p]
    lock = threading.Lock()
    seen: list[dict[str, object]] = []

    def on_message(msg: object) -> int:
        length = int(text(msg.get_property("len")) or "0")  # type: ignore[attr-defined]
        ptr = get_body(msg._handle)  # type: ignore[attr-defined]
        body = ctypes.string_at(ptr, length) if length else b""
        keys = text(msg.keys)  # type: ignore[attr-defined]
        doc = {
            "keys": keys,
            "tags": text(msg.tags),  # type: ignore[attr-defined]
            "topic": text(msg.topic),  # type: ignore[attr-defined]
            "color": text(msg.get_property("color")),  # type: ignore[attr-defined]
            "reconsume_times": msg.reconsume_times,  # type: ignore[attr-defined]
            "queue_id": msg.queue_id,  # type: ignore[attr-defined]
            "queue_offset": msg.queue_offset,  # type: ignore[attr-defined]
            "len": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
            "failed": keys in fail_keys,
        }
        with lock:  # the C++ core calls back from several threads
            seen.append(doc)
            print(json.dumps(doc), flush=True)
        return 1 if keys in fail_keys else 0  # RECONSUME_LATER / CONSUME_SUCCESS

    def callback(_consumer: object, handle: object) -> int:
        # the wheel's own wrapper re-raises the callback's exception after choosing
        # RECONSUME_LATER, so ctypes returns 0 (CONSUME_SUCCESS): the status is returned here
        try:
            return on_message(RecvMessage(handle))
        except Exception as exc:
            print(json.dumps({"error": repr(exc)}), file=sys.stderr, flush=True)
            return 1

    consumer = PushConsumer(group, orderly=orderly)
    consumer.set_namesrv_addr(namesrv)
    # one message per callback: a failed callback sends back its whole batch (C++ 1.x)
    consumer.set_message_batch_max_size(1)
    ffi_check(dll.Subscribe(consumer._handle, _to_bytes(topic), b"*"))
    consumer._register_callback(callback)
    consumer.start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with lock:
            done = len({d["keys"] for d in seen if not d["failed"]}) >= expect if expect else False
        if done:
            break
        time.sleep(0.1)
    # The C++ core moves its offset past a message just after our callback returns, on its
    # own thread, and persists offsets at shutdown; no API shows that table, so there is no
    # condition to wait on: a short grace keeps shutdown from racing the last callback's
    # bookkeeping (the test then waits, with a deadline, for the offsets in metaledger).
    time.sleep(0.5)
    consumer.shutdown()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "produce":
        produce(sys.argv[2], sys.argv[3])
    else:
        fail = set(sys.argv[7].split(",")) if len(sys.argv) > 7 and sys.argv[7] else set()
        orderly = len(sys.argv) > 8 and sys.argv[8] == "orderly"
        consume(
            sys.argv[2],
            sys.argv[3],
            sys.argv[4],
            int(sys.argv[5]),
            float(sys.argv[6]),
            fail,
            orderly,
        )
