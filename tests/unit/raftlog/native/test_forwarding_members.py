"""A leader takes forwarded proposals from members only (raftlog/native/forwarding.py).

The peer handshake proves that a dialer knows the cluster password, not that the address
it claims in its hello is a member's. The fuzz run (``tests/integration/test_fuzz_ports.py``)
dialled as ``127.0.0.1:1`` and sent PROPOSE messages: a garbage item was appended to every
node's log, and ``remove <member>`` removed a member. A PROPOSE from an address that is not
a voter is now refused with a PROPOSE_RESP naming why; nothing is appended.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from raftlog.entry import Entry, decode_item, encode_item, encode_request, item_count, stamp_item
from raftlog.native.core import Role
from raftlog.native.forwarding import Forwarding
from raftlog.native.messages import KIND_CONFIG, KIND_NORMAL, Message, MsgType

VOTERS = ("127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003")


class _Leader(Forwarding):
    """Forwarding's PROPOSE handling with a fake core, a recorded outbox and log."""

    def __init__(self, stamp: Callable[[bytes], bytes] | None = None) -> None:
        core: Any = SimpleNamespace(term=4, voters=VOTERS, learners=())
        config: Any = SimpleNamespace(stamp_forwarded=stamp)  # all on_propose reads of it
        self.sent: list[tuple[str, Message]] = []
        self.appended: list[tuple[bytes, int]] = []
        super().__init__(
            config,
            core,
            None,
            lambda to, m: self.sent.append((to, m)),
            lambda to, m, rid: None,
            lambda: None,
            lambda address: address,
        )

    def _propose_here(self, data: bytes, kind: int, callback: object) -> tuple[int, int]:
        self.appended.append((data, kind))
        return 9, 4


def propose(src: str, data: bytes, kind: int = KIND_NORMAL) -> Message:
    return Message(MsgType.PROPOSE, 0, offset=77, kind=kind, data=data, src=src)


def test_a_member_s_forwarded_proposal_is_appended() -> None:
    leader = _Leader()
    leader.on_propose(propose(VOTERS[1], b"item"))
    assert leader.appended == [(b"item", KIND_NORMAL)]
    [(to, resp)] = leader.sent
    assert to == VOTERS[1] and resp.type == MsgType.PROPOSE_RESP
    assert not resp.reject and (resp.offset, resp.index, resp.log_term) == (77, 9, 4)


def test_a_proposal_from_an_address_that_is_no_member_s_is_refused() -> None:
    leader = _Leader()
    remove = b"remove " + VOTERS[0].encode()
    for kind, data in ((KIND_NORMAL, b"\xff\xff\xff\x7fgarbage"), (KIND_CONFIG, remove)):
        leader.on_propose(propose("127.0.0.1:1", data, kind))
    assert leader.appended == []
    assert [to for to, _ in leader.sent] == ["127.0.0.1:1"] * 2
    for _, resp in leader.sent:
        assert resp.type == MsgType.PROPOSE_RESP and resp.reject and resp.offset == 77
        assert b"127.0.0.1:1 is not a member of this cluster" in resp.data


def test_a_forwarded_item_is_appended_with_the_leader_s_clock() -> None:
    """Time enters the log from the leader only: every entry of a forwarded item gets the
    leader's stamp, whatever the follower's clock said; membership changes are not items."""
    leader = _Leader(lambda data: stamp_item(data, 1_000_000))
    entries = [Entry("lease", value=b"a"), Entry("kv", key=b"k", value=b"v")]
    item = encode_item([encode_request(entries, "n1", 7, 42), encode_request(entries, "n1", 8, 43)])
    leader.on_propose(propose(VOTERS[1], item))
    remove = b"remove " + VOTERS[2].encode()
    leader.on_propose(propose(VOTERS[1], remove, KIND_CONFIG))
    [(appended, kind), config] = leader.appended
    assert config == (remove, KIND_CONFIG)
    assert kind == KIND_NORMAL and appended.startswith(item) and item_count(appended) == 2
    requests = decode_item(appended, 5, 4)
    assert [[e.timestamp_ms for e in r] for r in requests] == [[1_000_000] * 2] * 2
    assert [[(e.offset, e.client_id, e.seq) for e in r] for r in requests] == [
        [(5, "n1", 7)] * 2,
        [(6, "n1", 8)] * 2,
    ]
    # an item nobody stamped keeps its proposer's times (old logs replay as they were)
    assert [r[0].timestamp_ms for r in decode_item(item, 5, 4)] == [42, 43]


def test_a_proposal_that_waited_for_a_leader_gets_this_leader_s_clock() -> None:
    """Queued while no leader was known, stamped then on this node's clock (an hour from
    the log's, maybe): when this node becomes the leader, it stamps it as a forward."""
    leader = _Leader(lambda data: stamp_item(data, 1_000_000))
    core: Any = leader._core
    core.role, core.leader = Role.FOLLOWER, ""
    config: Any = leader._config
    config.wait_leader_ms = 5000
    item = encode_item([encode_request([Entry("lease", value=b"a")], "n1", 7, 42)])
    leader.propose(item, KIND_NORMAL, lambda index, err: None)
    assert leader.appended == []  # waits for a leader
    core.role, core.leader = Role.LEADER, VOTERS[0]
    leader.leader_changed()
    [(appended, kind)] = leader.appended
    assert kind == KIND_NORMAL
    assert [e.timestamp_ms for req in decode_item(appended, 1, 4) for e in req] == [1_000_000]
