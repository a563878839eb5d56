"""Which sends are timer messages (RocketMQ 5's HookUtils), and their way back."""

from __future__ import annotations

import pytest

from broker.timer.message import (
    TIMER_TOPIC,
    TimerMessageIllegal,
    deliver_ms,
    parse_deliver_at,
    to_real,
    to_timer,
)
from rmq.codes import ResponseCode
from rmq.message import StoredMessage

NOW = 1_700_000_000_123
DAY_S = 86_400


def msg(**props: str) -> StoredMessage:
    return StoredMessage(topic="T", body=b"b", queue_id=3, properties=props)


@pytest.mark.parametrize(
    ("props", "at"),
    [
        ({"TIMER_DELIVER_MS": str(NOW + 5000)}, NOW + 5000),
        ({"TIMER_DELAY_MS": "2500"}, NOW + 2500),
        ({"TIMER_DELAY_SEC": "7"}, NOW + 7000),
        ({"__STARTDELIVERTIME": str(NOW + 9000)}, NOW + 9000),
        ({"TIMER_DELAY_SEC": "1", "TIMER_DELIVER_MS": "5"}, NOW + 1000),  # RocketMQ's order
        ({"TIMER_OUT_MS": "1", "TIMER_DELAY_SEC": "1"}, None),  # delivered once already
        ({"KEYS": "k"}, None),
    ],
)
def test_deliver_ms(props: dict[str, str], at: int | None) -> None:
    assert deliver_ms(props, NOW) == at


def test_a_future_time_goes_to_the_timer_topic_rounded_down_to_the_second() -> None:
    m = to_timer(msg(TIMER_DELIVER_MS=str(NOW + 5000), KEYS="k"), NOW, 3 * DAY_S)
    assert (m.topic, m.queue_id) == (TIMER_TOPIC, 0)
    assert m.properties["TIMER_OUT_MS"] == str((NOW + 5000) // 1000 * 1000)
    assert (m.properties["REAL_TOPIC"], m.properties["REAL_QID"]) == ("T", "3")
    on_boundary = to_timer(msg(TIMER_DELIVER_MS="1700000010000"), NOW, 3 * DAY_S)
    assert on_boundary.properties["TIMER_OUT_MS"] == "1700000009000"  # RocketMQ: one step back


def test_a_past_time_and_a_delay_level_are_not_timer_messages() -> None:
    past = msg(TIMER_DELIVER_MS=str(NOW - 1))
    assert to_timer(past, NOW, 3 * DAY_S) is past
    leveled = to_timer(msg(DELAY="3", TIMER_DELAY_SEC="100", KEYS="k"), NOW, 3 * DAY_S)
    assert leveled.topic == "T" and dict(leveled.properties) == {"DELAY": "3", "KEYS": "k"}
    rolled_in = msg(TIMER_DELAY_SEC="5")._replace(topic=TIMER_TOPIC)
    assert to_timer(rolled_in, NOW, 3 * DAY_S) is rolled_in


def test_beyond_the_max_delay_is_refused_naming_the_property() -> None:
    with pytest.raises(TimerMessageIllegal, match="timerMaxDelaySec=259200") as info:
        to_timer(msg(TIMER_DELAY_SEC=str(3 * DAY_S + 1)), NOW, 3 * DAY_S)
    assert info.value.response_code == ResponseCode.MESSAGE_ILLEGAL
    assert to_timer(msg(TIMER_DELAY_SEC=str(3 * DAY_S)), NOW, 3 * DAY_S).topic == TIMER_TOPIC


def test_deleting_a_timer_message_is_refused() -> None:
    with pytest.raises(TimerMessageIllegal, match="TIMER_DEL_UNIQKEY"):
        to_timer(msg(TIMER_DELIVER_MS=str(NOW + 5000), TIMER_DEL_UNIQKEY="x"), NOW, 3 * DAY_S)


def test_a_value_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(TimerMessageIllegal, match="TIMER_DELIVER_MS='soon'"):
        to_timer(msg(TIMER_DELIVER_MS="soon"), NOW, 3 * DAY_S)


def test_delivered_back_to_its_real_queue() -> None:
    stored = to_timer(msg(TIMER_DELIVER_MS=str(NOW + 5000), KEYS="k"), NOW, 3 * DAY_S)
    real = to_real(stored._replace(store_timestamp=NOW), NOW + 5001)
    assert (real.topic, real.queue_id, real.body) == ("T", 3, b"b")
    assert "REAL_TOPIC" not in real.properties and "REAL_QID" not in real.properties
    assert real.properties["KEYS"] == "k"
    assert real.properties["TIMER_DELIVER_MS"] == str(NOW + 5000)
    assert real.properties["TIMER_ENQUEUE_MS"] == str(NOW)
    assert real.properties["TIMER_DEQUEUE_MS"] == str(NOW + 5001)
    assert to_timer(real, NOW + 5001, 3 * DAY_S) is real  # TIMER_OUT_MS: never again


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("+10s", NOW + 10_000),
        ("+250ms", NOW + 250),
        ("+2m", NOW + 120_000),
        ("+1d", NOW + DAY_S * 1000),
        ("1700000060000", 1_700_000_060_000),
        ("2023-11-14T22:14:20Z", 1_700_000_060_000),
        ("2023-11-14T22:14:20", 1_700_000_060_000),  # no offset: UTC
        ("2023-11-14T23:14:20+01:00", 1_700_000_060_000),
    ],
)
def test_deliver_at_forms(text: str, at: int) -> None:
    assert parse_deliver_at(text, NOW) == at


@pytest.mark.parametrize("text", ["tomorrow", "+10", "-5s", "10s"])
def test_deliver_at_says_what_it_takes(text: str) -> None:
    with pytest.raises(ValueError, match="epoch milliseconds or an ISO-8601 time"):
        parse_deliver_at(text, NOW)
