"""The cluster source's pure parts and its resolver, on ``CLUSTER NODES`` texts as Redis 7.0.15
writes them (a fake connection per address; the real cluster is in the integration test)."""

from __future__ import annotations

from typing import Any

import pytest

from replicator.redis.cluster import (
    ClusterResolver,
    ShardSpec,
    choose_master,
    parse_cluster_nodes,
    parse_shard,
)
from replicator.redis.config import RedisReplicatorConfig, parse_source
from replicator.redis.errors import ConfigError, ShardUnavailable

A, B, C = "a" * 40, "b" * 40, "c" * 40
RA, RB, RC = "1" * 40, "2" * 40, "3" * 40


def nodes_text(me: str, lines: dict[str, str]) -> str:
    """``lines``: node id → the rest of its line; ``myself,`` is added to ``me``'s flags."""
    out = []
    for nid, rest in lines.items():
        addr, flags, tail = rest.split(" ", 2)
        if nid == me:
            flags = "myself," + flags
        out.append(f"{nid} {addr} {flags} {tail}")
    return "\n".join(out) + "\n"


BEFORE = {
    A: "127.0.0.1:7000@17000 master - 0 0 1 connected 0-5460",
    B: "127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922",
    C: "127.0.0.1:7002@17002 master - 0 0 3 connected 10923-16383",
    RA: f"127.0.0.1:7003@17003 slave {A} 0 0 1 connected",
    RB: f"127.0.0.1:7004@17004 slave {B} 0 0 2 connected",
    RC: f"127.0.0.1:7005@17005 slave {C} 0 0 3 connected",
}
PORT = {A: 7000, B: 7001, C: 7002, RA: 7003, RB: 7004, RC: 7005}

# B was killed; RB won the election with epoch 7 and took B's slots
AFTER_KILL = {
    **BEFORE,
    B: "127.0.0.1:7001@17001 master,fail - 0 0 2 disconnected",
    RB: "127.0.0.1:7004@17004 master - 0 0 7 connected 5461-10922",
}


class FakeRedis:
    def __init__(self, text: str | None) -> None:
        self.text = text

    def execute_command(self, *args: Any) -> bytes:
        assert args == ("CLUSTER", "NODES")
        if self.text is None:
            raise ConnectionError("refused")
        return self.text.encode()

    def close(self) -> None:
        pass


def fake(views: dict[str, dict[str, str]]) -> Any:
    """node id → its view (absent: unreachable)."""
    by_port = {PORT[n]: n for n in PORT}

    def connect(host: str, port: int) -> FakeRedis:
        nid = by_port[port]
        view = views.get(nid)
        return FakeRedis(None if view is None else nodes_text(nid, view))

    return connect


def test_parse_cluster_nodes_line_fields() -> None:
    text = nodes_text(A, BEFORE) + (
        "d" * 40 + " :0@0 master,noaddr - 0 0 0 disconnected\n"
        + "e" * 40 + " 127.0.0.1:7009@17009,host.example master - 0 0 9 connected 5 7-9"
        " [10->-" + "f" * 40 + "] [11-<-" + "f" * 40 + "]\n"
    )  # fmt: skip
    nodes = {n.node_id: n for n in parse_cluster_nodes(text)}
    a = nodes[A]
    assert (a.host, a.port, a.is_master, a.config_epoch) == ("127.0.0.1", 7000, True, 1)
    assert "myself" in a.flags and a.owns(0) and a.owns(5460) and not a.owns(5461)
    assert nodes[RA].master_id == A and not nodes[RA].is_master and not nodes[RA].slots
    assert nodes["d" * 40].host == "" and nodes["d" * 40].failed
    e = nodes["e" * 40]
    assert e.slots == ((5, 5), (7, 9)) and (e.host, e.port) == ("127.0.0.1", 7009)


