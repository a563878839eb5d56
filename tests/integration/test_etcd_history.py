"""History and compaction side by side with a real etcd 3.4 (issue 20, item 1).

The same scripted history goes to an etcd member and to a metaledger node. Revisions
differ (metaledger's are log offsets: member records and leader no-ops take some), so each
side's revision after each step is recorded and compared by step: a revision in an answer is
replaced by the step it belongs to. Then every Range (prefixes, from-key, limit, sort,
keys/count only, revision filters) and a read-only Txn at every step's revision must give
the same answer on both; ``etcdctl get --rev``, ``compaction`` (twice), ``watch --rev``
from a compacted revision and ``endpoint hashkv --rev`` give the same exit code and output
shape. Also: all members of a 3-node cluster hash alike at several revisions, the history
outlives a restart, and revision-mode auto compaction compacts within a deadline.
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from protos.etcdserverpb import rpc_pb2 as pb
from protos.etcdserverpb import rpc_pb2_grpc
from tests.etcd_harness import EtcdServer, etcdctl
from tests.harness import Cluster, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("etcd") is None or shutil.which("etcdctl") is None,
        reason="etcd 3.4 and etcdctl are not installed",
    ),
]

COMPACTED = "etcdserver: mvcc: required revision has been compacted"
FUTURE = "etcdserver: mvcc: required revision is a future revision"

#: the scripted history: each step one write (etcdctl's words)
SCRIPT: list[tuple[str, ...]] = [
    ("put", "h/a", "one"),
    ("put", "h/b", "one"),
    ("put", "h/a/x", "one"),
    ("put", "h/a", "two"),
    ("del", "h/b"),
    ("put", "h/c", "three"),
    ("put", "h/b", "again"),
    ("del", "h/a", "--prefix"),
    ("put", "h/d", "four"),
    ("put", "h/a", "back"),
]

RANGES = [
    pb.RangeRequest(key=b"h/a"),
    pb.RangeRequest(key=b"h/", range_end=b"h0"),
    pb.RangeRequest(key=b"h/b", range_end=b"\0"),
    pb.RangeRequest(key=b"h/", range_end=b"h0", limit=2),
    pb.RangeRequest(key=b"h/", range_end=b"h0", sort_order=2, sort_target=3),
    pb.RangeRequest(key=b"h/", range_end=b"h0", sort_order=1, sort_target=4, limit=1),
    pb.RangeRequest(key=b"h/", range_end=b"h0", keys_only=True),
    pb.RangeRequest(key=b"h/", range_end=b"h0", count_only=True),
    pb.RangeRequest(key=b"h/", range_end=b"h0", sort_target=1),
]


class Side:
    """One system (etcd or metaledger) and its revision after each step."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.address = endpoint.split("://")[-1]
        self.channel = grpc.insecure_channel(self.address)
        self.kv = rpc_pb2_grpc.KVStub(self.channel)
        self.maintenance = rpc_pb2_grpc.MaintenanceStub(self.channel)
        self.revs: list[int] = []

    def ctl(self, *args: str, stdin: str | None = None) -> Any:
        return etcdctl(self.endpoint, *args, stdin=stdin)

    def run_script(self) -> None:
        for step in SCRIPT:
            r = self.ctl(*step, "-w", "json")
            assert r.returncode == 0, r.stderr
            self.revs.append(int(json.loads(r.stdout)["header"]["revision"]))

    def current(self) -> int:
        return int(self.kv.Range(pb.RangeRequest(key=b"h/"), timeout=10).header.revision)

    def step_of(self, rev: int) -> int | str:
        """The step whose write made ``rev`` (0: before the script)."""
        if rev == 0:
            return 0
        for i, r in enumerate(self.revs, 1):
            if r == rev:
                return i
        if rev < self.revs[0]:
            return "before"
        return f"not a step: {rev}"

    def range(self, req: pb.RangeRequest) -> Any:
        try:
            resp = self.kv.Range(req, timeout=10)
        except grpc.RpcError as err:
            return (err.code(), err.details())
        kvs = [
            (kv.key, kv.value, kv.version, self.step_of(kv.create_revision),
             self.step_of(kv.mod_revision))
            for kv in resp.kvs
        ]  # fmt: skip
        return kvs, resp.count, resp.more, resp.header.revision >= self.revs[-1]

    def close(self) -> None:
        self.channel.close()


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Side, Side]]:
    root = tmp_path_factory.mktemp("history")
    with EtcdServer(root / "etcd") as etcd, Cluster(root / "ml", n=1) as ml:
        etcd.wait_ready()
        ml.wait_ready(60)
        e, m = Side(etcd.endpoint), Side(f"http://{ml.endpoints[0]}")
        try:
            e.run_script()
            m.run_script()
            yield e, m
        finally:
            e.close()
            m.close()


