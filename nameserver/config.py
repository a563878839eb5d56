"""Server configuration: a frozen dataclass with units in names and a validate()."""

from __future__ import annotations

from dataclasses import dataclass, field

from nameserver import defaults
from nameserver.checks import parse_go_duration
from nameserver.tls import TlsFiles
from nameserver.tls import check as check_tls
from raftlog import ConfigError

#: etcd's limits, and ours (a request past one gets INVALID_ARGUMENT naming the limit).
MAX_VALUE_BYTES = 1536 * 1024  # 1.5 MiB
MAX_REQUEST_BYTES = 2 * 1024 * 1024  # 2 MiB
MAX_TXN_OPS = 128
#: The largest response built: gRPC's send limit (nameserver.server.GRPC_MAX_MESSAGE_BYTES,
#: 16 MiB) less 64 KiB for what the estimate leaves out. A read that would pass it is
#: refused (RESOURCE_EXHAUSTED) before the response is built.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024 - 64 * 1024


def _split_hostport(field_name: str, value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if value.startswith(("http://", "https://")):
        return _split_hostport(field_name, value.split("://", 1)[1])
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(field_name, f"{value!r} is not host:port")
    return host.strip("[]"), int(port)


def parse_initial_cluster(value: str) -> dict[str, str]:
    """``id=host:port,id=host:port`` → {id: "host:port"} (an ``http://`` prefix is accepted)."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        nid, sep, addr = part.partition("=")
        if not sep or not nid:
            raise ConfigError("initial_cluster", f"{part!r} is not id=host:port")
        host, port = _split_hostport("initial_cluster", addr)
        if nid in out:
            raise ConfigError("initial_cluster", f"member {nid!r} is listed twice")
        out[nid] = f"{host}:{port}"
    if not out:
        raise ConfigError("initial_cluster", "must list at least this node")
    return out


#: How snapshots are written: "process" forks a child that encodes and writes the file
#: (the node's threads never wait for it: no commit stalls); "thread" writes it on a
#: thread of the node (where fork is unavailable, or to debug).
SNAPSHOT_WRITERS = ("process", "thread")
#: what may serve the client gRPC port (ServerConfig.grpc_front)
GRPC_FRONTS = ("python", "go")


@dataclass(frozen=True)
class ServerConfig:
    node_id: str
    data_dir: str
    #: listen addresses and the cluster token: nameserver.defaults (loopback by default)
    listen_client: str = defaults.LISTEN_CLIENT
    listen_peer: str = defaults.LISTEN_PEER
    listen_remoting: str = defaults.LISTEN_REMOTING
    listen_metrics: str = defaults.LISTEN_METRICS
    initial_cluster: dict[str, str] = field(default_factory=dict)  # id -> peer host:port
    cluster_password: str | None = None
    cluster_token: str = defaults.CLUSTER_TOKEN  # etcd's --initial-cluster-token: the cluster id
    #: client addresses to advertise, comma-separated (etcd's --advertise-client-urls); the
    #: first is where the other members forward to, ``metaledger status`` tries each in
    #: order (docker-compose.yml: the container's name, then the host's published port).
    #: "" = listen_client
    advertise_client: str = ""
    propose_timeout_ms: int = 5000
    #: the consensus engine: "native" (raftlog.native.engine: fsynced log, own transport)
    #: or "pysyncobj" (PySyncObj 0.3.17; its journal is never fsynced)
    consensus: str = "native"
    #: where the native engine runs: "shared" = on the gRPC event loop, applying commits
    #: right there (no thread hand-off per consensus item; the Raft log's fdatasync runs
    #: on that loop), or "thread" = a thread and loop of its own plus an apply thread
    consensus_loop: str = "shared"
    #: etcd's --force-new-cluster (native engine): start as the only member, from this
    #: member's data, after the cluster lost its quorum for good
    force_new_cluster: bool = False
    #: under load, a consensus item gathers requests before it is proposed (group commit)
    #: for 0.11 ms per request waiting at once, at least 3 ms, at most this
    #: (raftlog.log.group_commit.WINDOW_PER_REQUEST_S; 0 = propose as soon as the previous item is done).
    #: 3 since the extra gRPC accepts (nameserver.grpc.accept): 3 ms then beat 6 ms at 64
    #: clients in every pair measured; longer windows are for slower request paths
    batch_window_ms: float = 3.0
    #: consensus items proposed and not yet committed at once (pipelining)
    items_in_flight: int = 2
    #: pending gRPC accepts per hot unary method (etcd KV, lease grant/revoke), beside
    #: grpc.aio's one accept loop (nameserver.grpc.accept); 0 = as gRPC ships it
    grpc_acceptors: int = 32
    #: what serves the client gRPC port: "python" (grpc.aio, in this process) or "go" (the
    #: Go front beside the node: nameserver.grpc.front; docs/operations.md)
    grpc_front: str = "python"
    election_timeout_min_ms: int = 1000
    election_timeout_max_ms: int = 2000
    leader_step_down_ms: int = 2000
    segment_max_bytes: int = 64 * 1024 * 1024
    fsync_policy: str = "batch"
    #: change-log segments are derived (re-applied from the Raft log after a crash), so
    #: their group-commit fsync need not be frequent: one per 20 ms costs a quarter of 5
    fsync_interval_ms: int = 20
    snapshot_every_items: int = 20_000  # consensus items between snapshots (0 = never)
    snapshot_every_bytes: int = 64 * 1024 * 1024  # ... or this many bytes of items (0 = no)
    snapshot_keep: int = 2
    snapshot_writer: str = "process"  # process: a forked child writes it (no GIL stall); thread
    segment_retention_s: float = 0.0  # covered segments are deleted once this old ...
    segment_archive_dir: str = ""  # ... or moved here (for metaledger compact)
    max_value_bytes: int = MAX_VALUE_BYTES
    max_request_bytes: int = MAX_REQUEST_BYTES
    max_txn_ops: int = MAX_TXN_OPS
    max_response_bytes: int = MAX_RESPONSE_BYTES
    #: etcd's --quota-backend-bytes: past it, growing writes raise NOSPACE and are refused
    #: (0 = etcd's default, 2 GiB; < 0 = no quota); nameserver.cluster.nospace says what counts
    quota_backend_bytes: int = 0
    use_uvloop: bool = True
    #: progress_notify watchers that got no events for this long get an empty response
    #: with the current revision (etcd's fixed interval is 10 minutes)
    watch_progress_notify_interval_ms: int = 600_000
    #: remoting connections with no traffic this long are closed (RocketMQ's nameserver: 120 s)
    remoting_idle_timeout_ms: int = 120_000
    #: a remoting frame must arrive whole this long after its first byte
    remoting_frame_timeout_ms: int = 30_000
    #: remoting connections open at once; more are closed on accept (fits 1,024 descriptors)
    remoting_max_connections: int = 512
    #: the native engine's Raft peer port: a connection must authenticate within this,
    #: send a frame (members send keepalives) at least this often, complete a frame
    #: within this; at most this many inbound connections at once (more: closed on accept)
    peer_handshake_timeout_ms: int = 5000
    peer_idle_timeout_ms: int = 30_000
    peer_frame_timeout_ms: int = 30_000
    peer_max_connections: int = 64
    #: a member closes its connection to a peer it heard nothing from for this long (or
    #: whose data stays unacknowledged this long: TCP_USER_TIMEOUT) and dials again
    peer_dead_timeout_ms: int = 4000
    #: connections a member keeps to each peer (raftlog.native.config.NativeConfig.peer_paths)
    peer_paths: int = 2
    #: TLS (etcd's flags; nameserver.tls): the client set covers the client gRPC, remoting
    #: and metrics ports, the peer set the native engine's Raft port ("" = plain TCP)
    cert_file: str = ""
    key_file: str = ""
    trusted_ca_file: str = ""
    client_cert_auth: bool = False
    peer_cert_file: str = ""
    peer_key_file: str = ""
    peer_trusted_ca_file: str = ""
    peer_client_cert_auth: bool = False

    @property
    def client_tls(self) -> TlsFiles:
        return TlsFiles(self.cert_file, self.key_file, self.trusted_ca_file, self.client_cert_auth)

    @property
    def peer_tls(self) -> TlsFiles:
        return TlsFiles(
            self.peer_cert_file,
            self.peer_key_file,
            self.peer_trusted_ca_file,
            self.peer_client_cert_auth,
            prefix="peer-",
        )

    #: etcd's --auto-compaction-mode (periodic | revision) and --auto-compaction-retention
    #: ("0" = off; periodic: a duration, "1h", "30m", a bare number of hours; revision: a
    #: count of revisions); run by the leader (nameserver/kv/compactor.py)
    auto_compaction_mode: str = "periodic"
    auto_compaction_retention: str = "0"

    #: etcd's corruption checks (nameserver/cluster/corrupt.py): before serving, compare
    #: this member's HashKV with its peers' and refuse to start on a mismatch
    #: (--experimental-initial-corrupt-check); the leader compares every member's HashKV
    #: this often and raises CORRUPT for one that differs (--experimental-corrupt-check-time,
    #: 0 = never, etcd's default)
    initial_corrupt_check: bool = False
    corrupt_check_time_s: float = 0.0
    #: count the kv store's revision as etcd 3.4 does (only requests that change keys move
    #: it; nameserver/kv/revision.py): the leader switches the store over once every member
    #: can (the default; off with --offset-revisions: every request moves it, as metaledger
    #: counted before, until a leader that has it on switches). A store once switched counts
    #: so for good, whatever this says
    etcd_revisions: bool = True
    #: TESTS ONLY: "KEY=VALUE" sets an existing key's value in this member's restored image
    #: behind the log's back (a member whose state differs, for the corruption checks'
    #: tests); "" (the default) never touches the image
    debug_corrupt_kv: str = ""

    #: auth (nameserver/auth, docs/auth.md): etcd's --auth-token ("simple", or
    #: "jwt,sign-method=HS256|RS256|ES256,priv-key=F,pub-key=F,ttl=5m"), --auth-token-ttl
    #: (simple tokens, seconds) and --bcrypt-cost (password hashing work factor)
    auth_token: str = "simple"
    auth_token_ttl_s: int = 300
    bcrypt_cost: int = 10

    @property
    def client_url(self) -> str:
        """The first advertised client URL: where the other members reach this node."""
        return self.client_urls[0]

    @property
    def client_urls(self) -> tuple[str, ...]:
        scheme = "https://" if self.cert_file else "http://"
        given = [a.strip() for a in self.advertise_client.split(",") if a.strip()]
        return tuple(scheme + a for a in given or [self.listen_client])

    @property
    def peers(self) -> dict[str, str]:
        return self.initial_cluster or {self.node_id: self.listen_peer}

    def validate(self) -> None:
        if not self.node_id:
            raise ConfigError("node_id", "must not be empty (--id)")
        if not self.data_dir:
            raise ConfigError("data_dir", "must not be empty (--data-dir)")
        _split_hostport("listen_client", self.listen_client)
        _split_hostport("listen_remoting", self.listen_remoting)
        _split_hostport("listen_metrics", self.listen_metrics)
        _split_hostport("listen_peer", self.listen_peer)
        for url in self.client_urls:
            _split_hostport("advertise_client", url)
        peers = self.peers
        if self.node_id not in peers:
            raise ConfigError("initial_cluster", f"does not list this node {self.node_id!r}")
        if peers[self.node_id] != self.listen_peer:
            raise ConfigError(
                "initial_cluster",
                f"lists {self.node_id}={peers[self.node_id]} but --listen-peer is {self.listen_peer}",
            )
        if self.consensus not in ("native", "pysyncobj"):
            raise ConfigError("consensus", f"{self.consensus!r}: must be native or pysyncobj")
        if self.force_new_cluster and self.consensus != "native":
            raise ConfigError("force_new_cluster", "needs the native consensus engine")
        if self.consensus_loop not in ("shared", "thread"):
            raise ConfigError(
                "consensus_loop", f"{self.consensus_loop!r}: must be shared or thread"
            )
        if not 1 <= self.items_in_flight <= 64:
            raise ConfigError("items_in_flight", "must be between 1 and 64")
        if not 0 <= self.grpc_acceptors <= 64:
            raise ConfigError("grpc_acceptors", "must be between 0 and 64")
        if self.grpc_front not in GRPC_FRONTS:
            raise ConfigError("grpc_front", f"{self.grpc_front!r}: must be python or go")
        if not 0 <= self.batch_window_ms <= 1000:
            raise ConfigError("batch_window_ms", "must be between 0 and 1000")
        if self.propose_timeout_ms <= 0:
            raise ConfigError("propose_timeout_ms", "must be > 0")
        if self.fsync_policy not in ("batch", "always", "never"):
            raise ConfigError("fsync_policy", "must be batch, always or never")
        if self.max_value_bytes <= 0 or self.max_request_bytes < self.max_value_bytes:
            raise ConfigError("max_request_bytes", "must be >= max_value_bytes > 0")
        if self.snapshot_every_items < 0:
            raise ConfigError("snapshot_every_items", "must be >= 0 (0 = never)")
        if self.snapshot_every_bytes < 0:
            raise ConfigError("snapshot_every_bytes", "must be >= 0 (0 = no byte trigger)")
        if self.segment_retention_s < 0:
            raise ConfigError("segment_retention_s", "must be >= 0")
        if self.snapshot_keep < 1:
            raise ConfigError("snapshot_keep", "must be >= 1")
        if self.snapshot_writer not in SNAPSHOT_WRITERS:
            raise ConfigError(
                "snapshot_writer",
                f"must be one of {', '.join(SNAPSHOT_WRITERS)}, not {self.snapshot_writer!r}",
            )
        if self.max_txn_ops <= 0:
            raise ConfigError("max_txn_ops", "must be > 0")
        if not 0 < self.max_response_bytes <= MAX_RESPONSE_BYTES:
            raise ConfigError(
                "max_response_bytes",
                f"must be > 0 and at most {MAX_RESPONSE_BYTES} (gRPC's send limit less 64 KiB)",
            )
        if self.watch_progress_notify_interval_ms <= 0:
            raise ConfigError("watch_progress_notify_interval_ms", "must be > 0")
        for name in ("remoting_idle_timeout_ms", "remoting_frame_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(name, "must be > 0")
        if self.remoting_max_connections < 1:
            raise ConfigError("remoting_max_connections", "must be >= 1")
        for name in (
            "peer_handshake_timeout_ms",
            "peer_idle_timeout_ms",
            "peer_frame_timeout_ms",
            "peer_max_connections",
            "peer_dead_timeout_ms",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(name, "must be > 0")
        if not 1 <= self.peer_paths <= 4:
            raise ConfigError("peer_paths", f"must be 1 to 4, not {self.peer_paths}")
        peer_tls = self.peer_tls
        if self.consensus == "pysyncobj" and (peer_tls.enabled or peer_tls.trusted_ca_file):
            raise ConfigError(
                "peer_cert_file",
                "peer TLS (--peer-cert-file ...) needs the native consensus engine: "
                "pysyncobj's peer transport is plain TCP (drop --consensus pysyncobj)",
            )
        check_tls(self.client_tls)
        check_tls(peer_tls)
        if self.auto_compaction_mode not in AUTO_COMPACTION_MODES:
            raise ConfigError(
                "auto_compaction_mode",
                f"must be periodic or revision, not {self.auto_compaction_mode!r}",
            )
        try:
            parse_auto_compaction_retention(
                self.auto_compaction_mode, self.auto_compaction_retention
            )
        except ValueError as exc:
            raise ConfigError("auto_compaction_retention", str(exc)) from None
        if self.corrupt_check_time_s < 0:
            raise ConfigError("corrupt_check_time_s", "must be >= 0 (0 = no periodic check)")
        if self.debug_corrupt_kv and "=" not in self.debug_corrupt_kv:
            raise ConfigError("debug_corrupt_kv", "must be KEY=VALUE")
        _validate_auth(self)
        # last, so a test of any other field needs no password
        if not self.cluster_password:
            raise ConfigError(
                "cluster_password",
                "required: the Raft peer port always authenticates, loopback included; give "
                "--cluster-password-file PATH (a file holding it) or set "
                "METALEDGER_CLUSTER_PASSWORD (`metaledger cluster up` makes one per cluster)",
            )


AUTO_COMPACTION_MODES = ("periodic", "revision")


def parse_auto_compaction_retention(mode: str, text: str) -> float:
    """etcd's --auto-compaction-retention (embed/etcd.go parseCompactionRetention): a bare
    integer is hours (periodic) or revisions (revision); periodic also takes a Go duration
    ("1h30m", "10m", "5s"). Seconds (periodic) or revisions; 0 = off. ValueError if bad."""
    text = text.strip()
    if text.isdigit():
        n = int(text)
        return float(n * 3600 if mode == "periodic" else n)
    if mode == "revision":
        raise ValueError(f"{text!r} is not a number of revisions (revision mode)")
    try:
        return parse_go_duration(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a duration (e.g. 1h, 30m, 90s) or a number of hours"
        ) from None


def _validate_auth(config: ServerConfig) -> None:
    from nameserver.auth.passwords import MAX_COST, MIN_COST
    from nameserver.auth.tokens import provider
    from nameserver.errors import InvalidArgument

    try:
        provider(config.auth_token)  # the spec, and the key files it names, read and parsed
    except InvalidArgument as exc:
        raise ConfigError("auth_token", str(exc).removeprefix("auth-token: ")) from None
    except (OSError, ValueError, TypeError) as exc:  # a key file missing, or not a PEM key
        raise ConfigError("auth_token", f"cannot load the key: {exc}") from None
    if config.auth_token_ttl_s <= 0:
        raise ConfigError("auth_token_ttl_s", "must be > 0 (--auth-token-ttl, seconds)")
    if not MIN_COST <= config.bcrypt_cost <= MAX_COST:
        raise ConfigError("bcrypt_cost", f"must be between {MIN_COST} and {MAX_COST}")
