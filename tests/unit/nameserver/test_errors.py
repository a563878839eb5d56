"""The nameserver's one error tree: every rejection maps to its gRPC status and its RocketMQ
remoting code through the two mappers, and a rejection raised inside apply comes back to
the proposer as the same exception (raftlog passes it through untouched)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from nameserver import errors
from nameserver.cluster.nospace import SpaceCheck
from nameserver.errors import (
    NameserverError,
    NotFound,
    Rejected,
    TopicNotExist,
    from_status,
)
from nameserver.grpc.status import to_status
from nameserver.kinds import REGISTRY
from nameserver.kv.semantics import ResponseTooLarge
from nameserver.node import NodeFacade
from nameserver.remoting.status import internal_error_remark, to_remoting
from nameserver.state.machine import MetadataStateMachine
from raftlog import Applied, ApplyFailure, Entry, NotLeaderError, QueueFullError
from rmq.codes import ResponseCode

S, R = grpc.StatusCode, ResponseCode

#: class -> (gRPC status, remoting code): the tree as the docstring of nameserver.errors draws it
TREE: dict[type[Rejected], tuple[grpc.StatusCode, ResponseCode]] = {
    errors.InvalidArgument: (S.INVALID_ARGUMENT, R.SYSTEM_ERROR),
    errors.UndecodableRequest: (S.INVALID_ARGUMENT, R.SYSTEM_ERROR),
    errors.NotFound: (S.NOT_FOUND, R.SYSTEM_ERROR),
    errors.TopicNotExist: (S.NOT_FOUND, R.TOPIC_NOT_EXIST),
    errors.ConfigNotFound: (S.NOT_FOUND, R.QUERY_NOT_FOUND),
    errors.AlreadyExists: (S.ALREADY_EXISTS, R.SYSTEM_ERROR),
    errors.FailedPrecondition: (S.FAILED_PRECONDITION, R.SYSTEM_ERROR),
    errors.Aborted: (S.ABORTED, R.SYSTEM_ERROR),
    errors.OutOfRange: (S.OUT_OF_RANGE, R.SYSTEM_ERROR),
    errors.ResourceExhausted: (S.RESOURCE_EXHAUSTED, R.SYSTEM_ERROR),
    errors.Unimplemented: (S.UNIMPLEMENTED, R.SYSTEM_ERROR),
    errors.Unavailable: (S.UNAVAILABLE, R.SYSTEM_ERROR),
    errors.DeadlineExceeded: (S.DEADLINE_EXCEEDED, R.SYSTEM_ERROR),
    errors.DataLoss: (S.DATA_LOSS, R.SYSTEM_ERROR),
}


def _subclasses(cls: type[Rejected]) -> set[type[Rejected]]:
    out: set[type[Rejected]] = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_subclasses(sub)}
    return out


def test_the_table_names_every_rejection_of_the_tree() -> None:
    # Forwarded takes its status per instance; ResponseTooLarge is checked below; a
    # package's own tree (nameserver.auth.errors) is checked by that package's tests
    ours = {c for c in _subclasses(Rejected) if c.__module__ == errors.__name__}
    assert ours - {errors.Forwarded} == set(TREE)
    assert ResponseTooLarge in _subclasses(Rejected)


@pytest.mark.parametrize("cls", sorted(TREE, key=lambda c: c.__name__))
def test_every_rejection_maps_to_its_status_and_remoting_code(cls: type[Rejected]) -> None:
    status, code = TREE[cls]
    exc = cls("etcdserver: some text")
    assert (exc.status, exc.remoting_code) == (status, code)
    assert to_status(exc) == (status, "etcdserver: some text")  # the message unchanged
    assert to_remoting(exc, 105) == (code, "etcdserver: some text")


def test_response_too_large_is_resource_exhausted_naming_the_limit() -> None:
    exc = ResponseTooLarge(100, "range")
    assert to_status(exc) == (S.RESOURCE_EXHAUSTED, str(exc))
    assert "max_response_bytes=100" in str(exc)


def test_a_fault_of_the_server_is_internal_and_its_text_stays_in_the_log() -> None:
    for exc in (NameserverError("write in a read-only txn"), KeyError("x")):
        assert to_status(exc)[0] == S.INTERNAL
        assert to_remoting(exc, 105) == (R.SYSTEM_ERROR, internal_error_remark(105))


def test_raftlog_errors_are_worded_alike_on_both_fronts() -> None:
    not_leader = NotLeaderError("no leader", leader_hint="10.0.0.1:2380")
    text = "etcdserver: no leader (last known leader: 10.0.0.1:2380)"
    assert to_status(not_leader) == (S.UNAVAILABLE, text)
    assert to_remoting(not_leader, 103) == (R.SYSTEM_ERROR, text)
    assert to_status(QueueFullError("full")) == (
        S.RESOURCE_EXHAUSTED,
        "etcdserver: too many requests",
    )
    assert to_remoting(TimeoutError(), 100) == (R.SYSTEM_ERROR, "etcdserver: request timed out")


def test_a_forwarded_answer_keeps_its_status() -> None:
    assert type(from_status(S.NOT_FOUND, "gone")) is NotFound
    other = from_status(S.PERMISSION_DENIED, "no")
    assert isinstance(other, errors.Forwarded) and to_status(other) == (S.PERMISSION_DENIED, "no")


class _Log:
    def __init__(self, result: Any) -> None:
        self.result = result

    async def propose(self, entries: Any, timeout_s: float, *dedup: Any) -> Applied:
        return Applied(7, self.result)


def _propose(result: Any) -> Applied:
    node = NodeFacade.__new__(NodeFacade)
    node.log, node.timeout_s = _Log(result), 1.0  # type: ignore[assignment]
    node.state, node.space = (
        MetadataStateMachine.empty(REGISTRY),
        SpaceCheck(-1),
    )  # no quota, no alarm
    return asyncio.run(node.propose(Entry(type="kv", key=b"", value=b""), None))


def test_propose_re_raises_the_rejection_apply_raised_as_is() -> None:
    rejection = TopicNotExist("No topic route info in name server for the topic: T")
    with pytest.raises(TopicNotExist) as info:
        _propose(ApplyFailure(rejection))
    assert info.value is rejection


def test_propose_answers_internal_for_an_apply_failure_that_is_no_rejection() -> None:
    with pytest.raises(NameserverError) as info:
        _propose(ApplyFailure(KeyError("k")))
    assert not isinstance(info.value, Rejected)
    assert to_status(info.value)[0] == S.INTERNAL and "KeyError" in str(info.value)
    assert _propose(None).offset == 7