def normalize(side: Side, text: str) -> str:
    """etcdctl output with each revision number replaced by its step."""
    steps = {str(rev): i for i, rev in enumerate(side.revs, 1)}
    return re.sub(r"\b\d+\b", lambda m: f"<step {steps[m[0]]}>" if m[0] in steps else m[0], text)


def test_every_range_at_every_revision_equals_etcds(sides: tuple[Side, Side]) -> None:
    e, m = sides
    for step in range(1, len(SCRIPT) + 1):
        for base in RANGES:
            got = []
            for side in (e, m):
                req = pb.RangeRequest()
                req.CopyFrom(base)
                req.revision = side.revs[step - 1]
                got.append(side.range(req))
            assert got[0] == got[1], (step, base)
        # a revision filter: keys modified at or after step 3, created at or before step 6
        got = []
        for side in (e, m):
            req = pb.RangeRequest(
                key=b"h/",
                range_end=b"h0",
                revision=side.revs[step - 1],
                min_mod_revision=side.revs[2],
                max_create_revision=side.revs[5],
            )
            got.append(side.range(req))
        assert got[0] == got[1], step


def test_a_read_only_txn_at_past_revisions_equals_etcds(sides: tuple[Side, Side]) -> None:
    e, m = sides
    for step in (2, 5, 8):
        answers = []
        for side in (e, m):
            txn = pb.TxnRequest(
                success=[
                    pb.RequestOp(
                        request_range=pb.RangeRequest(
                            key=b"h/", range_end=b"h0", revision=side.revs[step - 1]
                        )
                    ),
                    pb.RequestOp(request_range=pb.RangeRequest(key=b"h/a")),
                ]
            )
            resp = side.kv.Txn(txn, timeout=10)
            answers.append(
                [
                    [
                        (kv.key, kv.value, side.step_of(kv.mod_revision))
                        for kv in r.response_range.kvs
                    ]
                    for r in resp.responses
                ]
            )
        assert answers[0] == answers[1], step


@pytest.mark.parametrize(
    "options",
    [
        ("--prefix",),
        ("--prefix", "--limit=2"),
        ("--prefix", "--sort-by=MODIFY", "--order=DESCEND"),
        ("--prefix", "--keys-only"),
        ("--prefix", "--limit=1", "-w", "json"),  # etcdctl 3.4 has no --count-only
        ("--from-key",),
        ("-w", "fields"),
    ],
)
def test_etcdctl_get_rev_matches_etcd(sides: tuple[Side, Side], options: tuple[str, ...]) -> None:
    e, m = sides
    for step in (1, 4, 5, 8, 10):
        outs = []
        for side in (e, m):
            r = side.ctl("get", "h/a", f"--rev={side.revs[step - 1]}", *options)
            text = r.stdout
            if "json" in options:
                doc = json.loads(r.stdout)
                kvs = [(kv["key"], kv["value"], kv["version"]) for kv in doc.get("kvs", [])]
                text = json.dumps([doc.get("count"), doc.get("more", False), kvs])
            elif "fields" in options:  # ids and the term legitimately differ
                text = "\n".join(
                    line
                    for line in text.splitlines()
                    if not re.match(r'"(ClusterID|MemberID|RaftTerm|\w*Revision)"', line)
                )
            outs.append((r.returncode, text))
        assert outs[0] == outs[1], (step, options)


def test_get_at_a_future_revision_fails_as_etcd(sides: tuple[Side, Side]) -> None:
    outs = [side.ctl("get", "h/a", "--rev=99999999") for side in sides]
    assert [o.returncode for o in outs] == [1, 1]
    for o in outs:
        assert f"Error: {FUTURE}" in o.stderr, o.stderr


