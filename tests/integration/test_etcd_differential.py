"""A seeded random history side by side: a real etcd 3.4 and a metaledger node get the same
gRPC calls (puts with and without leases, deletes of keys, ranges and prefixes, txns with
compares on values, versions, create and mod revisions and with ranges at past revisions,
nested txns, lease grants and revokes, compactions), each answer is compared field by field,
then every Range option set below is compared at EVERY revision from the compaction floor to
the end (issue 20, item 1: "Txn/Range results identical to etcd's at every revision").

Revisions differ legitimately (metaledger's are log offsets: a lease grant, a txn that
writes nothing, a leader no-op take one), so each metaledger revision in an answer is
translated into etcd's numbering through the states both went through: after op i, etcd is
at E[i] and metaledger at M[i] (the op's own revision); a metaledger revision m belongs to
the state of the last op with M[i] <= m, whose etcd revision is E[i]. Header ids, terms and
member ids are left out. Compares and revision filters only use revisions of ops that
changed the store (then their order is the same in both numberings).

``METALEDGER_DIFF_OPS`` (default 300) and ``METALEDGER_DIFF_SEED`` (default 20) choose the
history: ``METALEDGER_DIFF_OPS=2000`` is the long run.
"""

from __future__ import annotations

import bisect
import os
import random
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from protos.etcdserverpb import rpc_pb2 as pb
from protos.etcdserverpb import rpc_pb2_grpc
from tests.etcd_harness import EtcdServer
from tests.harness import Cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd 3.4 is not installed"),
]

OPS = int(os.environ.get("METALEDGER_DIFF_OPS", "300"))
SEED = int(os.environ.get("METALEDGER_DIFF_SEED", "20"))
#: at most 12 keys in any range: etcd sorts with Go's sort.Sort, stable only up to 12
KEYS = [b"d/%d" % i for i in range(10)]
VALUES = [b"a", b"b", b"c", b"", b"zz"]
LEASE_BASE = 0x7E57_0000
REVISION_FIELDS = {"revision", "createRevision", "modRevision", "compactRevision"}
DROPPED_FIELDS = {"clusterId", "memberId", "raftTerm"}


class Side:
    """One system and its revision after each op (index 0: before the history)."""

    def __init__(self, address: str, etcd: bool) -> None:
        self.etcd = etcd
        self.channel = grpc.insecure_channel(address)
        self.kv = rpc_pb2_grpc.KVStub(self.channel)
        self.lease = rpc_pb2_grpc.LeaseStub(self.channel)
        self.revs: list[int] = []

    def current(self) -> int:
        return int(self.kv.Range(pb.RangeRequest(key=b"zz"), timeout=10).header.revision)

    def call(self, method: Callable[..., Any], req: Any) -> tuple[Any, int | None]:
        """(the answer or (code, details), the revision the op made: None if it failed)."""
        try:
            resp = method(req, timeout=10)
        except grpc.RpcError as err:
            return (err.code().name, err.details()), None
        return resp, (self.current() if self.etcd else int(resp.header.revision))

    def close(self) -> None:
        self.channel.close()


class Pair:
    def __init__(self, etcd: Side, ml: Side) -> None:
        self.e, self.m = etcd, ml
        self.mismatches: list[str] = []
        self.outcomes: Counter[str] = Counter()  # etcd's answers: method, or error text
        self.floor: int | None = None  # the state compacted at last, once the history ran

    def rev(self, side: Side, state: int) -> int:
        return side.revs[state]

    def to_etcd(self, m: int) -> int | str:
        """A metaledger revision in etcd's numbering (0 stays 0)."""
        if m == 0:
            return 0
        i = bisect.bisect_right(self.m.revs, m) - 1
        return self.e.revs[i] if i >= 0 else f"before:{m}"

    def norm(self, side: Side, resp: Any) -> Any:
        if isinstance(resp, tuple):
            return resp
        doc = json_format.MessageToDict(resp)
        return self._walk(side, doc)

    def _walk(self, side: Side, doc: Any) -> Any:
        if isinstance(doc, dict):
            out = {}
            for k, v in doc.items():
                if k in DROPPED_FIELDS:
                    continue
                if k in REVISION_FIELDS and not side.etcd:
                    v = self.to_etcd(int(v))
                elif k in REVISION_FIELDS:
                    v = int(v)
                out[k] = self._walk(side, v)
            return out
        if isinstance(doc, list):
            return [self._walk(side, v) for v in doc]
        return doc

    def both(self, what: str, build: Callable[[Side], Any], method: str) -> tuple[Any, Any]:
        """Send ``build(side)`` to both, record the revisions, compare the answers."""
        answers, requests = [], []
        for side in (self.e, self.m):
            stub = side.lease if method.startswith("Lease") else side.kv
            requests.append(build(side))
            resp, rev = side.call(getattr(stub, method), requests[-1])
            side.revs.append(rev if rev is not None else side.revs[-1])
            answers.append(resp)
        got = [self.norm(s, r) for s, r in zip((self.e, self.m), answers, strict=True)]
        self.outcomes[got[0][1] if isinstance(got[0], tuple) else method] += 1
        if got[0] != got[1]:
            asked = " | ".join(str(r).replace("\n", " ") for r in requests)
            self.mismatches.append(
                f"{what}:\n  etcd:       {got[0]}\n  metaledger: {got[1]}\n  asked: {asked}"
            )
        return answers[0], answers[1]


