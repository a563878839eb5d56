"""Which sends are timer messages, and the two rewrites: onto the timer topic, back to the real one.

RocketMQ 5's ``HookUtils.handleScheduleMessage`` / ``checkIfTimerMessage`` /
``transformTimerMessage`` (broker/util/HookUtils.java:133-220): a message with
``TIMER_DELIVER_MS`` (epoch ms), ``TIMER_DELAY_MS`` or ``TIMER_DELAY_SEC`` (from now) is a timer
message, unless it has a DELAY level (the level wins; the ``TIMER_*`` properties are dropped),
is on the timer topic already, or carries ``TIMER_OUT_MS`` (delivered once: its properties stay
on the delivered message, and a re-send must not wait again). Aliyun ONS's
``__STARTDELIVERTIME`` (epoch ms, what ``ali-ons`` clients set) counts as ``TIMER_DELIVER_MS``
when none of those is there. A value that is not a number, or a time more than
``timerMaxDelaySec`` ahead, is refused with MESSAGE_ILLEGAL (``WHEEL_TIMER_MSG_ILLEGAL``,
SendMessageProcessor.java:412). A time not after now is stored as is: not a
timer message. Otherwise the message goes to ``rmq_sys_wheel_timer`` queue 0 with
``TIMER_OUT_MS`` (the delivery time rounded down to the second, RocketMQ's precision),
``REAL_TOPIC`` and ``REAL_QID``. A timer message deleting another (``TIMER_DEL_UNIQKEY``) is
refused with MESSAGE_ILLEGAL: not served here (delivered, it would be a message of its own).

On delivery (``TimerMessageStore.convert``/``convertMessage``, store/timer/
TimerMessageStore.java:1137-1236) the message goes back to its real topic and queue without
``REAL_TOPIC``/``REAL_QID``, with ``TIMER_ENQUEUE_MS`` and ``TIMER_DEQUEUE_MS`` added; the
user's ``TIMER_DELIVER_MS`` stays, as in RocketMQ (RocketMQ 5's proxy reads a received
message's ``delivery_timestamp`` from it: GrpcConverter.java:208).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping

from broker.remoting.errors import BrokerRequestError
from rmq.codes import ResponseCode
from rmq.message import StoredMessage

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
START_DELIVER_TIME = "__STARTDELIVERTIME"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
TIMER_PROPERTIES = (TIMER_DELIVER_MS, TIMER_DELAY_MS, TIMER_DELAY_SEC)
#: any of these makes a message a timer message (one set test per send)
_TIMER_KEYS = frozenset((*TIMER_PROPERTIES, START_DELIVER_TIME))
PRECISION_MS = 1000
_RELATIVE = re.compile(r"\+(\d+)(ms|s|m|h|d)")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class TimerMessageIllegal(BrokerRequestError):
    """MESSAGE_ILLEGAL: a timer property that is not a time, or one too far ahead."""

    response_code = ResponseCode.MESSAGE_ILLEGAL


def deliver_ms(props: Mapping[str, str], now_ms: int) -> int | None:
    """The delivery time a message's properties ask for (None: not a timer message).
    Raises TimerMessageIllegal for a value that is not a whole number."""
    if props.get(TIMER_OUT_MS) is not None:
        return None
    for name, scale, base in (
        (TIMER_DELAY_SEC, 1000, now_ms),
        (TIMER_DELAY_MS, 1, now_ms),
        (TIMER_DELIVER_MS, 1, 0),
        (START_DELIVER_TIME, 1, 0),
    ):
        text = props.get(name)
        if text is None:
            continue
        try:
            return base + int(text.strip()) * scale
        except ValueError:
            raise TimerMessageIllegal(
                f"timer message illegal: {name}={text!r} is not a whole number"
            ) from None
    return None


def check_deliver_ms(at_ms: int, now_ms: int, max_delay_sec: int) -> None:
    """TimerMessageIllegal when ``at_ms`` is more than ``max_delay_sec`` ahead."""
    if at_ms - now_ms > max_delay_sec * 1000:
        raise TimerMessageIllegal(
            "timer message illegal, the delay time should not be bigger than the max delay "
            f"{max_delay_sec * 1000}ms (timerMaxDelaySec={max_delay_sec}; the broker's "
            "--timer-max-delay-sec)"
        )


def to_timer(m: StoredMessage, now_ms: int, max_delay_sec: int) -> StoredMessage:
    """``m`` as it is stored: on the timer topic when it is a timer message, else as is."""
    props = m.properties
    if m.topic == TIMER_TOPIC or props.keys().isdisjoint(_TIMER_KEYS):
        return m
    level = props.get("DELAY", "").strip()
    if level.lstrip("-").isdigit() and int(level) > 0:
        kept = {k: v for k, v in props.items() if k not in TIMER_PROPERTIES}
        return m._replace(properties=kept)
    at = deliver_ms(props, now_ms)
    if at is not None and TIMER_DEL_UNIQKEY in props:
        raise TimerMessageIllegal(
            f"timer message illegal: {TIMER_DEL_UNIQKEY} (deleting a timer message) is not "
            "served by this broker"
        )
    if at is None or at <= now_ms:
        return m
    check_deliver_ms(at, now_ms, max_delay_sec)
    # RocketMQ rounds down to its precision, a time on the boundary one step earlier
    at = at - PRECISION_MS if at % PRECISION_MS == 0 else at // PRECISION_MS * PRECISION_MS
    stored = dict(props)
    stored[TIMER_OUT_MS] = str(at)
    return park(m, TIMER_TOPIC, 0, stored)


def timer_out_ms(m: StoredMessage) -> int | None:
    """A stored timer message's delivery time; None when it has none that parses."""
    text = m.properties.get(TIMER_OUT_MS, "")
    return int(text) if text.lstrip("-").isdigit() else None


