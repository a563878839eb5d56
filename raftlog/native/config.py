"""The native engine's configuration: :class:`NativeConfig`."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from raftlog.consensus import EngineConfig
from raftlog.errors import ConfigError


@dataclass(frozen=True)
class NativeConfig(EngineConfig):
    password_reason: ClassVar[str] = "a cluster password is required so that only members join"

    heartbeat_ms: int = 100
    tick_ms: int = 20
    #: entries kept in the log behind a snapshot, so that a follower a little behind
    #: catches up from the log rather than by a whole snapshot transfer
    snapshot_margin_items: int = 1000
    #: a proposal made while no leader is known waits this long for one
    wait_leader_ms: int = 5000
    #: run on the event loop that calls :meth:`NativeEngine.start` (the server's gRPC loop)
    #: instead of a thread and loop of its own: no hand-off between threads (and no GIL
    #: ping-pong) per consensus item, at the price of the log's fdatasync running on that
    #: loop. Without a running loop at start the engine takes its own thread anyway.
    shared_loop: bool = False
    #: etcd's ``--force-new-cluster``: at start, make this member the only voter (keeping
    #: its log, snapshot and applied data); others join again with member add
    force_new_cluster: bool = False
    #: an inbound peer connection that has not authenticated by then is closed
    peer_handshake_timeout_ms: int = 5000
    #: an authenticated inbound connection with no frame for this long is closed (members
    #: send heartbeats every heartbeat_ms, and keepalives: :attr:`peer_keepalive_s`)
    peer_idle_timeout_ms: int = 30_000
    #: this member's connection to a peer is closed and dialled again when nothing was
    #: heard from that peer for this long, or when data written to it stays unacknowledged
    #: this long (TCP_USER_TIMEOUT, where the platform has it): a black-holed connection
    #: gives no error, and TCP's own retransmissions back off to over 10 s. etcd puts 5 s
    #: deadlines on its peer connections; two election timeouts here
    peer_dead_timeout_ms: int = 4000
    #: connections this member keeps dialled to each peer: messages go to one, and to
    #: another once the kernel says the first is stuck (data sent again and nothing
    #: acknowledged for :data:`raftlog.native.peer_socket.PATH_STUCK_MS`); under packet loss
    #: one connection's retransmissions can hold every message back for seconds
    peer_paths: int = 2
    #: a frame that started must complete within this (a 1 MiB snapshot chunk included)
    peer_frame_timeout_ms: int = 30_000
    #: inbound peer connections at once (handshakes included); more are closed at once
    peer_max_connections: int = 64
    #: TLS on the peer port (None: plain TCP): the listener's context (it may require a
    #: client certificate) and the dialler's (it checks the listener's certificate and
    #: presents this member's); the password handshake runs on top either way
    peer_ssl_server: ssl.SSLContext | None = field(default=None, compare=False)
    peer_ssl_client: ssl.SSLContext | None = field(default=None, compare=False)
    #: applied by a leader to the data of a normal proposal a follower forwarded, before it
    #: appends it: the log's owner adds the leader's clock (:func:`raftlog.entry.stamp_item`),
    #: so that no follower's clock enters the log; None: appended as sent
    stamp_forwarded: Callable[[bytes], bytes] | None = field(default=None, compare=False)
    #: called on the engine's loop when this node becomes leader, with the newest normal
    #: item in its log (its predecessor's, b"" if none), before it appends anything of its
    #: own: the log's owner learns the log's time before it stamps (:func:`raftlog.log.
    #: leader_takes_over`); None: nothing is called
    on_lead: Callable[[bytes], None] | None = field(default=None, compare=False)

    def validate(self) -> None:
        if not self.password:
            raise ConfigError(
                "password",
                "the Raft peer port always authenticates: a cluster password is required "
                "(loopback included)",
            )
        super().validate()
        for name in (
            "peer_handshake_timeout_ms",
            "peer_idle_timeout_ms",
            "peer_frame_timeout_ms",
            "peer_dead_timeout_ms",
            "peer_max_connections",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(name, f"must be > 0, not {getattr(self, name)}")
        if not 1 <= self.peer_paths <= 4:
            raise ConfigError("peer_paths", f"must be 1 to 4, not {self.peer_paths}")
        if self.peer_idle_timeout_ms <= 2 * self.heartbeat_ms:
            raise ConfigError(
                "peer_idle_timeout_ms",
                f"must be more than twice heartbeat_ms ({self.heartbeat_ms}), "
                "or live connections are closed",
            )
        if self.peer_dead_timeout_ms <= 2 * self.heartbeat_ms:
            raise ConfigError(
                "peer_dead_timeout_ms",
                f"must be more than twice heartbeat_ms ({self.heartbeat_ms}), "
                "or live connections are closed",
            )

    @property
    def peer_keepalive_s(self) -> float:
        """How often a member writes a keepalive on its connection to each peer: often
        enough for the listener's idle timeout and for the dead-connection deadline."""
        return min(self.peer_idle_timeout_ms, self.peer_dead_timeout_ms) / 4000
