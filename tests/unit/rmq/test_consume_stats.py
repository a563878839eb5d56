"""GET_CONSUME_STATS' body: fastjson's MessageQueue-keyed map, written and read back."""

from __future__ import annotations

import json

import pytest

from rmq.consume_stats import (
    ConsumeStatsError,
    QueueOffsets,
    decode_consume_stats,
    encode_consume_stats,
)


def test_written_as_fastjson_writes_a_map_keyed_by_message_queue() -> None:
    rows = [QueueOffsets("T", "broker-a", 0, 10, 4, 8, 1700000000000, 2)]
    body = encode_consume_stats(rows, 1.5)
    assert body == (
        b'{"consumeTps":1.5,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
        b'{"brokerOffset":10,"consumerOffset":4,"inflight":2,"lastTimestamp":1700000000000,'
        b'"pullOffset":8}}}'
    )
    assert decode_consume_stats(body) == (rows, 1.5)
    assert decode_consume_stats(encode_consume_stats([])) == ([], 0.0)


def test_read_with_spaces_string_keys_and_without_inflight() -> None:
    key = json.dumps({"topic": "T", "brokerName": "b", "queueId": 3})
    body = (
        '{ "offsetTable" : { ' + json.dumps(key) + ' : {"brokerOffset": 5, "consumerOffset": 1,'
        ' "pullOffset": 1} } , "consumeTps": 2 }'
    ).encode()
    (row,), tps = decode_consume_stats(body)
    assert (row.topic, row.broker_name, row.queue_id, row.inflight, tps) == ("T", "b", 3, 0, 2.0)
    assert row.lag == 4


def test_lag_is_never_delivered_plus_in_flight() -> None:
    # 10 sent, 6 popped (next 6), low 2 (offsets 0,1 acked; 2 more acked above), 2 in flight
    assert QueueOffsets("T", "b", 0, 10, 2, 6, inflight=2).lag == 6
    assert QueueOffsets("T", "b", 0, 3, 5, 5).lag == 0  # a committed offset past the end


@pytest.mark.parametrize(
    "body",
    [b"", b"[]", b'{"offsetTable":{{"topic":"T"}:{}}}', b'{"offsetTable":{', b"\xff",
     b'{"offsetTable":{{"topic":"T","brokerName":"b","queueId":"x"}:{}}}'],
)  # fmt: skip
def test_garbage_raises_only_consume_stats_error(body: bytes) -> None:
    with pytest.raises(ConsumeStatsError):
        decode_consume_stats(body)
