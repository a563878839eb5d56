"""The corruption checks' rules and the CORRUPT refusal, driven with plain values.

etcd 3.4's ``etcdserver/corrupt.go`` is the reference: CheckInitialHashKV (a mismatch only
when hashes differ at the same compact revision), checkHashKV (the leader's own hashes
around a read barrier; a follower's revision or compact revision past the leader's; the
same compact revision with another hash; one alarm per check) and applierV3Corrupt (kv
writes, compactions, lease grants and revokes refused with "etcdserver: corrupt cluster").
"""

from __future__ import annotations

import grpc
import pytest

from nameserver import cli
from nameserver.cli import serve
from nameserver.cluster.corrupt import (
    COMPACTED,
    CORRUPT,
    FUTURE_REV,
    KvHash,
    PeerHash,
    inconsistency,
    initial_findings,
    periodic_findings,
    refused,
)
from nameserver.cluster.corrupt_check import tamper_kv
from nameserver.cluster.records import ALARM_CORRUPT, ALARM_NOSPACE
from nameserver.config import ServerConfig
from nameserver.errors import DataLoss, from_status
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import ConfigError, Entry
from tests.unit.nameserver.cluster.test_alarms import (
    ACTIVATE,
    DEACTIVATE,
    Node,
    alarm,
    delete,
    grant,
    put,
    revoke,
    txn,
)

ME, PEER, OTHER_PEER = 0xA, 0xB, 0xC


def peer(member_id: int, h: int, rev: int = 10, crev: int = 0) -> PeerHash:
    return PeerHash(member_id, (f"http://127.0.0.1:{member_id}",), KvHash(h, rev, crev))


# ------------------------------------------------------------------ the initial check
def test_initial_same_hash_is_no_finding() -> None:
    assert initial_findings(ME, KvHash(1, 10, 0), [peer(PEER, 1), peer(OTHER_PEER, 1)]) == []


def test_initial_different_hash_at_the_same_compact_revision_is_a_mismatch() -> None:
    [f] = initial_findings(ME, KvHash(1, 10, 5), [peer(PEER, 2, crev=5), peer(OTHER_PEER, 1)])
    assert f.message == "found different hash values from remote peer"
    assert f.blames == ME
    assert f.fields["remote-peer-id"] == "b" and f.fields["remote-peer-hash"] == 2
    assert f.fields["local-member-hash"] == 1
    assert inconsistency(ME) == "a found data inconsistency with peers"


def test_initial_different_compact_revision_is_only_a_warning() -> None:
    [f] = initial_findings(ME, KvHash(1, 10, 5), [peer(PEER, 2, crev=4)])
    assert f.message == "found different compact revision values from remote peer"
    assert f.blames is None


def test_initial_slow_peer_and_compacted_are_warnings_other_errors_are_skipped() -> None:
    peers = [
        PeerHash(PEER, ("u",), None, FUTURE_REV, "required revision is a future revision"),
        PeerHash(OTHER_PEER, ("v",), None, COMPACTED, "required revision has been compacted"),
        PeerHash(0xD, ("w",), None),
    ]
    found = initial_findings(ME, KvHash(1, 10, 0), peers)
    assert [f.message for f in found] == [
        "cannot fetch hash from slow remote peer",
        "cannot fetch hash from remote peer; local member is behind",
    ]
    assert all(f.blames is None for f in found)


# ------------------------------------------------------------------ the periodic check
def test_periodic_all_equal_blames_nobody_and_counts_peers() -> None:
    h = KvHash(7, 10, 2)
    found, blamed = periodic_findings(ME, h, h, [peer(PEER, 7, 10, 2), PeerHash(OTHER_PEER, ())])
    assert blamed is None
    assert [f.message for f in found] == ["finished peer corruption check"]
    assert found[0].fields == {"number-of-peers-checked": 1}


def test_periodic_leader_hash_changed_at_the_same_revisions_blames_the_leader() -> None:
    found, blamed = periodic_findings(ME, KvHash(7, 10, 2), KvHash(8, 10, 2), [])
    assert blamed == ME and found[0].message == "found hash mismatch"


def test_periodic_leader_moved_on_between_its_hashes_is_no_finding() -> None:
    _, blamed = periodic_findings(ME, KvHash(7, 10, 2), KvHash(8, 11, 2), [])
    assert blamed is None


def test_periodic_follower_hash_differs_at_the_leaders_compact_revision() -> None:
    h = KvHash(7, 10, 2)
    found, blamed = periodic_findings(ME, h, h, [peer(PEER, 7, 10, 2), peer(OTHER_PEER, 9, 10, 2)])
    assert blamed == OTHER_PEER
    assert found[0].message == "same compact revision then hashes must match"
    assert found[0].fields["follower-peer-id"] == "c"


def test_periodic_follower_with_another_compact_revision_is_not_compared() -> None:
    h = KvHash(7, 10, 2)
    _, blamed = periodic_findings(ME, h, h, [peer(PEER, 9, 10, 1)])
    assert blamed is None


