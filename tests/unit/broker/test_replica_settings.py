"""broker/replica.py: the settings a replica derives from its configuration."""

from __future__ import annotations

from dataclasses import replace

from broker.config import BrokerConfig
from broker.replica import replica_heartbeat_interval_s


def test_a_short_replica_heartbeat_timeout_gets_four_heartbeats_within_it() -> None:
    """With a 2 s timeout and a heartbeat a second, one lost heartbeat put a live master at
    the edge of expiry, and noticing a dead one and an elected replica hearing of its
    election each took up to a second more (seen in the network fault harness)."""
    default = BrokerConfig(broker_name="b", data_dir="/d")
    assert replica_heartbeat_interval_s(default) == 1.0  # 10 s timeout: the configured 1 s
    short = replace(default, replica_heartbeat_timeout_ms=2000)
    assert replica_heartbeat_interval_s(short) == 0.5
