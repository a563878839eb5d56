"""``metaledger broker`` flags → BrokerConfig, and the config's validation naming the field."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from broker.cli import build_config, register
from broker.config import BrokerConfig, ConfigError, parse_delay_levels
from nameserver.cli._common import common_options


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"), common_options())
    return parser.parse_args(list(argv))


def test_broker_flags() -> None:
    args = parse(
        "broker", "--group", "b1", "--data-dir", "/tmp/x", "--listen", "127.0.0.1:11000",
        "--flush", "SYNC_FLUSH", "--broker-role", "SYNC_MASTER", "--retry-max-times", "3",
        "--message-delay-level", "1s 2s", "--ha-slave-fallbehind-max-bytes", "4096",
    )  # fmt: skip
    c = build_config(args)
    assert (c.broker_name, c.listen_port, c.address) == ("b1", 11000, "127.0.0.1:11000")
    assert c.flush_mode.value == "SYNC_FLUSH" and c.broker_role == "SYNC_MASTER"
    assert c.retry_max_times == 3 and c.delay_levels_ms == (1000, 2000)
    assert c.ha_slave_fallbehind_max_bytes == 4096
    assert (
        build_config(
            parse("broker", "--group", "b", "--data-dir", "d")
        ).ha_slave_fallbehind_max_bytes
        == 1 << 28
    )
    with pytest.raises(SystemExit):
        parse("broker", "--group", "b1", "--data-dir", "d", "--listen", "h:99999")


def test_auto_create_topic_is_on_unless_turned_off() -> None:
    base = ("broker", "--group", "b", "--data-dir", "d")
    assert build_config(parse(*base)).auto_create_topic is True  # RocketMQ's default
    assert build_config(parse(*base, "--auto-create-topic")).auto_create_topic is True
    assert build_config(parse(*base, "--no-auto-create-topic")).auto_create_topic is False


def test_send_and_consume_flags() -> None:
    a = parse("send", "T", "-", "--tags", "x", "--property", "k=v")
    assert (a.topic, a.body, a.tags, a.property) == ("T", "-", "x", ["k=v"])
    a = parse("consume", "T", "--group", "g", "--count", "2", "--wait", "3")
    assert (a.group, a.count, a.wait_s, a.tags) == ("g", 2, 3.0, "*")


def test_consume_timeout_is_the_request_deadline_as_everywhere() -> None:
    a = parse("consume", "T", "--group", "g", "--timeout", "2")
    assert (a.timeout_s, a.wait_s, a.idle_s) == (2.0, 10.0, 1.0)  # not how long to consume
    a = parse("consume", "T", "--group", "g", "--wait", "30", "--idle", "0.5")
    assert (a.wait_s, a.idle_s) == (30.0, 0.5) and "timeout_s" not in vars(a)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"broker_name": "bad name"}, "broker_name"),
        ({"broker_role": "LEADER"}, "broker_role"),
        ({"advertised_host": "0.0.0.0"}, "advertised_host"),
        ({"offset_flush_interval_ms": 5000}, "offset_flush_interval_ms"),
        ({"heartbeat_interval_ms": 0}, "heartbeat_interval_ms"),
        ({"ha_slave_fallbehind_max_bytes": 0}, "ha_slave_fallbehind_max_bytes"),
        ({"pop_auto_renew_invisible_ms": 0}, "pop_auto_renew_invisible_ms"),
        ({"message_delay_levels": "5 parsecs"}, "message_delay_levels"),
    ],
)
def test_validate_names_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        replace(BrokerConfig(broker_name="b", data_dir="d"), **change).validate()


def test_delay_levels() -> None:
    assert parse_delay_levels("1s 5s 10s 30s 1m 2h")[-1] == 7_200_000
    assert parse_delay_levels("100ms")[0] == 100


def test_listen_grpc_default_explicit_and_off() -> None:
    base = ("broker", "--group", "b1", "--data-dir", "/tmp/x")
    c = build_config(parse(*base))
    assert (c.grpc_listen, c.grpc_listen_is_default) == ("127.0.0.1:8081", True)
    c = build_config(parse(*base, "--listen-grpc", "0.0.0.0:9081"))
    assert (c.grpc_listen, c.grpc_listen_is_default) == ("0.0.0.0:9081", False)
    assert build_config(parse(*base, "--listen-grpc", "off")).grpc_listen == ""
    with pytest.raises(ConfigError, match="grpc_listen"):
        build_config(parse(*base, "--listen-grpc", "nonsense"))


def test_fifo_groups_are_named_by_a_repeatable_flag() -> None:
    base = ("broker", "--group", "b", "--data-dir", "d")
    assert build_config(parse(*base)).fifo_groups == ()
    c = build_config(parse(*base, "--fifo-group", "G1", "--fifo-group", "G2"))
    assert c.fifo_groups == ("G1", "G2")
    with pytest.raises(ConfigError, match="fifo_groups"):
        replace(c, fifo_groups=("bad group",)).validate()


def test_pop_auto_renew_invisible_ms_is_the_proxys_60_s_unless_given() -> None:
    base = ("broker", "--group", "b", "--data-dir", "d")
    assert build_config(parse(*base)).pop_auto_renew_invisible_ms == 60_000
    c = build_config(parse(*base, "--pop-auto-renew-invisible-ms", "8000"))
    assert c.pop_auto_renew_invisible_ms == 8000
