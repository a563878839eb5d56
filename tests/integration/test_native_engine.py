"""raftlog.NativeEngine in one process: three engines on loopback ports with real sockets,
real fsynced logs and their own threads, each handing committed items to a list.

What the cluster tests cannot see from outside: every node's sink gets the same items in
the same order whichever node proposed them (followers forward to the leader), a restart
replays the fsynced log, a peer with the wrong password is never let in, and each engine
refuses a data dir written by the other engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog import ConfigError, NativeConfig, NativeEngine, PySyncObjConfig, PySyncObjEngine
from raftlog.errors import ProposeError
from tests.harness import free_ports, wait_until

pytestmark = pytest.mark.integration


class Node:
    def __init__(self, cfg: NativeConfig) -> None:
        self.cfg = cfg
        self.items: list[tuple[int, bytes]] = []
        self.lock = threading.Lock()
        self.engine = NativeEngine(cfg)

    def sink(self, index: int, term: int, data: bytes) -> None:
        with self.lock:
            self.items.append((index, data))

    def start(self) -> None:
        self.engine.start(self.sink)

    def restart(self) -> None:
        self.engine.stop()
        self.items = []
        self.engine = NativeEngine(self.cfg)
        self.start()

    def data(self) -> list[bytes]:
        with self.lock:
            return [d for _, d in self.items]


def make_nodes(tmp_path: Path, passwords: list[str | None], paths: int = 2) -> list[Node]:
    ports = free_ports(len(passwords))
    peers = {f"n{i}": f"127.0.0.1:{p}" for i, p in enumerate(ports)}
    return [
        Node(
            NativeConfig(
                node_id=f"n{i}",
                peers=peers,
                journal_dir=str(tmp_path / f"n{i}"),
                password=pw,
                election_timeout_min_ms=300,
                election_timeout_max_ms=600,
                leader_step_down_ms=1000,
                peer_paths=paths,
            )
        )
        for i, pw in enumerate(passwords)
    ]


@pytest.fixture
def nodes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[Node]]:
    """Three started engines; ``peer_paths`` from an indirect parameter (default 2)."""
    ns = make_nodes(tmp_path, ["s3cret"] * 3, getattr(request, "param", 2))
    for n in ns:
        n.start()
    try:
        yield ns
    finally:
        for n in ns:
            n.engine.stop()


def leader_of(nodes: list[Node]) -> Node:
    def find() -> Node | None:
        leaders = [n for n in nodes if n.engine.is_leader()]
        if len(leaders) == 1 and all(
            n.engine.leader_address() == leaders[0].cfg.self_address for n in nodes
        ):
            return leaders[0]
        return None

    found = wait_until(find, 15, "no leader that every node knows")
    assert found is not None
    return found


def propose(node: Node, data: bytes) -> int:
    done = threading.Event()
    out: list[int | ProposeError | None] = []

    def cb(index: int | None, err: ProposeError | None) -> None:
        out.append(err if err is not None else index)
        done.set()

    node.engine.propose(data, cb)
    assert done.wait(10), "no answer to a proposal"
    result = out[0]
    if isinstance(result, ProposeError):
        raise result
    assert isinstance(result, int)
    return result


@pytest.mark.parametrize("nodes", [1, 2], indirect=True, ids=["one-path", "two-paths"])
def test_every_node_gets_the_same_items_from_leader_and_followers(nodes: list[Node]) -> None:
    leader = leader_of(nodes)
    followers = [n for n in nodes if n is not leader]
    sent = []
    for i in range(30):
        node = [leader, *followers][i % 3]
        sent.append(b"item-%d" % i)
        propose(node, sent[-1])
    wait_until(lambda: all(len(n.items) == 30 for n in nodes), 10, "items did not reach all")
    assert nodes[0].items == nodes[1].items == nodes[2].items
    assert sorted(nodes[0].data()) == sorted(sent)
    indexes = [i for i, _ in nodes[0].items]
    assert indexes == sorted(indexes) and len(set(indexes)) == 30
    st = leader.engine.status()
    assert st.role == "leader" and st.commit_offset == st.end_offset >= 30


def test_a_restarted_node_replays_its_fsynced_log(nodes: list[Node]) -> None:
    leader = leader_of(nodes)
    for i in range(10):
        propose(leader, b"r%d" % i)
    victim = next(n for n in nodes if n is not leader)
    wait_until(lambda: len(victim.items) == 10, 10, "follower did not apply")
    victim.restart()
    wait_until(lambda: len(victim.items) == 10, 10, "the restarted node did not replay")
    assert victim.data() == [b"r%d" % i for i in range(10)]
    propose(victim, b"after")  # forwarded to the leader
    wait_until(lambda: all(n.data()[-1:] == [b"after"] for n in nodes), 10, "not replicated")


def test_leader_transfer_and_membership_refusals(nodes: list[Node]) -> None:
    leader = leader_of(nodes)
    target = next(n for n in nodes if n is not leader)
    propose(leader, b"x")
    done = threading.Event()
    errors: list[ProposeError | None] = []
    leader.engine.transfer_leadership(
        target.cfg.self_address, lambda i, e: (errors.append(e), done.set())
    )
    assert done.wait(10) and errors == [None]
    wait_until(lambda: leader_of(nodes) is target, 10, "leadership did not move to the target")
    done.clear()
    errors.clear()
    target.engine.add_member(target.cfg.self_address, lambda i, e: (errors.append(e), done.set()))
    assert done.wait(10)
    assert isinstance(errors[0], ProposeError) and "already a member" in str(errors[0])


def test_a_peer_with_the_wrong_password_is_never_let_in(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ns = make_nodes(tmp_path, ["s3cret", "s3cret", "wrong"])
    for n in ns:
        n.start()
    try:
        good = ns[:2]
        leader = leader_of(good)
        propose(leader, b"members only")
        wait_until(lambda: all(len(n.items) == 1 for n in good), 10, "not replicated")
        outsider = ns[2]
        wait_until(
            lambda: any("bad password" in r.getMessage() for r in caplog.records),
            10,
            "the members never refused the outsider",
        )
        refused = [r.getMessage() for r in caplog.records if "bad password" in r.getMessage()]
        assert any(outsider.cfg.self_address in m for m in refused)
        # its own dials were refused too: it never heard from the leader nor got an item
        assert outsider.engine.leader_address() == ""
        assert outsider.items == [] and outsider.engine.status().commit_offset == 0
    finally:
        for n in ns:
            n.engine.stop()


def test_each_engine_refuses_the_other_engines_data_dir(tmp_path: Path) -> None:
    port = free_ports(1)[0]
    peers = {"n0": f"127.0.0.1:{port}"}
    pso_dir = tmp_path / "pso"
    pso_dir.mkdir()
    (pso_dir / "journal").write_bytes(b"")
    native = NativeEngine(NativeConfig("n0", peers, str(pso_dir), password="pw"))
    with pytest.raises(ConfigError, match=r"consensus.*pysyncobj"):
        native.start(lambda i, t, d: None)
    native_dir = tmp_path / "native"
    (native_dir / "wal").mkdir(parents=True)
    pso = PySyncObjEngine(PySyncObjConfig("n0", peers, str(native_dir), password="pw"))
    with pytest.raises(ConfigError, match=r"consensus.*native"):
        pso.start(lambda i, t, d: None)


class LoopNode(Node):
    """A node whose engine runs on an event loop it shares (``shared_loop``), the way the
    server runs it on its gRPC loop: the loop has a thread of its own here."""

    def __init__(self, cfg: NativeConfig) -> None:
        super().__init__(dataclasses.replace(cfg, shared_loop=True))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="server-loop")
        self.thread.start()
        self.sink_threads: set[int] = set()

    def sink(self, index: int, term: int, data: bytes) -> None:
        self.sink_threads.add(threading.get_ident())
        super().sink(index, term, data)

    def on_loop(self, fn: Any) -> Any:
        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(10)

    def start(self) -> None:
        self.on_loop(lambda: self.engine.start(self.sink))

    def restart(self) -> None:
        self.on_loop(self.engine.stop)
        self.items = []
        self.engine = NativeEngine(self.cfg)
        self.start()

    def close(self) -> None:
        self.on_loop(self.engine.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def test_engines_on_shared_loops_replicate_replay_and_stop(tmp_path: Path) -> None:
    """``shared_loop``: no thread of the engine's own; commits reach the sink on the loop
    that started it; forwarding, restart replay and stop work as with a thread."""
    raft_threads_before = {t for t in threading.enumerate() if t.name == "raft"}
    ns = [LoopNode(n.cfg) for n in make_nodes(tmp_path, ["s3cret"] * 3)]
    try:
        for n in ns:
            n.start()
        assert {t for t in threading.enumerate() if t.name == "raft"} == raft_threads_before
        leader = leader_of(ns)
        followers = [n for n in ns if n is not leader]
        for i in range(20):
            propose([leader, *followers][i % 3], b"s%d" % i)  # from another thread: safe
        wait_until(lambda: all(len(n.items) == 20 for n in ns), 10, "items did not reach all")
        assert ns[0].items == ns[1].items == ns[2].items
        for n in ns:
            assert n.sink_threads == {n.thread.ident}
        victim = followers[0]
        victim.restart()
        wait_until(lambda: len(victim.items) == 20, 10, "the restarted node did not replay")
        propose(victim, b"after")
        wait_until(lambda: all(n.data()[-1:] == [b"after"] for n in ns), 10, "not replicated")
    finally:
        for n in ns:
            n.close()


def test_a_shared_loop_engine_fails_start_on_a_taken_port(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    cfg = NativeConfig(
        "n0", {"n0": f"127.0.0.1:{port}"}, str(tmp_path / "n0"), password="pw", shared_loop=True
    )
    node = LoopNode(cfg)
    try:
        with pytest.raises(OSError):
            node.start()
    finally:
        holder.close()
        node.loop.call_soon_threadsafe(node.loop.stop)
        node.thread.join(10)
        node.loop.close()