def park(m: StoredMessage, topic: str, queue_id: int, props: dict[str, str]) -> StoredMessage:
    """``m`` with ``props`` on a system ``topic`` (the timer's, a delay level's) until it is
    due, its real topic and queue kept in ``REAL_TOPIC``/``REAL_QID``."""
    props["REAL_TOPIC"] = m.topic
    props["REAL_QID"] = str(m.queue_id)
    return m._replace(topic=topic, queue_id=queue_id, properties=props)


def unpark(m: StoredMessage, props: dict[str, str]) -> StoredMessage:
    """A stored parked message as it is put again: on its real topic and queue (``props``
    without ``REAL_*``), the rest of its store-side fields left behind."""
    topic = props.pop("REAL_TOPIC", m.topic)
    qid = props.pop("REAL_QID", "0")
    return StoredMessage(
        topic=topic,
        body=m.body,
        queue_id=int(qid) if qid.isdigit() else 0,
        flag=m.flag,
        sysflag=m.sysflag,
        born_timestamp=m.born_timestamp,
        born_host=m.born_host,
        reconsume_times=m.reconsume_times,
        properties=props,
    )


def to_real(m: StoredMessage, dequeue_ms: int) -> StoredMessage:
    """A due timer message as it is delivered: its real topic and queue (REAL_* removed),
    ``TIMER_ENQUEUE_MS`` (its store time) and ``TIMER_DEQUEUE_MS`` added."""
    props = dict(m.properties)
    props[TIMER_ENQUEUE_MS] = str(m.store_timestamp)
    props[TIMER_DEQUEUE_MS] = str(dequeue_ms)
    return unpark(m, props)


def parse_deliver_at(text: str, now_ms: int) -> int:
    """``metaledger send --deliver-at``: ``+10s`` (``ms``, ``s``, ``m``, ``h``, ``d``) from now,
    epoch milliseconds (digits only), or an ISO-8601 time (``2026-12-05T18:00:00Z``; without an
    offset it is UTC). ValueError saying what is accepted otherwise."""
    text = text.strip()
    m = _RELATIVE.fullmatch(text)
    if m:
        return now_ms + int(m.group(1)) * _UNITS_MS[m.group(2)]
    if text.isdigit():
        return int(text)
    try:
        at = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not +N(ms|s|m|h|d), epoch milliseconds or an ISO-8601 time"
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    return int(at.timestamp() * 1000)
