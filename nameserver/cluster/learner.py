"""What a learner (etcd 3.4's non-voting member) serves its clients, and etcd's errors
about learners.

etcd 3.4's gRPC interceptors (``etcdserver/api/v3rpc/interceptor.go``,
``isRPCSupportedForLearner``) let a learner answer ``Maintenance.Status`` and a
serializable ``KV.Range`` only; every other call, and every stream (Watch, lease
keep-alive, snapshot), is refused with UNAVAILABLE "etcdserver: rpc not supported for
learner", which etcd's clients take as "try another endpoint". Checked against the etcd
3.4 binary (tests/integration/test_learner_etcd_side_by_side.py). metaledger's own
``Admin`` service reports status and members on a learner too (read-only, node-local).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nameserver.errors import FailedPrecondition, Unavailable

#: etcd 3.4's messages (``etcdserver/api/v3rpc/rpctypes/error.go``)
NOT_SUPPORTED = "etcdserver: rpc not supported for learner"
NOT_A_LEARNER = "etcdserver: can only promote a learner member"
NOT_READY = "etcdserver: can only promote a learner member which is in sync with leader"
TOO_MANY = "etcdserver: too many learner members in cluster"
#: etcd 3.4 has at most one learner at a time (``maxLearners``)
MAX_LEARNERS = 1

_RANGE = "/etcdserverpb.KV/Range"
_SERVED = frozenset(
    (
        "/etcdserverpb.Maintenance/Status",
        "/metaledger.v1.Admin/Status",
        "/metaledger.v1.Admin/Members",
    )
)

Hook = Callable[[str, Any, Any], None]


class NotSupportedForLearner(Unavailable):
    """A call a learner does not serve (UNAVAILABLE: the client tries another member)."""

    def __init__(self) -> None:
        super().__init__(NOT_SUPPORTED)


class NotALearner(FailedPrecondition):
    def __init__(self) -> None:
        super().__init__(NOT_A_LEARNER)


class LearnerNotInSync(FailedPrecondition):
    def __init__(self) -> None:
        super().__init__(NOT_READY)


class TooManyLearners(FailedPrecondition):
    def __init__(self) -> None:
        super().__init__(TOO_MANY)


def learner_serves(path: str, request: Any) -> bool:
    """Whether a learner answers ``path`` with ``request`` (etcd 3.4's rule)."""
    if path == _RANGE:
        return bool(getattr(request, "serializable", False))
    return path in _SERVED


def learner_gate(is_learner: Callable[[], bool], then: Hook | None) -> Hook:
    """The guard's hook (:mod:`nameserver.grpc.guard`): refuse what a learner does not
    serve while this node is one, then ``then`` (auth's check). One call of ``is_learner``
    per request otherwise."""

    def check(path: str, request: Any, context: Any) -> None:
        if is_learner() and not learner_serves(path, request):
            raise NotSupportedForLearner()
        if then is not None:
            then(path, request, context)

    return check