def txn_script(side: Side, compare: str, success: list[str], failure: list[str]) -> str:
    """``etcdctl txn``'s stdin; ``{N}`` in an op is the side's revision of step N."""

    def fill(op: str) -> str:
        return re.sub(r"\{(\d+)\}", lambda m: str(side.revs[int(m[1]) - 1]), op)

    compares = [compare, ""] if compare else [""]  # no compare: one blank line ends them
    return "\n".join([*compares, *map(fill, success), "", *map(fill, failure), "", ""])


#: (compare, success ops, failure ops): ranges at past revisions in txns that also write
WRITE_TXNS = [
    ('value("h/a") = "back"', ["get h/a --rev={4}", "put tx/1 one", "get h/ --prefix --rev={7}"],
     ["put tx/2 two"]),
    ('value("h/a") = "nope"', ["put tx/3 three"],
     ["get h/a --rev={1}", "put tx/4 four", "get h/ --prefix --keys-only --rev={5}",
      "get tx/4"]),
    ('value("h/a") = "back"', ["put tx/5 five"], ["get h/a --rev=99999999"]),  # not taken
    ('value("h/a") = "back"', ["put tx/6 six", "get h/a --rev=99999999"], []),  # future
    ('value("h/a") = "back"', ["get h/a --rev={10}", "del tx/1", "get tx/ --prefix"], []),
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(WRITE_TXNS)))
def test_etcdctl_txn_with_get_rev_in_a_txn_that_writes_matches_etcd(
    sides: tuple[Side, Side], case: int
) -> None:
    """etcd checks the taken branch's range revisions before any write (apply.go
    checkRequestRange): a future one fails the whole txn, one in the branch not taken
    is never looked at; the others read the store at their revision."""
    outs = []
    for side in sides:
        compare, success, failure = WRITE_TXNS[case]
        r = side.ctl("txn", stdin=txn_script(side, compare, success, failure))
        after = side.ctl("get", "tx/", "--prefix")
        outs.append((r.returncode, r.stdout, last_line(r.stderr), after.stdout))
    assert outs[0] == outs[1], case
    if case == 0:  # h/a was "two" at step 4
        assert outs[0][0] == 0 and outs[0][1].startswith("SUCCESS\n\nh/a\ntwo\n"), outs[0]
    if case == 3:
        assert outs[0][0] == 1 and outs[0][2] == f"Error: {FUTURE}"


def test_compaction_twice_watch_and_hashkv_below_it_fail_as_etcd(
    sides: tuple[Side, Side],
) -> None:
    """It compacts both sides at step 5 (only the next test comes after it)."""
    got: dict[str, list[Any]] = {}
    for side in sides:
        rev = side.revs[4]
        first = side.ctl("compaction", str(rev))
        again = side.ctl("compaction", str(rev))
        lower = side.ctl("compaction", str(side.revs[1]))
        future = side.ctl("compaction", "99999999")
        below = side.ctl("get", "h/a", f"--rev={side.revs[3]}")
        at = side.ctl("get", "h/", "--prefix", f"--rev={rev}")
        watch = etcdctl(side.endpoint, "watch", "h/a", f"--rev={side.revs[0]}", timeout_s=20)
        hash_at = side.ctl("endpoint", "hashkv", f"--rev={side.revs[6]}")
        hash_below = side.ctl("endpoint", "hashkv", f"--rev={side.revs[2]}")
        got[side.endpoint] = [
            (first.returncode, normalize(side, first.stdout)),
            *[(r.returncode, last_line(r.stderr)) for r in (again, lower, future, below)],
            (at.returncode, normalize(side, at.stdout)),
            (watch.returncode, watch.stdout, plain_lines(watch.stderr)),
            (
                hash_at.returncode,
                re.sub(r"^\S+, \d+$", "<endpoint>, <hash>", hash_at.stdout.strip()),
            ),
            (hash_below.returncode, last_line(hash_below.stderr)),
        ]
    etcd_out, ml_out = got.values()
    assert etcd_out == ml_out
    assert etcd_out[0] == (0, "compacted revision <step 5>\n")
    assert etcd_out[1] == (1, f"Error: {COMPACTED}")
    assert etcd_out[6][0] != 0 and f"watch was canceled ({COMPACTED})" in etcd_out[6][2]