# ------------------------------------------------------------------ the history
class History:
    """The seeded ops; revisions in requests are states (op indexes) rendered per side."""

    def __init__(self, pair: Pair, rng: random.Random) -> None:
        self.p, self.rng = pair, rng
        self.leases: list[int] = []  # live lease ids
        self.next_lease = LEASE_BASE
        self.floor = 0  # the state compacted at (0: never)
        self._draw = 0  # drawn once per op
        self._state, self._writers = 0, list[int]()  # before the op

    @property
    def state(self) -> int:
        return len(self.p.e.revs) - 1

    def writers(self) -> list[int]:
        """States made by an op that changed the store (its revision is a mod revision)."""
        e = self.p.e.revs
        return [i for i in range(1, len(e)) if e[i] > e[i - 1]]

    def pick_rev(self, side: Side, kind: str, draw: int) -> int:
        """A revision for a compare or a range, in ``side``'s numbering: the same choice
        for both sides (``draw`` was drawn once, with the op)."""
        rng = random.Random(draw)
        if kind == "create" and rng.random() < 0.2:
            return 0
        writers, state = self._writers, self._state  # as before the op, for both sides
        if kind == "range":
            r = rng.random()
            if r < 0.05:
                return side.revs[-1] + 1000  # a future revision on both
            if r < 0.1 and self.floor > 1:
                below = [s for s in writers if self.p.e.revs[s] < self.p.e.revs[self.floor]]
                if below:
                    return side.revs[below[-1]]  # compacted on both
            return side.revs[rng.randrange(self.floor, state + 1)]
        return side.revs[rng.choice(writers)] if writers else 0

    def run(self, n: int) -> None:
        whole = pb.RangeRequest(key=b"d/", range_end=b"d0")
        for i in range(n):
            self.step()
            got = []  # the whole store after each op (not an op: no revision recorded)
            for side in (self.p.e, self.p.m):
                resp, _ = side.call(side.kv.Range, whole)
                got.append(
                    self.p.norm(side, resp)["kvs"] if "kvs" in self.p.norm(side, resp) else []
                )
            if got[0] != got[1]:
                self.p.mismatches.append(f"store after op {i + 1}:\n  {got[0]}\n  {got[1]}")

    def step(self) -> None:
        rng = self.rng
        self._draw = rng.randrange(1 << 30)
        self._state, self._writers = self.state, self.writers()
        r = rng.random()
        i = self.state + 1
        if r < 0.03:
            lease_id = self.next_lease
            self.next_lease += 1
            self.leases.append(lease_id)
            self.p.both(
                f"op {i} grant", lambda s: pb.LeaseGrantRequest(TTL=3600, ID=lease_id), "LeaseGrant"
            )
        elif r < 0.05 and self.leases:
            lease_id = self.leases.pop(rng.randrange(len(self.leases)))
            self.p.both(
                f"op {i} revoke", lambda s: pb.LeaseRevokeRequest(ID=lease_id), "LeaseRevoke"
            )
        elif r < 0.08 and self.state - self.floor > 3:
            self.compact(i)
        elif r < 0.40:
            req = self.put(rng.choice(KEYS))
            self.p.both(f"op {i} put {req}", lambda s: req, "Put")
        elif r < 0.52:
            gone = self.delete()
            self.p.both(f"op {i} delete {gone}", lambda s: gone, "DeleteRange")
        else:
            spec = self.txn_spec(depth=0, keys=list(KEYS))
            self.p.both(f"op {i} txn", lambda s: self.render(s, spec), "Txn")

    def compact(self, i: int) -> None:
        e = self.p.e.revs
        choices = [s for s in self.writers() if e[s] > e[self.floor] and s < self.state]
        if not choices:
            return
        state = choices[self._draw % len(choices)]
        self.floor = state
        self.p.both(
            f"op {i} compact at state {state}",
            lambda s: pb.CompactionRequest(revision=s.revs[state]),
            "Compact",
        )

    def put(self, key: bytes) -> pb.PutRequest:
        rng = self.rng
        lease = rng.choice(self.leases) if self.leases and rng.random() < 0.25 else 0
        req = pb.PutRequest(
            key=key, value=rng.choice(VALUES), lease=lease, prev_kv=rng.random() < 0.3
        )
        r = rng.random()
        if r < 0.04:  # etcd: "key not found" when the key is absent (the whole txn fails)
            req.ignore_value, req.value = True, b""
        elif r < 0.08:
            req.ignore_lease, req.lease = True, 0
        return req

    def delete(self) -> pb.DeleteRangeRequest:
        rng = self.rng
        a, b = sorted(rng.sample(KEYS, 2))
        r = rng.random()
        end = b"" if r < 0.6 else (b if r < 0.9 else b"d0")
        return pb.DeleteRangeRequest(key=a, range_end=end, prev_kv=rng.random() < 0.4)

    # txns are specs first (revisions as ("rev", kind) draws), rendered per side
    def txn_spec(self, depth: int, keys: list[bytes]) -> dict[str, Any]:
        rng = self.rng
        compares = []
        for _ in range(rng.randrange(0, 3)):
            target = rng.choice(["value", "version", "create", "mod", "lease"])
            result = rng.choice([pb.Compare.EQUAL, pb.Compare.GREATER, pb.Compare.LESS,
                                 pb.Compare.NOT_EQUAL])  # fmt: skip
            key = rng.choice(KEYS)
            arg: Any
            if target == "value":
                arg = rng.choice(VALUES)
            elif target == "version":
                arg = rng.randrange(0, 4)
            elif target == "lease":
                arg = rng.choice([0, *self.leases])
            else:
                arg = ("rev", target, rng.randrange(1 << 30))
            range_end = b"d0" if rng.random() < 0.1 else b""
            compares.append((target, result, key, range_end, arg))
        branches = []
        for _ in range(2):
            ops: list[Any] = []
            for _ in range(rng.randrange(0, 4)):
                r = rng.random()
                if r < 0.02:  # a key written twice: refused whole by both
                    ops.append(("put", self.put(KEYS[0])))
                    ops.append(("del", pb.DeleteRangeRequest(key=b"d/", range_end=b"d0")))
                elif r < 0.35 and keys:
                    key = keys.pop(rng.randrange(len(keys)))
                    ops.append(("put", self.put(key)))
                elif r < 0.45 and keys:
                    key = keys.pop(rng.randrange(len(keys)))
                    ops.append(("del", pb.DeleteRangeRequest(key=key, prev_kv=rng.random() < 0.5)))
                elif r < 0.9:
                    ops.append(("range", self.range_spec()))
                elif depth == 0:
                    ops.append(("txn", self.txn_spec(depth + 1, keys)))
            branches.append(ops)
        return {"compare": compares, "success": branches[0], "failure": branches[1]}

    def range_spec(self) -> tuple[pb.RangeRequest, Any]:
        rng = self.rng
        base = rng.choice(range_options())
        req = pb.RangeRequest()
        req.CopyFrom(base)
        at = ("rev", "range", rng.randrange(1 << 30)) if rng.random() < 0.4 else None
        return req, at

    def render_rev(self, side: Side, arg: tuple[str, str, int]) -> int:
        _, kind, draw = arg
        return self.pick_rev(side, kind, draw)

    def render(self, side: Side, spec: dict[str, Any]) -> pb.TxnRequest:
        txn = pb.TxnRequest()
        for target, result, key, range_end, arg in spec["compare"]:
            c = txn.compare.add(key=key, range_end=range_end, result=result)
            if target == "value":
                c.target, c.value = pb.Compare.VALUE, arg
            elif target == "version":
                c.target, c.version = pb.Compare.VERSION, arg
            elif target == "lease":
                c.target, c.lease = pb.Compare.LEASE, arg
            elif target == "create":
                c.target, c.create_revision = pb.Compare.CREATE, self.render_rev(side, arg)
            else:
                c.target, c.mod_revision = pb.Compare.MOD, self.render_rev(side, arg)
        for name in ("success", "failure"):
            branch = getattr(txn, name)
            for kind, op in spec[name]:
                if kind == "put":
                    branch.add(request_put=op)
                elif kind == "del":
                    branch.add(request_delete_range=op)
                elif kind == "range":
                    req, at = op
                    r = pb.RangeRequest()
                    r.CopyFrom(req)
                    r.ClearField("min_mod_revision")  # filters are for the sweep below
                    r.ClearField("max_create_revision")
                    if at is not None:
                        r.revision = self.render_rev(side, at)
                    branch.add(request_range=r)
                else:
                    branch.add(request_txn=self.render(side, op))
        return txn