def test_periodic_follower_ahead_of_the_leader_is_blamed() -> None:
    h = KvHash(7, 10, 2)
    found, blamed = periodic_findings(ME, h, h, [peer(PEER, 7, 11, 2)])
    assert blamed == PEER
    assert found[0].message == "revision from follower must be less than or equal to leader's"
    found, blamed = periodic_findings(ME, h, h, [peer(PEER, 7, 10, 3)])
    assert blamed == PEER
    assert found[0].message.startswith("compact revision from follower must be")


def test_periodic_raises_one_alarm_per_check_for_the_first_member_found() -> None:
    found, blamed = periodic_findings(
        ME, KvHash(7, 10, 2), KvHash(8, 10, 2), [peer(PEER, 9, 10, 2), peer(OTHER_PEER, 9, 10, 2)]
    )
    assert blamed == ME
    assert sorted(f.blames for f in found if f.blames is not None) == [ME, PEER, OTHER_PEER]


# ------------------------------------------------------------------ the refusal
def compact(rev: int) -> Entry:
    return Entry(type="compact", value=records_pb2.MvccCompaction(revision=rev).SerializeToString())


@pytest.mark.parametrize(
    "entry",
    [
        put(b"k"),
        delete(b"before"),
        txn(
            rpc_pb2.TxnRequest(
                success=[rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=b"a"))]
            )
        ),
        grant(43),
        revoke(42),
        compact(2),
    ],
    ids=["put", "delete", "txn", "lease-grant", "lease-revoke", "compact"],
)
def test_a_raised_corrupt_refuses_etcds_writes_in_apply_until_disarmed(entry: Entry) -> None:
    n = Node()
    n.apply(put(b"before"))
    n.apply(grant(42))
    n.apply(alarm(ACTIVATE, 3, ALARM_CORRUPT))
    assert n.sm.image.alarms.corrupt and not n.sm.image.alarms.nospace
    before = n.sm.image
    with pytest.raises(DataLoss, match=f"^{CORRUPT}$"):
        n.apply(entry)
    assert n.sm.image.kv == before.kv and n.sm.image.leases == before.leases
    n.apply(alarm(ACTIVATE, 4, ALARM_NOSPACE))
    n.apply(alarm(DEACTIVATE, 3, ALARM_CORRUPT))
    assert not n.sm.image.alarms.corrupt
    n.apply(alarm(DEACTIVATE, 4, ALARM_NOSPACE))
    n.apply(entry)  # disarmed: the same write goes through


def test_a_raised_corrupt_lets_alarms_members_and_noops_through() -> None:
    n = Node()
    n.apply(alarm(ACTIVATE, 3, ALARM_CORRUPT))
    n.apply(alarm(ACTIVATE, 4, ALARM_NOSPACE))
    n.apply(Entry(type="noop"))
    assert not refused(Entry(type="member", key=b"n0", value=b""))
    assert not refused(Entry(type="auth", value=b"x"))
    expire = records_pb2.LeaseOperation(expire=records_pb2.LeaseExpire(ids=[42]))
    refresh = records_pb2.LeaseOperation(refresh=records_pb2.LeaseRefresh())
    assert refused(Entry(type="lease", value=expire.SerializeToString()))
    assert not refused(Entry(type="lease", value=refresh.SerializeToString()))


def test_corrupt_is_data_loss_on_the_wire_and_back() -> None:
    assert DataLoss.status == grpc.StatusCode.DATA_LOSS
    assert isinstance(from_status(grpc.StatusCode.DATA_LOSS, CORRUPT), DataLoss)


# ------------------------------------------------------------------ the test hook, flags
def test_tamper_changes_one_value_and_nothing_else() -> None:
    n = Node()
    n.apply(put(b"a", b"1"))
    n.apply(put(b"b", b"2"))
    image = n.sm.image
    changed = tamper_kv(image, "a=tampered")
    old, new = image.kv.data.get(b"a"), changed.kv.data.get(b"a")
    assert old is not None and new is not None
    assert new.value == b"tampered"
    assert (new.create_revision, new.mod_revision, new.version) == (
        old.create_revision,
        old.mod_revision,
        old.version,
    )
    assert changed.kv.data.get(b"b") == image.kv.data.get(b"b")
    assert changed.revision == image.revision and changed.alarms == image.alarms
    with pytest.raises(ValueError, match="no key 'zz'"):
        tamper_kv(image, "zz=1")


def build(*argv: str) -> ServerConfig:
    args = cli.build_parser().parse_args(
        ["serve", "--id", "n0", "--data-dir", "/d", "--cluster-password", "x", *argv]
    )
    return serve.build_config(args)


def test_the_checks_are_off_by_default() -> None:
    config = build()
    assert not config.initial_corrupt_check
    assert config.corrupt_check_time_s == 0 and config.debug_corrupt_kv == ""


def test_the_flags_take_etcds_spelling_and_a_go_duration() -> None:
    config = build(
        "--experimental-initial-corrupt-check", "--experimental-corrupt-check-time", "1m30s"
    )
    config.validate()
    assert config.initial_corrupt_check and config.corrupt_check_time_s == 90.0
    with pytest.raises(SystemExit):
        build("--experimental-corrupt-check-time", "soon")
    with pytest.raises(ConfigError, match="debug_corrupt_kv"):
        build("--debug-corrupt-kv", "novalue").validate()