def test_etcdctl_txn_reading_below_the_compaction_fails_whole_as_etcd(
    sides: tuple[Side, Side],
) -> None:
    """After the compaction at step 5 (the test above): a write txn whose taken branch reads
    below it fails with nothing written; at the compaction revision itself it reads."""
    outs = []
    for side in sides:
        below = side.ctl(
            "txn", stdin=txn_script(side, "", ["put tx/c below", "get h/a --rev={3}"], [])
        )
        at = side.ctl(
            "txn", stdin=txn_script(side, "", ["put tx/c at", "get h/ --prefix --rev={5}"], [])
        )
        after = side.ctl("get", "tx/c")
        outs.append(
            (below.returncode, last_line(below.stderr), at.returncode, at.stdout, after.stdout)
        )
    assert outs[0] == outs[1]
    assert outs[0][:3] == (1, f"Error: {COMPACTED}", 0)


def plain_lines(text: str) -> list[str]:
    """etcdctl's own lines of stderr (not the client library's JSON log lines)."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("{")]


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


# ------------------------------------------------------------------ metaledger only
def test_members_of_a_cluster_hash_alike_at_several_revisions(tmp_path: Path) -> None:
    with Cluster(tmp_path / "cluster", n=3) as c:
        c.wait_ready(60)
        c.wait_announced(30)
        revs = []
        for i in range(12):
            revs.append(int(c.put(i % 3, b"hk/%d" % (i % 4), b"v%d" % i).header.revision))
        c.stub(0).DeleteRange(pb.DeleteRangeRequest(key=b"hk/1"), timeout=10)
        c.wait_converged()
        for rev in (revs[0], revs[5], revs[11]):
            hashes = {
                i: c.maintenance(i).HashKV(pb.HashKVRequest(revision=rev), timeout=30).hash
                for i in range(3)
            }
            assert len(set(hashes.values())) == 1, (rev, hashes)
        assert len({c.maintenance(0).HashKV(pb.HashKVRequest(revision=r)).hash for r in revs}) > 1
        r = etcdctl(
            ",".join(f"http://{a}" for a in c.endpoints), "endpoint", "hashkv", f"--rev={revs[5]}"
        )
        assert (
            r.returncode == 0
            and len({line.split(", ")[1] for line in r.stdout.split("\n") if line}) == 1
        )


def test_a_write_txn_reading_a_past_revision_answers_alike_through_every_member(
    tmp_path: Path,
) -> None:
    """Whichever member serves it (leader or follower), a txn that writes and reads at a
    past revision answers the same, fails whole alike below the compaction revision, and
    leaves every member with the same store."""
    with Cluster(tmp_path / "txn", n=3) as c:
        c.wait_ready(60)
        c.wait_announced(30)
        revs = [int(c.put(0, b"tr/k", b"v%d" % i).header.revision) for i in range(6)]
        for node in range(3):
            txn = pb.TxnRequest(
                success=[
                    pb.RequestOp(request_put=pb.PutRequest(key=b"tr/n%d" % node, value=b"x")),
                    pb.RequestOp(request_range=pb.RangeRequest(key=b"tr/k", revision=revs[2])),
                ]
            )
            resp = c.stub(node).Txn(txn, timeout=10)
            assert [kv.value for kv in resp.responses[1].response_range.kvs] == [b"v2"], node
        c.stub(0).Compact(pb.CompactionRequest(revision=revs[4]), timeout=10)
        for node in range(3):
            txn = pb.TxnRequest(
                success=[
                    pb.RequestOp(request_put=pb.PutRequest(key=b"tr/late", value=b"x")),
                    pb.RequestOp(request_range=pb.RangeRequest(key=b"tr/k", revision=revs[2])),
                ]
            )
            with pytest.raises(grpc.RpcError) as err:
                c.stub(node).Txn(txn, timeout=10)
            assert err.value.details() == COMPACTED, node
        c.wait_converged()
        # the store revision every member now has (the apply offset runs ahead of it)
        last = int(c.stub(0).Range(pb.RangeRequest(key=b"\x00"), timeout=10).header.revision)
        hashes = {
            i: c.maintenance(i).HashKV(pb.HashKVRequest(revision=last), timeout=30).hash
            for i in range(3)
        }
        assert len(set(hashes.values())) == 1, hashes
        assert not c.stub(1).Range(pb.RangeRequest(key=b"tr/late"), timeout=10).kvs


@pytest.mark.parametrize("segment_bytes", [64 << 20, 1024])
def test_history_outlives_a_restart(tmp_path: Path, segment_bytes: int) -> None:
    """With one big segment the whole history is replayed from offset 1; with small ones
    (deleted below the oldest kept snapshot) from the oldest snapshot the segments follow:
    every revision from there up reads as before the restart, older ones are compacted."""
    flags = ["--snapshot-every-items", "10", "--segment-max-bytes", str(segment_bytes)]
    with Cluster(tmp_path / "one", n=1, extra_args=flags) as c:
        c.wait_ready(60)
        revs = [int(c.put(0, b"r/k", b"v%d" % i).header.revision) for i in range(40)]
        c.restart(0)
        c.wait_ready(60)
        readable = []
        for i, rev in enumerate(revs):
            try:
                resp = c.stub(0).Range(pb.RangeRequest(key=b"r/k", revision=rev), timeout=10)
            except grpc.RpcError as err:
                assert err.details() == COMPACTED and not readable, (i, err.details())
                continue
            assert resp.kvs[0].value == b"v%d" % i
            readable.append(i)
        assert readable[-1] == 39
        if segment_bytes > 4096:
            assert readable[0] == 0
        else:  # at worst from a snapshot before the restored one (the last is at >= 30)
            assert readable[0] < 30, readable


def test_revision_mode_auto_compaction_compacts_within_a_deadline(tmp_path: Path) -> None:
    flags = ["--auto-compaction-mode", "revision", "--auto-compaction-retention", "5"]
    with Cluster(tmp_path / "auto", n=1, extra_args=flags) as c:
        c.wait_ready(60)
        first = int(c.put(0, b"a/k", b"0").header.revision)
        for i in range(1, 12):
            c.put(0, b"a/k", b"%d" % i)

        def compacted() -> bool:
            try:
                c.stub(0).Range(pb.RangeRequest(key=b"a/k", revision=first), timeout=10)
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.OUT_OF_RANGE, err
                return err.details() == COMPACTED
            return False

        wait_until(compacted, 30, "a read below the retention compacted")
        now = int(c.put(0, b"a/k", b"last").header.revision)
        # at least the last 5 revisions stay readable
        assert c.stub(0).Range(pb.RangeRequest(key=b"a/k", revision=now - 5), timeout=10).kvs
        metrics = (
            urllib.request.urlopen(
                f"http://127.0.0.1:{c.nodes[0].metrics_port}/metrics", timeout=10
            )
            .read()
            .decode()
        )
        compact = re.search(r"^metaledger_kv_compact_revision\{[^}]*\} (\S+)$", metrics, re.M)
        floor = re.search(r"^metaledger_kv_history_floor\{[^}]*\} (\S+)$", metrics, re.M)
        assert compact and floor and float(floor[1]) >= float(compact[1]) > first


def test_periodic_mode_auto_compaction_keeps_the_retention(tmp_path: Path) -> None:
    """etcd's periodic mode: nothing is compacted before one retention has passed, then the
    compaction revision follows the revision of one retention ago."""
    flags = ["--auto-compaction-mode", "periodic", "--auto-compaction-retention", "2s"]
    with Cluster(tmp_path / "periodic", n=1, extra_args=flags) as c:
        c.wait_ready(60)
        first = int(c.put(0, b"p/k", b"0").header.revision)
        req = pb.RangeRequest(key=b"p/k", revision=first)
        assert c.stub(0).Range(req, timeout=10).kvs  # readable at once
        for i in range(1, 4):
            c.put(0, b"p/k", b"%d" % i)

        def compacted() -> bool:
            c.put(0, b"p/tick", b"")  # the revision moves on
            try:
                c.stub(0).Range(req, timeout=10)
            except grpc.RpcError as err:
                return err.details() == COMPACTED
            return False

        wait_until(compacted, 30, "the first revision compacted after the retention")
