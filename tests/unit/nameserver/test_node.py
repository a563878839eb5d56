"""The node's facade (:class:`nameserver.node.NodeFacade`) on a one-node log (the in-memory
engine, a real apply thread): what every front calls, without any transport."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from nameserver.cluster.records import ALARM_CORRUPT, ALARM_NOSPACE, alarm_text, member_id_of
from nameserver.config import ServerConfig
from nameserver.errors import FailedPrecondition, InvalidArgument, NotFound
from nameserver.kinds import REGISTRY
from nameserver.kv.hashing import kv_hash_at
from nameserver.node import NodeFacade
from nameserver.state.machine import MetadataStateMachine
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Entry, InMemoryEngine, ReplicatedLog, SegmentConfig, SegmentLog
from snapshots import read_snapshot

T = TypeVar("T")
PEER = "127.0.0.1:9878"  # ServerConfig's listen_peer


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeFacade]:
    state = MetadataStateMachine.empty(REGISTRY)
    segments = SegmentLog.open(str(tmp_path / "log"), SegmentConfig(fsync_policy="batch"))
    engine = InMemoryEngine("n0", PEER)
    rlog = ReplicatedLog(engine, state, segments, "n0")
    rlog.start()
    config = ServerConfig(node_id="n0", data_dir=str(tmp_path))
    try:
        yield NodeFacade(config, rlog, state, 7, engine)
    finally:
        rlog.stop()


def run(fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await fn()

    return asyncio.run(main())


def put(key: bytes, value: bytes = b"v") -> Entry:
    op = records_pb2.KvOperation(put=rpc_pb2.PutRequest(key=key, value=value))
    return Entry(type="kv", key=key, value=op.SerializeToString())


def alarm_request(action: int, member_id: int, kind: int) -> rpc_pb2.AlarmRequest:
    return rpc_pb2.AlarmRequest(action=action, memberID=member_id, alarm=kind)  # type: ignore[arg-type]


def test_propose_waits_for_apply_and_answers_a_retry_from_the_first_result(
    node: NodeFacade,
) -> None:
    identity = (("x-ml-client-id", "c1"), ("x-ml-seq", "1"))
    first = run(lambda: node.propose(put(b"k"), identity))
    assert isinstance(first.result, rpc_pb2.PutResponse)
    assert node.state.image.kv.get(b"k") is not None
    again = run(lambda: node.propose(put(b"k", b"other"), identity))
    assert again.duplicate and again.offset == first.offset
    assert node.state.image.kv.get(b"k").value == b"v"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ((("x-ml-client-id", "c1"),), "x-ml-client-id and x-ml-seq must be given together"),
        ((("x-ml-seq", "3"),), "x-ml-client-id and x-ml-seq must be given together"),
        ((("x-ml-client-id", "c1"), ("x-ml-seq", "x")), "x-ml-seq: 'x' is not an integer"),
    ],
)
def test_propose_refuses_a_broken_deduplication_identity(
    node: NodeFacade, metadata: tuple[tuple[str, str], ...], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        run(lambda: node.propose(put(b"k"), metadata))
    assert node.state.image.kv.get(b"k") is None


def test_alarms_are_raised_and_cleared_through_the_log(node: NodeFacade) -> None:
    activate, deactivate = rpc_pb2.AlarmRequest.ACTIVATE, rpc_pb2.AlarmRequest.DEACTIVATE
    resp = run(lambda: node.change_alarm(alarm_request(activate, 5, ALARM_CORRUPT), None))
    assert [(a.memberID, a.alarm) for a in resp.alarms] == [(5, ALARM_CORRUPT)]
    assert run(lambda: node.read_alarms(ALARM_CORRUPT)) == [(5, ALARM_CORRUPT)]
    assert run(lambda: node.read_alarms(ALARM_NOSPACE)) == []
    assert node.status_errors() == [alarm_text(5, ALARM_CORRUPT)]
    resp = run(lambda: node.change_alarm(alarm_request(deactivate, 5, ALARM_CORRUPT), None))
    assert [(a.memberID, a.alarm) for a in resp.alarms] == [(5, ALARM_CORRUPT)]
    resp = run(lambda: node.change_alarm(alarm_request(deactivate, 5, ALARM_CORRUPT), None))
    assert not resp.alarms  # not raised: still OK, nothing changed
    assert run(lambda: node.read_alarms(0)) == [] and node.status_errors() == []


def test_a_full_disk_is_this_members_nospace_while_it_lasts(node: NodeFacade) -> None:
    node.log.health.fault("change-log", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert node.log.health.refuses_writes
    me = member_id_of(PEER)
    assert node.alarms(node.state.image) == [(me, ALARM_NOSPACE)]
    assert node.alarms(node.state.image, ALARM_CORRUPT) == []
    assert node.status_errors() == [alarm_text(me, ALARM_NOSPACE)]
    node.log.health.clear("change-log")
    assert node.alarms(node.state.image) == []


def test_move_leader(node: NodeFacade) -> None:
    with pytest.raises(NotFound, match="etcdserver: member not found"):
        run(lambda: node.move_leader(12345))
    run(lambda: node.move_leader(member_id_of(PEER)))  # this node already leads: done


def test_move_leader_refused_on_a_follower(node: NodeFacade) -> None:
    node.engine.is_leader = lambda: False  # type: ignore[method-assign]
    with pytest.raises(FailedPrecondition, match="etcdserver: not leader"):
        run(lambda: node.move_leader(0))


def test_require_lease(node: NodeFacade) -> None:
    with pytest.raises(NotFound, match="etcdserver: requested lease not found"):
        run(lambda: node.require_lease(99))
    grant = records_pb2.LeaseOperation(grant=records_pb2.LeaseGrant(id=99, ttl_s=60))
    entry = Entry(type="lease", key=(99).to_bytes(8, "big"), value=grant.SerializeToString())
    run(lambda: node.propose(entry, None))
    run(lambda: node.require_lease(99))


def test_hashes_and_a_snapshot_file(node: NodeFacade) -> None:
    for i in range(3):
        run(lambda i=i: node.propose(put(b"k%d" % i), None))  # type: ignore[misc]
    image = node.state.image
    digest, compact = run(lambda: node.hash_kv(0))
    assert (digest, compact) == (kv_hash_at(image.kv.data.items(), 0), 0)
    assert run(lambda: node.hash_kv(image.revision)) == (digest, compact)
    assert run(lambda: node.image_hash(image)) == run(lambda: node.image_hash(image))
    assert node.db_size_bytes() > 0
    path, captured = run(node.snapshot_file)
    try:
        snapshot = read_snapshot(path)  # verified as it is read
        # read linearizably: at least what was applied before (a barrier may add one)
        assert snapshot.info.last_offset == captured.revision >= image.revision
        assert snapshot.info.cluster_id == f"{7:016x}"
        assert sum(1 for t, _, _ in snapshot.records if t == "kv") == 3
    finally:
        os.unlink(path)