def test_parse_shard() -> None:
    assert parse_shard("0") == ShardSpec(slot=0)
    assert parse_shard("16383") == ShardSpec(slot=16383)
    assert parse_shard(A.upper()) == ShardSpec(node_id=A)
    assert parse_shard("2" * 40) == ShardSpec(node_id="2" * 40)
    for bad in ("16384", "-1", "abc", "a" * 39, "", "0" * 12):
        with pytest.raises(ConfigError, match="cluster_shard"):
            parse_shard(bad)


def test_config_validates_the_shard() -> None:
    cfg = RedisReplicatorConfig(parse_source("redis://h:7000"), "t", "j", ["e:1"])
    cfg.cluster_shard = "99999"
    with pytest.raises(ConfigError, match="cluster_shard"):
        cfg.validate()


def test_choose_master_prefers_the_higher_config_epoch() -> None:
    old = parse_cluster_nodes(nodes_text(B, BEFORE))
    new = parse_cluster_nodes(nodes_text(RB, AFTER_KILL))
    me_old = next(n for n in old if n.node_id == B)
    me_new = next(n for n in new if n.node_id == RB)
    assert choose_master([me_old, me_new], 6000) is me_new
    assert choose_master([me_old], 0) is None  # it does not serve slot 0


def test_resolve_by_slot_from_a_replica_seed_and_learns_every_node() -> None:
    views = {n: BEFORE for n in PORT}
    r = ClusterResolver(("127.0.0.1", 7005), parse_shard("6000"), connect=fake(views))
    found = r.resolve()
    assert (found.port, found.node_id, found.slot) == (7001, B, 6000)
    assert sorted(p for _, p in r.known) == sorted(PORT.values())


def test_resolve_by_node_id_of_a_replica_then_by_slot_after_the_kill() -> None:
    views = {n: BEFORE for n in PORT}
    r = ClusterResolver(("127.0.0.1", 7000), parse_shard(RB), connect=fake(views))
    assert r.resolve().port == 7001 and r.slot == 5461
    # B dies: until RB is promoted, nobody confirmed serves the slot
    del views[B]
    with pytest.raises(ShardUnavailable, match="slot 5461"):
        r.resolve()
    assert r.moved(("127.0.0.1", 7001)) is None  # no confirmed master: keep the link
    for n in views:
        views[n] = AFTER_KILL
    found = r.resolve()
    assert (found.port, found.node_id) == (7004, RB)
    moved = r.moved(("127.0.0.1", 7001))
    assert moved is not None and moved.port == 7004
    assert r.moved(("127.0.0.1", 7004)) is None


def test_a_dead_seed_is_fine_once_others_are_known() -> None:
    views = {n: BEFORE for n in PORT}
    r = ClusterResolver(("127.0.0.1", 7000), parse_shard("0"), connect=fake(views))
    assert r.resolve().port == 7000
    del views[A]
    for n in views:
        views[n] = {**BEFORE, A: "127.0.0.1:7000@17000 master,fail - 0 0 1 disconnected",
                    RA: "127.0.0.1:7003@17003 master - 0 0 8 connected 0-5460"}  # fmt: skip
    assert r.resolve().port == 7003


def test_a_stale_view_does_not_win_over_the_node_itself() -> None:
    """A lagging node still names the old master, which says itself it is a replica now."""
    failed_over = {
        **BEFORE,
        B: f"127.0.0.1:7001@17001 slave {RB} 0 0 7 connected",
        RB: "127.0.0.1:7004@17004 master - 0 0 7 connected 5461-10922",
    }
    views = {n: failed_over for n in PORT}
    views[A] = BEFORE  # stale
    r = ClusterResolver(("127.0.0.1", 7000), parse_shard("5461"), connect=fake(views))
    assert r.resolve().port == 7004


def test_no_node_reachable() -> None:
    r = ClusterResolver(("127.0.0.1", 7000), parse_shard(A), connect=fake({}))
    with pytest.raises(ShardUnavailable, match="no reachable node knows node"):
        r.resolve()