def range_options() -> list[pb.RangeRequest]:
    """The option sets every revision is read with."""
    d, d0 = b"d/", b"d0"
    return [
        pb.RangeRequest(key=d, range_end=d0),
        pb.RangeRequest(key=d, range_end=d0, limit=3),
        pb.RangeRequest(key=d, range_end=d0, sort_order=pb.RangeRequest.DESCEND, sort_target=pb.RangeRequest.VALUE),
        pb.RangeRequest(key=d, range_end=d0, sort_order=pb.RangeRequest.ASCEND, sort_target=pb.RangeRequest.CREATE, limit=2),
        pb.RangeRequest(key=d, range_end=d0, sort_order=pb.RangeRequest.DESCEND, sort_target=pb.RangeRequest.MOD, keys_only=True),
        pb.RangeRequest(key=d, range_end=d0, sort_target=pb.RangeRequest.VERSION, limit=4),
        pb.RangeRequest(key=d, range_end=d0, count_only=True),
        pb.RangeRequest(key=d, range_end=d0, count_only=True, limit=2, keys_only=True),
        pb.RangeRequest(key=d, range_end=d0, sort_target=pb.RangeRequest.VALUE, limit=1),
        pb.RangeRequest(key=b"d/5", range_end=b"d/5\0"),
        pb.RangeRequest(key=b"d/9", range_end=b"d/1"),  # an empty range (end before key)
        pb.RangeRequest(key=b"d/3", range_end=b"\0", serializable=True),
        pb.RangeRequest(key=b"d/1"),
        pb.RangeRequest(key=b"d/2", range_end=b"d/7", sort_order=pb.RangeRequest.DESCEND, limit=2),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("differential")
    with EtcdServer(root / "etcd") as etcd, Cluster(root / "ml", n=1) as ml:
        etcd.wait_ready()
        ml.wait_ready(60)
        p = Pair(Side(etcd.address, etcd=True), Side(ml.endpoints[0], etcd=False))
        try:
            for side in (p.e, p.m):  # state 0: one write, so its revision is not 0 ("now")
                side.kv.Put(pb.PutRequest(key=b"base", value=b"0"), timeout=10)
                side.revs.append(side.current())
            yield p
        finally:
            p.e.close()
            p.m.close()


def test_a_random_history_answers_as_etcds_op_by_op(pair: Pair) -> None:
    history = History(pair, random.Random(SEED))
    history.run(OPS)
    pair.floor = history.floor
    assert len(history.writers()) > OPS // 4  # the history did change the store
    done = pair.outcomes  # the history went through every kind of answer
    assert done["Txn"] and done["Compact"] and done["LeaseGrant"], done
    assert sum(n for what, n in done.items() if what.startswith("etcdserver:")), done
    assert not pair.mismatches, f"{len(pair.mismatches)} differences:\n" + "\n".join(
        pair.mismatches[:8]
    )


def test_every_range_at_every_revision_equals_etcds(pair: Pair) -> None:
    floor = pair.floor
    assert floor is not None, "runs after the history test"
    e, m = pair.e, pair.m
    writers = [i for i in range(1, len(e.revs)) if e.revs[i] > e.revs[i - 1]]
    lo, hi = writers[len(writers) // 3], writers[2 * len(writers) // 3]
    by_mod = pb.RangeRequest(key=b"d/", range_end=b"d0")
    by_create = pb.RangeRequest(
        key=b"d/", range_end=b"d0", sort_target=pb.RangeRequest.MOD, limit=2
    )
    counted = pb.RangeRequest(key=b"d/", range_end=b"d0", count_only=True)
    options = [*range_options(), by_mod, by_create, counted]
    diffs: list[str] = []
    checked = 0
    for rev in range(m.revs[floor], m.revs[-1] + 1):
        state = bisect.bisect_right(m.revs, rev) - 1
        for n, base in enumerate(options):
            answers = []
            for side, at in ((e, e.revs[state]), (m, rev)):
                req = pb.RangeRequest()
                req.CopyFrom(base)
                req.revision = at
                if base is by_mod or base is counted:  # etcd counts before the filters
                    req.min_mod_revision, req.max_create_revision = side.revs[lo], side.revs[hi]
                elif base is by_create:
                    req.min_create_revision, req.max_mod_revision = side.revs[lo], side.revs[hi]
                resp, _ = side.call(side.kv.Range, req)
                answers.append(pair.norm(side, resp))
                if not isinstance(resp, tuple):
                    answers[-1].pop("header", None)
            checked += 1
            if answers[0] != answers[1]:
                diffs.append(
                    f"rev {rev} (state {state}) options {n}:\n  {answers[0]}\n  {answers[1]}"
                )
    assert checked > 100
    assert not diffs, f"{len(diffs)} differences:\n" + "\n".join(diffs[:8])
    # below the floor both answer compacted
    below = [s for s in writers if e.revs[s] < e.revs[floor]]
    for state in below[-2:]:
        got = [side.call(side.kv.Range, pb.RangeRequest(key=b"d/", revision=side.revs[state]))[0]
               for side in (e, m)]  # fmt: skip
        assert got[0] == got[1] and got[0][0] == "OUT_OF_RANGE", got
