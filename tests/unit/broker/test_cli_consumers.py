"""``metaledger consumer lag``, ``send --fifo-group`` and ``consume --pop``: their flags, the
POP client's handles and the lag report (broker/cli_lag.py, broker/cli_pop.py)."""

from __future__ import annotations

import argparse

import pytest

from broker.cli import register
from broker.cli_lag import lag_time, print_table, report
from broker.cli_pop import handles
from broker.pop.handle import decode
from broker.topics import message_group_queue
from nameserver.cli._common import common_options
from rmq.consume_stats import QueueOffsets
from rmq.message import Host, StoredMessage


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"), common_options())
    return parser.parse_args(list(argv))


def test_consumer_lag_flags() -> None:
    a = parse("consumer", "lag", "--group", "G", "--topic", "T", "-w", "json")
    assert (a.consumer_command, a.group, a.topic, a.output) == ("lag", "G", "T", "json")
    a = parse("consumer", "lag", "--group", "G")
    assert a.topic is None and not hasattr(a, "output")
    with pytest.raises(SystemExit):
        parse("consumer", "lag")  # --group is required


def test_send_fifo_group_and_consume_pop_flags() -> None:
    a = parse("send", "T", "body", "--fifo-group", "order-1")
    assert a.fifo_group == "order-1"
    assert parse("send", "T", "body").fifo_group is None
    a = parse("consume", "T", "--group", "G", "--pop", "--invisible", "5", "--fifo")
    assert (a.pop, a.invisible_s, a.fifo) == (True, 5.0, True)
    a = parse("consume", "T", "--group", "G")
    assert (a.pop, a.invisible_s, a.fifo, a.wait_s) == (False, None, False, 10.0)


def test_a_message_group_has_one_queue() -> None:
    assert message_group_queue("order-1", 8) == message_group_queue("order-1", 8)
    assert {message_group_queue(f"g{i}", 4) for i in range(50)} == {0, 1, 2, 3}


def test_handles_are_built_from_the_pop_answer() -> None:
    m = StoredMessage(
        topic="T", body=b"x", queue_id=2, queue_offset=7, store_host=Host("1.2.3.4", 1)
    )
    ext = {"startOffsetInfo": "0 1 3;0 2 5", "popTime": "1000", "invisibleTime": "60000",
           "reviveQid": "999"}  # fmt: skip
    ((got, text),) = handles(ext, "broker-a", [m])
    h = decode(text)
    assert got is m
    assert (h.start_offset, h.pop_time_ms, h.invisible_ms, h.broker_name) == (
        5,
        1000,
        60000,
        "broker-a",
    )
    assert (h.queue_id, h.offset, h.fifo) == (2, 7, True)


def test_lag_report_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        QueueOffsets("T", "b", 0, 10, 3, 3, 0, 0, 1_000, 4_500),
        QueueOffsets("T", "b", 1, 10, 2, 6, 0, 2),
    ]
    doc = report("G", rows)
    assert (doc["lag"], doc["inflight"], doc["lagMs"]) == (13, 2, 3_500)
    assert doc["queues"][1] == {
        "broker": "b", "topic": "T", "queueId": 1, "brokerOffset": 10, "consumerOffset": 2,
        "pullOffset": 6, "inflight": 2, "lag": 6, "lastTimestamp": 0, "nextTimestamp": 0,
        "newestTimestamp": 0, "lagMs": 0,
    }  # fmt: skip
    print_table(doc)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["BROKER", "TOPIC", "QUEUE", "BROKER_OFFSET", "CONSUMER_OFFSET",
                              "INFLIGHT", "LAG", "LAG_TIME", "LAST_CONSUMED"]  # fmt: skip
    assert out[1].split() == ["b", "T", "0", "10", "3", "0", "7", "3.5s", "-"]
    assert out[2].split() == ["b", "T", "1", "10", "2", "2", "6", "0", "-"]
    assert out[-1] == "total lag 13 inflight 2 lag time 3.5s"


def test_lag_time_for_people() -> None:
    assert [lag_time(ms) for ms in (0, 850, 12_399, 245_000, 7_380_000)] == [
        "0", "850ms", "12.3s", "4m05s", "2h03m"
    ]  # fmt: skip


def test_pop_flags_without_pop_are_refused_and_the_invisible_time_defaults() -> None:
    import argparse

    from broker.cli_pop import pop_flags_error

    args = argparse.Namespace(pop=False, invisible_s=5.0, fifo=False)
    assert "need --pop" in (pop_flags_error(args) or "")
    args = argparse.Namespace(pop=False, invisible_s=None, fifo=True)
    assert "need --pop" in (pop_flags_error(args) or "")
    args = argparse.Namespace(pop=True, invisible_s=None, fifo=False)
    assert pop_flags_error(args) is None and args.invisible_s == 60.0
    args = argparse.Namespace(pop=True, invisible_s=0.0, fifo=False)
    assert "above 0" in (pop_flags_error(args) or "")
    args = argparse.Namespace(pop=False, invisible_s=None, fifo=False)
    assert pop_flags_error(args) is None
