"""The history's bytes against the backend quota (etcd's db size holds every revision until
a compaction): kept exactly as versions come and go, and counted by the quota check."""

from __future__ import annotations

import random

from nameserver.cluster.nospace import SpaceCheck
from nameserver.kv.history import VERSION_OVERHEAD, _past_bytes
from tests.property.test_kv_history_property import compact, delete, put
from tests.unit.nameserver.kv.test_txn_revision import Node


def recount(node: Node) -> int:
    versions = node.history._versions
    return sum(_past_bytes(k, v) for k, v in versions.items())


def test_the_bytes_follow_every_put_delete_read_and_compaction() -> None:
    node, rng = Node(), random.Random(3)
    keys = [b"k/%d" % i for i in range(6)]
    for i in range(600):
        key = rng.choice(keys)
        r = rng.random()
        if r < 0.6:
            node.step(put(key, b"v" * rng.randrange(0, 50)))
        elif r < 0.85:
            node.step(delete(key, b"" if r < 0.8 else b"k0"))
        elif r < 0.95:  # reads decode versions in place: the count must not drift
            at = rng.randrange(max(1, node.history.floor), node.offset + 1)
            for kv in node.history.view(at).range(b"k/", b"k0"):
                assert kv.key
        elif node.history.compacted < node.offset:
            node.step(compact(rng.randrange(node.history.compacted + 1, node.offset + 1)))
        assert node.history.version_bytes == recount(node), i
    node.step(put(b"k/0", b"x"))
    node.step(compact(node.offset))
    node.step(put(b"other", b"y"))  # a new key's first version is its current value
    assert node.history.version_bytes == recount(node) == 0


def test_overwrites_of_one_key_count_once_each() -> None:
    node = Node()
    for _ in range(5):
        node.step(put(b"a", b"v" * 100))
    assert node.history.version_bytes == recount(node) > 4 * (100 + VERSION_OVERHEAD)


def test_the_quota_check_counts_the_history() -> None:
    node = Node()
    check = SpaceCheck(20_000)
    value = b"v" * 4000
    grow = put(b"a", value)
    node.step(put(b"a", value))
    assert check.refuses(node.machine.image, grow) is None
    check.history_bytes = lambda: node.history.version_bytes
    refused = 0
    for _ in range(10):
        if check.refuses(node.machine.image, grow) == "quota":
            refused += 1
            break
        node.step(put(b"a", value))
    assert refused, node.history.version_bytes
    assert SpaceCheck(20_000).refuses(node.machine.image, grow) is None  # the image alone fits
    node.step(compact(node.offset))
    assert check.refuses(node.machine.image, grow) is None
