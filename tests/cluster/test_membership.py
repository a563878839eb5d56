"""Membership changes and leadership transfer on real processes, under write load.

Raft sections are those of Ongaro & Ousterhout, "In Search of an Understandable Consensus
Algorithm (Extended Version)", 2014: §4.1 (one server added or removed at a time), §4.2.1
(a new server catches up before it serves), §4.2.3 (removed servers), §3.10 (leadership
transfer, TimeoutNow). PySyncObj changes membership one server at a time, as §4.1 does.

The grow-and-shrink test ends with "all images equal" on the surviving members
(serializable full-range reads, revisions included) and with every acknowledged write
readable on each of them.
"""

from __future__ import annotations

import collections
import io
import itertools
import json
import threading
import time
from contextlib import redirect_stdout

import grpc
import pytest

from nameserver import cli
from nameserver.cli.exitcodes import ExitCode
from nameserver.client import Client, ClientError, Member
from protos.etcdserverpb import rpc_pb2
from tests.harness import Cluster, free_ports, wait_until

pytestmark = pytest.mark.cluster

PREFIX = b"load/"
KV = dict[bytes, tuple[bytes, int, int, int]]


# --------------------------------------------------------------------------- helpers
class Writer:
    """One thread putting distinct keys through ``endpoints`` (round robin: one client per
    endpoint, each failing over to the others), retrying a key until it is acknowledged.

    A retry of a put that was applied after all writes the same value again, so every key
    in the image under the prefix has the value its first attempt meant.
    """

    def __init__(self, endpoints: list[str], prefix: bytes, pause_s: float = 0.01) -> None:
        self.prefix = prefix
        self.pause_s = pause_s
        self.clients = [
            Client(endpoints[i:] + endpoints[:i], timeout_s=10.0) for i in range(len(endpoints))
        ]
        self.acked: dict[bytes, tuple[bytes, int]] = {}  # key -> (value, revision)
        self.retries: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="writer", daemon=True)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        for c in self.clients:
            c.close()
        assert not self.thread.is_alive(), "the writer thread hangs"

    def snapshot(self) -> dict[bytes, tuple[bytes, int]]:
        with self.lock:
            if self.failure is not None:
                raise AssertionError(f"the writer failed: {self.failure!r}")
            return dict(self.acked)

    def count(self) -> int:
        return len(self.snapshot())

    def _run(self) -> None:
        try:
            for seq in itertools.count():
                key = self.prefix + f"{seq:06d}".encode()
                value = b"value of " + key
                client = self.clients[seq % len(self.clients)]
                while not self.stop.is_set():
                    try:
                        revision = client.put(key, value).revision
                    except ClientError as exc:
                        if not exc.retriable:
                            raise
                        with self.lock:
                            self.retries[type(exc).__name__] += 1
                        continue
                    with self.lock:
                        self.acked[key] = (value, revision)
                    break
                if self.stop.wait(self.pause_s):
                    return
        except BaseException as exc:
            with self.lock:
                self.failure = exc


