"""The RocketMQ replication job's settings: two clusters of one name are told apart by their
nameservers for loop prevention; one cluster on both sides is refused in one line."""

from __future__ import annotations

import pytest

from replicator.rocketmq.config import RocketMQReplicatorConfig, loop_names, namesrv_set
from replicator.rocketmq.errors import ConfigError


def config(source: str, dest: str, **kw: object) -> RocketMQReplicatorConfig:
    return RocketMQReplicatorConfig(source, dest, "job", ["127.0.0.1:9877"], ("T",), **kw)  # type: ignore[arg-type]


def test_distinct_names_are_the_trail_names() -> None:
    assert loop_names("A", "h1:9876", "B", "h2:9876") == ("A", "B")


def test_two_default_clusters_named_by_their_nameservers() -> None:
    src, dst = loop_names("DefaultCluster", "h2:9876;h1:9876", "DefaultCluster", "h3:9876")
    assert (src, dst) == ("DefaultCluster@h1:9876;h2:9876", "DefaultCluster@h3:9876")
    # the job the other way round computes the same two names, so loops stop either way
    assert loop_names("DefaultCluster", "h3:9876", "DefaultCluster", "h1:9876;h2:9876") == (
        dst,
        src,
    )
    assert "," not in src + dst  # the trail property is comma-separated


def test_trail_names_of_a_config() -> None:
    c = config("h1:9876", "h2:9876", source_cluster="DefaultCluster")
    c.validate()
    c.dest_cluster = "DefaultCluster"  # as the worker resolves it from the nameserver
    assert c.trail_names == ("DefaultCluster@h1:9876", "DefaultCluster@h2:9876")


def test_namesrv_set_ignores_order_spaces_and_repeats() -> None:
    assert namesrv_set(" b:1; a:1;b:1;") == ("a:1", "b:1")


def test_same_nameservers_on_both_sides_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        config("h1:9876;h2:9876", "h2:9876;h1:9876").validate()
    assert "\n" not in str(err.value) and "dest_namesrv" in str(err.value)


def test_one_name_given_for_both_sides_says_what_to_do() -> None:
    with pytest.raises(ConfigError, match="leave them out"):
        config("h1:9876", "h2:9876", source_cluster="X", dest_cluster="X").validate()
