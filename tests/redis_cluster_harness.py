"""A real Redis Cluster for tests: N masters with R replicas each, on free 127.0.0.1 ports.

    with RedisCluster(tmp_path, masters=3, replicas=1) as cluster:
        rc = cluster.client()                       # redis-py RedisCluster
        for shard in cluster.shards():              # first slot, master, replicas (a live view)
            ...
        cluster.failover(shard.replicas[0])         # CLUSTER FAILOVER (graceful), waits for ok
        cluster.kill(shard.master)                  # kill -9: the replica is promoted after
                                                    # cluster-node-timeout (1000 ms here)
        cluster.pause(node); cluster.resume(node)   # SIGSTOP / SIGCONT

Each node is a :class:`~tests.redis_harness.RedisServer` (stopped by PID) with
``cluster-enabled yes``, its own ``nodes.conf``, and a ``cluster-port`` picked free too (the
bus port is not assumed to be port + 10000). ``redis-cli --cluster create … --cluster-yes``
assigns the slots (3 masters: 0-5460, 5461-10922, 10923-16383) and the replicas and sets
distinct config epochs. Every wait polls a condition with a deadline: ``cluster_state:ok`` on
every live node, and every live node agreeing on which node serves each shard.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.cluster import ClusterNode as PyClusterNode
from redis.cluster import RedisCluster as PyRedisCluster

from replicator.redis.cluster import ClusterNode, parse_cluster_nodes
from tests.harness import free_ports, wait_until
from tests.redis_harness import RedisServer

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


@dataclass
class Shard:
    slot: int  # its first slot: the replicator's --cluster-shard
    master: RedisServer
    replicas: list[RedisServer]
    master_id: str


class RedisCluster:
    def __init__(
        self,
        root: str | Path,
        masters: int = 3,
        replicas: int = 1,
        config: dict[str, str] | None = None,
        node_timeout_ms: int = 1000,
        timeout: float = 60.0,
    ) -> None:
        self.root = Path(root) / "cluster"
        n = masters * (1 + replicas)
        ports = free_ports(2 * n)
        base = {
            "cluster-enabled": "yes",
            "cluster-config-file": "nodes.conf",
            "cluster-node-timeout": str(node_timeout_ms),
            **(config or {}),
        }
        self.nodes: list[RedisServer] = []
        try:
            for i in range(n):
                cfg = {**base, "cluster-port": str(ports[n + i])}
                self.nodes.append(RedisServer(self.root, cfg, name=f"node{i}", port=ports[i]))
            out = subprocess.run(
                [REDIS_CLI, "--cluster", "create", *(s.addr for s in self.nodes),
                 "--cluster-replicas", str(replicas), "--cluster-yes"],
                capture_output=True, timeout=timeout, check=False,
            )  # fmt: skip
            assert out.returncode == 0, out.stdout.decode() + out.stderr.decode()
            self.wait_ok(timeout)
        except BaseException:
            self.close()
            raise

    # ---- views -------------------------------------------------------------------------

    def live(self) -> list[RedisServer]:
        return [s for s in self.nodes if s.proc is not None and s.proc.poll() is None]

    def by_port(self, port: int) -> RedisServer:
        return next(s for s in self.nodes if s.port == port)

    def view(self, server: RedisServer) -> list[ClusterNode]:
        raw = server.client(socket_timeout=2).execute_command("CLUSTER", "NODES")
        return parse_cluster_nodes(raw.decode() if isinstance(raw, bytes) else str(raw))

    def shards(self, via: RedisServer | None = None) -> list[Shard]:
        """The shards as ``via`` (default: the first live node) sees them, by first slot."""
        nodes = self.view(via or self.live()[0])
        out = []
        for m in nodes:
            if m.is_master and m.slots and "fail" not in m.flags:
                reps = [
                    self.by_port(r.port)
                    for r in nodes
                    if r.master_id == m.node_id and "fail" not in r.flags
                ]
                first = min(lo for lo, _ in m.slots)
                out.append(Shard(first, self.by_port(m.port), reps, m.node_id))
        return sorted(out, key=lambda s: s.slot)

    def shard_of(self, slot: int) -> Shard:
        return next(s for s in self.shards() if s.slot == slot)

    def client(self, **kwargs: Any) -> PyRedisCluster:
        nodes = [PyClusterNode("127.0.0.1", s.port) for s in self.live()]
        kwargs.setdefault("socket_timeout", 5)
        return PyRedisCluster(startup_nodes=nodes, **kwargs)

    # ---- waits ---------------------------------------------------------------------------

    def _agreed(self) -> bool:
        views = []
        for s in self.live():
            info = s.client(socket_timeout=2).execute_command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in text:
                return False
            views.append(
                sorted((sh.slot, sh.master.port, tuple(r.port for r in sh.replicas))
                       for sh in self.shards(s))
            )  # fmt: skip
        return all(v == views[0] for v in views)

    def wait_ok(self, timeout: float = 60.0) -> None:
        """Every live node says ``cluster_state:ok`` and all see the same shards."""
        wait_until(self._agreed, timeout, lambda: f"cluster ok and agreed:\n{self.logs()}", 0.2)

    def failover(self, replica: RedisServer, timeout: float = 60.0) -> None:
        """``CLUSTER FAILOVER`` (graceful: the master pauses its clients until the replica has
        caught up, then the replica takes over), then until the cluster agrees on it."""
        replica.client().execute_command("CLUSTER", "FAILOVER")
        wait_until(
            lambda: replica.client().info("replication")["role"] == "master",
            timeout, f"{replica.addr} promoted",
        )  # fmt: skip
        self.wait_ok(timeout)

    def kill(self, server: RedisServer, sig: int = signal.SIGKILL) -> None:
        server.kill(sig)

    def pause(self, server: RedisServer) -> None:
        """SIGSTOP: alive, silent, its sockets open (a partition, as its peers see it)."""
        assert server.proc is not None and server.proc.poll() is None
        server.proc.send_signal(signal.SIGSTOP)

    def resume(self, server: RedisServer) -> None:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.send_signal(signal.SIGCONT)

    def logs(self, n: int = 15) -> str:
        return "\n".join(f"--- {s.addr}\n{s.log_tail(n)}" for s in self.nodes)

    def close(self) -> None:
        for s in self.nodes:
            s.kill()

    def __enter__(self) -> RedisCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