def run_cli(*argv: str) -> tuple[int, str]:
    """``metaledger argv`` in-process; returns (exit code, stdout)."""
    out = io.StringIO()
    with redirect_stdout(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


def member_list(cluster: Cluster, i: int) -> list[Member]:
    with Client([cluster.endpoints[i]], timeout_s=5.0) as c:
        return c.members()


def wait_members(cluster: Cluster, nodes: list[int], names: set[str], timeout: float) -> None:
    """Wait until each of ``nodes`` lists exactly the members ``names``, each named."""

    def listed() -> bool:
        return all({m.name for m in member_list(cluster, i)} == names for i in nodes)

    wait_until(
        listed,
        timeout,
        lambda: (
            f"member lists are not {sorted(names)}: "
            + "; ".join(
                f"{cluster.nodes[i].id}: {sorted(m.name or '?' for m in member_list(cluster, i))}"
                for i in nodes
            )
        ),
        interval=0.1,
    )


def highest_apply_offset(cluster: Cluster, nodes: list[int]) -> int:
    """The highest apply offset among ``nodes`` (at least the leader's)."""
    return max((int(st.apply_offset) for st in cluster.statuses(nodes).values()), default=0)


def leader_index(cluster: Cluster, nodes: list[int]) -> int | None:
    """The node among ``nodes`` that says it leads (by role: a member added at run time may
    be named by its peer address in other nodes' ``leader`` field)."""
    leaders = [i for i, st in cluster.statuses(nodes).items() if st.role == "leader"]
    return leaders[0] if len(leaders) == 1 else None


def assert_serves_reads(
    cluster: Cluster, new: int, members: list[int], writer: Writer, timeout: float
) -> None:
    """§4.2.1: the new member catches up (its apply offset reaches what the leader had
    applied after the writes acknowledged so far) and then serves serializable reads of
    every one of them."""
    acked = writer.snapshot()
    target = max(
        highest_apply_offset(cluster, members), max((r for _, r in acked.values()), default=0)
    )
    cluster.wait_applied(target, [new], timeout)
    got = cluster.range_all(new, PREFIX, serializable=True)
    missing = sorted(k for k in acked if k not in got)
    wrong = sorted(k for k in acked if k in got and got[k][0] != acked[k][0])
    assert not missing and not wrong, (
        f"{cluster.nodes[new].id} at apply offset >= {target} lacks acknowledged writes: "
        f"{len(missing)} missing (e.g. {missing[:3]}), {len(wrong)} wrong of {len(acked)}"
    )


def assert_images_equal(cluster: Cluster, nodes: list[int]) -> KV:
    cluster.wait_converged(nodes)
    images = {i: cluster.range_all(i, serializable=True) for i in nodes}
    first = images[nodes[0]]
    for i in nodes[1:]:
        if images[i] != first:
            only_a = sorted(set(first) - set(images[i]))[:5]
            only_b = sorted(set(images[i]) - set(first))[:5]
            differ = sorted(k for k in set(first) & set(images[i]) if first[k] != images[i][k])
            pytest.fail(
                f"images of {cluster.nodes[nodes[0]].id} and {cluster.nodes[i].id} differ: "
                f"only in the first {only_a}, only in the second {only_b}, "
                f"different {differ[:5]}"
            )
    return first


# --------------------------------------------------------------------------- tests
def test_grow_to_five_and_shrink_to_three_under_write_load(cluster: Cluster) -> None:
    """§4.1/§4.2: add two servers one at a time, then remove them, while a writer keeps
    writing through the three that stay; no acknowledged write is lost."""
    started = time.monotonic()
    phases: dict[str, tuple[float, int]] = {}  # name -> (seconds since start, acked writes)

    def phase(name: str) -> None:
        """Note the time; and the writer must have had writes acknowledged since the last
        phase, i.e. while the membership was changing."""
        count = writer.count()
        last = max((n for _, n in phases.values()), default=0)
        assert count > last, f"no write acknowledged during '{name}'"
        phases[name] = (round(time.monotonic() - started, 1), count)

    core = [0, 1, 2]
    core_endpoints = [cluster.endpoints[i] for i in core]
    admin = Client(core_endpoints, timeout_s=20.0)
    with Writer(core_endpoints, PREFIX) as writer:
        wait_until(lambda: writer.count() >= 20, 20, "the writer got 20 writes acknowledged")
        phase("writing")

        # n3 joins: started first (knows the members and itself), then added through the
        # CLI, whose printed serve flags must be the ones it was started with.
        n3 = cluster.add_node(core)
        code, out = run_cli(
            "member",
            "add",
            cluster.peer_url(n3),
            "--name",
            "n3",
            "--endpoints",
            ",".join(core_endpoints),
            "--timeout",
            "20",
            "-w",
            "json",
        )
        assert code == ExitCode.OK, out
        added = json.loads(out)
        flags = added["serve_flags"]
        assert flags[flags.index("--id") + 1] == "n3"
        assert flags[flags.index("--listen-peer") + 1] == cluster.nodes[n3].peer_addr
        printed = dict(p.split("=") for p in flags[flags.index("--initial-cluster") + 1].split(","))
        started_with = dict(p.split("=") for p in cluster.initial_clusters[n3].split(","))
        assert printed == started_with
        assert added["member"]["peer_urls"] == [cluster.peer_url(n3)]
        assert_serves_reads(cluster, n3, core, writer, 30)
        wait_members(cluster, [0, n3], {"n0", "n1", "n2", "n3"}, 20)
        phase("n3 serves")

        # n4 joins through the client library, added by a follower (which forwards it)
        n4 = cluster.add_node([*core, n3])
        follower = next(i for i in core if i != leader_index(cluster, [*core, n3]))
        with Client([cluster.endpoints[follower]], timeout_s=20.0) as via_follower:
            member = via_follower.member_add(cluster.peer_url(n4))
        assert member.peer_urls == [cluster.peer_url(n4)] and member.name == ""
        assert_serves_reads(cluster, n4, [*core, n3], writer, 30)
        wait_members(cluster, [1, n4], {"n0", "n1", "n2", "n3", "n4"}, 20)
        assert len(member_list(cluster, 2)) == 5
        phase("n4 serves")

        # §4.2.3: remove n3 (by name, through the CLI) and n4 (by id), stopping each. A
        # leader cannot be removed (see test_the_leader_can_be_removed): should one of them
        # lead, hand leadership to a node that stays first, as an operator would.
        leader = wait_until(
            lambda: [i for i in [leader_index(cluster, [*core, n3, n4])] if i is not None],
            20,
            "one node leads",
            0.1,
        )[0]
        if leader not in core:
            with Client(cluster.endpoints, timeout_s=20.0) as c:
                c.move_leader(cluster.status(core[0]).member_id)
        code, out = run_cli(
            "member", "remove", "n3", "--endpoints", ",".join(core_endpoints), "--timeout", "20"
        )
        assert code == ExitCode.OK, out
        assert "removed" in out
        assert cluster.stop(n3) == 0, cluster.log_tail(n3)
        remaining = admin.member_remove(member.member_id)
        assert {m.name for m in remaining} == {"n0", "n1", "n2"}
        assert cluster.stop(n4) == 0, cluster.log_tail(n4)
        phase("removed")

        total = writer.count()
        wait_until(
            lambda: writer.count() >= total + 20,
            20,
            "the three remaining members keep acknowledging writes",
        )
    acked = writer.snapshot()
    admin.close()

    image = assert_images_equal(cluster, core)
    missing = sorted(k for k in acked if k not in image)
    wrong = sorted(k for k in acked if k in image and image[k][0] != acked[k][0])
    assert not missing and not wrong, (
        f"acknowledged writes lost: {len(missing)} missing (e.g. {missing[:5]}), "
        f"{len(wrong)} with another value (e.g. {wrong[:5]}) of {len(acked)}"
    )
    stray = [k for k in image if k.startswith(PREFIX) and image[k][0] != b"value of " + k]
    assert not stray, f"keys with values nobody wrote: {stray[:5]}"
    wait_members(cluster, core, {"n0", "n1", "n2"}, 20)
    for i in core:
        st = cluster.status(i)
        assert st.apply_offset <= st.commit_offset <= st.end_offset
    print(
        f"membership under load: {len(acked)} acknowledged writes, "
        f"retries {dict(writer.retries)}, phases {phases}, {time.monotonic() - started:.1f} s"
    )


def test_leader_transfer_to_a_named_follower_and_to_any(cluster: Cluster) -> None:
    """§3.10: the leader hands over to a caught-up follower (TimeoutNow); with no target,
    to the most caught-up one."""
    endpoints = ",".join(cluster.endpoints)
    leader = cluster.wait_ready(20)
    target = next(i for i in range(cluster.n) if i != leader)
    name = cluster.nodes[target].id
    with Writer(cluster.endpoints, b"transfer/", pause_s=0.02) as writer:
        wait_until(lambda: writer.count() >= 10, 20, "the writer got 10 writes acknowledged")
        code, out = run_cli(
            "leader", "transfer", "--to", name, "--endpoints", endpoints, "--timeout", "20"
        )
        assert code == ExitCode.OK, out
        assert out.strip() == f"Leadership transferred from {cluster.nodes[leader].id} to {name}"
        assert cluster.wait_ready(10) == target

        # by hex id, and without a target: some other node leads afterwards
        with Client(cluster.endpoints, timeout_s=20.0) as c:
            st = cluster.status(target)
            again = c.move_leader(st.member_id)
            assert (again.previous, again.leader) == (name, name)  # already leads
            moved = c.move_leader()
        assert moved.previous == name and moved.leader != name
        assert cluster.nodes[cluster.wait_ready(10)].id == moved.leader
        count = writer.count()
        wait_until(lambda: writer.count() >= count + 10, 20, "writes go on after the transfers")
    acked = writer.snapshot()
    image = assert_images_equal(cluster, list(range(cluster.n)))
    assert all(image[k][0] == v for k, (v, _) in acked.items())


# --------------------------------------------------------------------------- regressions (server bugs found while writing these tests)
def test_concurrent_membership_changes_are_applied_one_at_a_time(cluster: Cluster) -> None:
    """§4.1: a change may start only once the previous one is committed. Two concurrent
    MemberAdds are serialized (the second waits for the first): both succeed and the
    configuration lists both (before the fix PySyncObj accepted both at once)."""
    leader = cluster.wait_ready(20)
    results: dict[int, str] = {}
    barrier = threading.Barrier(2)
    ports = free_ports(2)

    def add(port: int) -> None:
        request = rpc_pb2.MemberAddRequest(peerURLs=[f"http://127.0.0.1:{port}"])
        barrier.wait()
        try:
            cluster.cluster_stub(leader).MemberAdd(request, timeout=15)
            results[port] = "ok"
        except grpc.RpcError as exc:
            results[port] = exc.code().name

    threads = [threading.Thread(target=add, args=(port,)) for port in ports]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results == {port: "ok" for port in ports}
    members = cluster.cluster_stub(leader).MemberList(rpc_pb2.MemberListRequest(), timeout=5)
    peer_urls = {url for m in members.members for url in m.peerURLs}
    assert {f"http://127.0.0.1:{port}" for port in ports} <= peer_urls
    assert len(members.members) == 5


def test_the_leader_can_be_removed(cluster: Cluster) -> None:
    """etcd removes a leader (it steps down once the change commits); so should we."""
    leader = cluster.wait_ready(20)
    other = next(i for i in range(cluster.n) if i != leader)
    with Client([cluster.endpoints[other]], timeout_s=5.0) as c:
        c.member_remove(cluster.status(leader).member_id)
    cluster.stop(leader)
    cluster.wait_ready(20)


def test_status_names_a_new_leader_by_its_node_id(cluster: Cluster) -> None:
    leader = cluster.wait_ready(20)
    n3 = cluster.add_node()
    with Client([cluster.endpoints[leader]], timeout_s=20.0) as c:
        c.member_add(cluster.peer_url(n3))
        wait_until(lambda: cluster.status(n3).leader, 20, "n3 follows a leader")
        wait_members(cluster, [leader], {"n0", "n1", "n2", "n3"}, 20)
        c.move_leader(cluster.status(n3).member_id)
    wait_until(
        lambda: {st.leader for st in cluster.statuses().values()} == {"n3"},
        5,
        lambda: f"every node names n3: {[(s.id, s.leader) for s in cluster.statuses().values()]}",
    )


def test_a_removed_member_stops_and_exits_removed(cluster: Cluster) -> None:
    """§4.2.3, as etcd ("the member has been permanently removed from the cluster"): once
    the change that removes it is committed, the removed member stops serving and exits
    with REMOVED; started again on its data dir, it stops the same way. Before: after
    ``member remove``, ``status`` against it listed it as a follower and it served ``get``."""
    leader = cluster.wait_ready(20)
    victim = next(i for i in range(cluster.n) if i != leader)
    rest = [i for i in range(cluster.n) if i != victim]
    cluster.put_retrying(leader, b"before-remove", b"ok")
    cluster.wait_converged()
    name = cluster.nodes[victim].id
    endpoints = ",".join(cluster.endpoints[i] for i in rest)
    code, out = run_cli("member", "remove", name, "--endpoints", endpoints, "--timeout", "20")
    assert code == ExitCode.OK, out
    assert cluster.wait_exit(victim, 30) == ExitCode.REMOVED, cluster.log_tail(victim)
    assert "the member has been permanently removed from the cluster" in cluster.log_tail(victim)
    code, _ = run_cli("status", "--endpoints", cluster.endpoints[victim], "--timeout", "2")
    assert code != ExitCode.OK
    cluster.start(victim)
    assert cluster.wait_exit(victim, 30) == ExitCode.REMOVED, cluster.log_tail(victim)
    cluster.wait_ready(20, rest)
    cluster.put_retrying(cluster.leader(), b"after-remove", b"ok")
    wait_members(cluster, rest, {cluster.nodes[i].id for i in rest}, 20)
