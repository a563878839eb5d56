"""``metaledger serve``: run one metadata node until SIGINT/SIGTERM.

Flags map one to one onto :class:`nameserver.config.ServerConfig` fields; a flag not given
keeps the dataclass default, and the listen addresses' and the cluster token's defaults are
:mod:`nameserver.defaults` (loopback: client 9877, peer 9878, remoting 9876, metrics 9879),
which the help prints. A node left at the default ``--initial-cluster-token`` logs a WARNING
once it serves (:func:`nameserver.startup.warn_default_token`): its cluster id is every such
cluster's.
A :class:`raftlog.ConfigError` exits with USAGE and names the field. A node that cannot
start (a port in use, a data dir that cannot be used or is another node's or cluster's,
an unreadable password file: :mod:`nameserver.startup`) prints one line
``metaledger: serve: <what>: <why>`` and exits with CANNOT_START; any other failure prints
one line too. The traceback is printed only with ``--log-level DEBUG``.

The Raft peer port always authenticates: the cluster password comes from
``--cluster-password-file PATH`` (what ``cluster up`` passes), ``--cluster-password`` or
the ``METALEDGER_CLUSTER_PASSWORD`` environment variable, in that order; without one the
node refuses to start.

TLS takes etcd's flags (docs/tls.md, :mod:`nameserver.tls`): ``--cert-file``, ``--key-file``,
``--trusted-ca-file``, ``--client-cert-auth`` for the client gRPC, remoting and metrics
ports; the same with ``--peer-`` for the Raft port (native engine only). A file that cannot
be used is a configuration error naming the flag (exit USAGE).
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import sys
import traceback
from typing import TYPE_CHECKING, Any

from nameserver import defaults
from nameserver.cli.exitcodes import ExitCode

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers
    from nameserver.config import ServerConfig

PASSWORD_ENV = "METALEDGER_CLUSTER_PASSWORD"
#: Set by ``cluster up``: the node stops when that process goes away (Linux).
PARENT_PID_ENV = "METALEDGER_PARENT_PID"
#: Default of ``--consensus`` (so ``cluster up`` and test clusters can pick the engine).
CONSENSUS_ENV = "METALEDGER_CONSENSUS"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

#: flag dest → ServerConfig field, for the flags that default to the dataclass's own default.
_OPTIONAL_FIELDS = {
    "listen_client": "listen_client",
    "listen_peer": "listen_peer",
    "listen_remoting": "listen_remoting",
    "listen_metrics": "listen_metrics",
    "advertise_client": "advertise_client",
    "fsync_policy": "fsync_policy",
    "initial_cluster_token": "cluster_token",
    "snapshot_every_items": "snapshot_every_items",
    "snapshot_keep": "snapshot_keep",
    "snapshot_writer": "snapshot_writer",
    "snapshot_every_bytes": "snapshot_every_bytes",
    "segment_retention_s": "segment_retention_s",
    "segment_archive_dir": "segment_archive_dir",
    "segment_max_bytes": "segment_max_bytes",
    "watch_progress_notify_interval_ms": "watch_progress_notify_interval_ms",
    "batch_window_ms": "batch_window_ms",
    "consensus": "consensus",
    "items_in_flight": "items_in_flight",
    "consensus_loop": "consensus_loop",
    "grpc_acceptors": "grpc_acceptors",
    "grpc_front": "grpc_front",
    "max_response_bytes": "max_response_bytes",
    "quota_backend_bytes": "quota_backend_bytes",
    "remoting_idle_timeout_ms": "remoting_idle_timeout_ms",
    "remoting_frame_timeout_ms": "remoting_frame_timeout_ms",
    "remoting_max_connections": "remoting_max_connections",
    "peer_handshake_timeout_ms": "peer_handshake_timeout_ms",
    "peer_idle_timeout_ms": "peer_idle_timeout_ms",
    "peer_frame_timeout_ms": "peer_frame_timeout_ms",
    "peer_max_connections": "peer_max_connections",
    "peer_dead_timeout_ms": "peer_dead_timeout_ms",
    "peer_paths": "peer_paths",
    "cert_file": "cert_file",
    "key_file": "key_file",
    "trusted_ca_file": "trusted_ca_file",
    "peer_cert_file": "peer_cert_file",
    "peer_key_file": "peer_key_file",
    "peer_trusted_ca_file": "peer_trusted_ca_file",
    "auto_compaction_mode": "auto_compaction_mode",
    "auto_compaction_retention": "auto_compaction_retention",
    "auth_token": "auth_token",
    "corrupt_check_time": "corrupt_check_time_s",
    "debug_corrupt_kv": "debug_corrupt_kv",
    "auth_token_ttl": "auth_token_ttl_s",
    "bcrypt_cost": "bcrypt_cost",
}


def build_config(args: argparse.Namespace) -> ServerConfig:
    """ServerConfig from parsed ``serve`` flags (not validated yet; may raise ConfigError)."""
    from nameserver.config import ServerConfig, parse_initial_cluster

    kwargs: dict[str, Any] = {"node_id": args.node_id, "data_dir": args.data_dir}
    for dest, name in _OPTIONAL_FIELDS.items():
        value = getattr(args, dest)
        if value is not None:
            kwargs[name] = value
    if args.consensus is None and os.environ.get(CONSENSUS_ENV):
        kwargs["consensus"] = os.environ[CONSENSUS_ENV]
    if args.initial_cluster:
        kwargs["initial_cluster"] = parse_initial_cluster(args.initial_cluster)
    if args.force_new_cluster:
        kwargs["force_new_cluster"] = True
    for flag in (
        "client_cert_auth",
        "peer_client_cert_auth",
        "initial_corrupt_check",
    ):
        if getattr(args, flag):
            kwargs[flag] = True
    if args.offset_revisions:
        kwargs["etcd_revisions"] = False
    password = args.cluster_password
    if password is None and args.cluster_password_file:
        from raftlog.native.auth import read_password_file

        password = read_password_file(args.cluster_password_file)
    if password is None:
        password = os.environ.get(PASSWORD_ENV)
    if password:
        kwargs["cluster_password"] = password
    return ServerConfig(**kwargs)


def _die_with_parent() -> bool:
    """Under ``cluster up``, ask Linux to SIGTERM this node when the parent dies (even by
    SIGKILL). False if the parent is already gone."""
    parent = os.environ.get(PARENT_PID_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return True
    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return True
    return str(os.getppid()) == parent  # else the parent died before prctl took effect


def _fail(args: argparse.Namespace, message: str, code: ExitCode) -> int:
    """Print ``metaledger: serve: <message>``; the traceback too under --log-level DEBUG."""
    if args.log_level == "DEBUG" and sys.exc_info()[0] is not None:
        traceback.print_exc()
    print(f"metaledger: serve: {message}", file=sys.stderr)
    return code


def run_serve(args: argparse.Namespace) -> int:
    from raftlog import ConfigError

    try:
        config = build_config(args)
        config.validate()
    except ConfigError as exc:
        if exc.field == "cluster_password_file":  # a file that cannot be read
            why = str(exc).removeprefix(f"{exc.field}: ")
            return _fail(args, f"{why} (--cluster-password-file)", ExitCode.CANNOT_START)
        print(f"metaledger: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s [%(name)s] " + config.node_id + ": %(message)s",
    )
    if not _die_with_parent():
        print(
            f"metaledger: parent {os.environ[PARENT_PID_ENV]} is gone; not starting",
            file=sys.stderr,
        )
        return ExitCode.ERROR
    from nameserver import server
    from nameserver.startup import StartupError
    from raftlog import RaftLogError

    try:
        return server.run(config)
    except StartupError as exc:  # a port in use, a data dir that is not this node's, ...
        return _fail(args, str(exc), ExitCode.CANNOT_START)
    except (RaftLogError, OSError) as exc:  # e.g. a corrupt segment, an unreadable file
        return _fail(args, f"node {config.node_id} cannot start: {exc}", ExitCode.ERROR)
    except Exception as exc:  # a bug: still one line, the traceback with --log-level DEBUG
        why = f"{type(exc).__name__}: {exc}"
        return _fail(args, f"node {config.node_id} failed: {why}", ExitCode.ERROR)


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("serve", help="run one metadata node")
    p.add_argument("--id", dest="node_id", required=True, help="this node's id")
    p.add_argument("--data-dir", required=True, help="where the node keeps its data")
    for flag, what, default in (
        ("--listen-client", "gRPC client API", defaults.LISTEN_CLIENT),
        ("--listen-peer", "Raft peers", defaults.LISTEN_PEER),
        ("--listen-remoting", "RocketMQ remoting", defaults.LISTEN_REMOTING),
        ("--listen-metrics", "metrics HTTP", defaults.LISTEN_METRICS),
    ):
        port = default.rpartition(":")[2]
        p.add_argument(
            flag,
            metavar="HOST:PORT",
            help=f"{what} (default {default}: this machine only; 0.0.0.0:{port} for other hosts)",
        )
    p.add_argument(
        "--initial-cluster",
        metavar="ID=HOST:PEERPORT,...",
        help="every member's peer address (default: this node alone)",
    )
    secret = p.add_mutually_exclusive_group()
    secret.add_argument(
        "--cluster-password-file",
        metavar="PATH",
        help="a file holding the Raft peer port's password (required, loopback included: "
        f"this, --cluster-password or env {PASSWORD_ENV}; `cluster up` makes one per cluster)",
    )
    secret.add_argument(
        "--cluster-password",
        metavar="PASSWORD",
        help="the Raft peer port's password on the command line (visible to `ps`: prefer "
        "--cluster-password-file)",
    )
    p.add_argument(
        "--advertise-client",
        metavar="HOST:PORT[,HOST:PORT]",
        help="client addresses to advertise (default --listen-client): the first is where "
        "the other members forward to; `metaledger status` tries each in order",
    )
    p.add_argument("--fsync-policy", help="batch (default), always or never")
    p.add_argument(
        "--snapshot-every-items",
        type=int,
        metavar="N",
        help="take a snapshot (and compact the Raft log) every N consensus items (default 20000; 0 = never)",
    )
    p.add_argument("--snapshot-keep", type=int, metavar="N", help="snapshots kept (default 2)")
    p.add_argument(
        "--auto-compaction-mode",
        choices=("periodic", "revision"),
        help="etcd's: what --auto-compaction-retention counts (default periodic)",
    )
    p.add_argument(
        "--auto-compaction-retention",
        metavar="R",
        help="etcd's: kv history kept; periodic: a duration (1h, 30m; a bare number is hours), "
        "revision: a count of revisions (default 0 = no automatic compaction)",
    )
    p.add_argument(
        "--snapshot-writer",
        choices=("process", "thread"),
        help="write snapshots from a forked child process (default: no commit stalls) or a thread",
    )
    p.add_argument(
        "--snapshot-every-bytes",
        type=int,
        metavar="B",
        help="also snapshot after B bytes of consensus items (default 64 MiB; 0 = no)",
    )
    p.add_argument(
        "--segment-retention-s",
        type=float,
        metavar="S",
        help="keep change-log segments covered by every kept snapshot S seconds (default 0)",
    )
    p.add_argument(
        "--segment-archive-dir",
        metavar="DIR",
        help="move covered change-log segments here instead of deleting them (for compact)",
    )
    p.add_argument(
        "--segment-max-bytes",
        type=int,
        metavar="B",
        help="roll change-log segments at B bytes (default 64 MiB)",
    )
    p.add_argument(
        "--watch-progress-notify-interval-ms",
        type=int,
        metavar="MS",
        help="progress notifications to idle progress_notify watchers every MS (default 600000)",
    )
    p.add_argument(
        "--consensus",
        help=f"consensus engine: native (default; fsynced Raft log) or pysyncobj (env {CONSENSUS_ENV})",
    )
    p.add_argument(
        "--consensus-loop",
        choices=("shared", "thread"),
        help="native engine on the gRPC event loop (shared, default) or its own thread",
    )
    p.add_argument(
        "--force-new-cluster",
        action="store_true",
        help="disaster recovery (as etcd's): start as the only member from this member's "
        "data, after the cluster lost its quorum for good; add the others back with "
        "`member add` from empty data dirs, and restart without this flag",
    )
    p.add_argument(
        "--grpc-acceptors",
        type=int,
        metavar="N",
        help="pending gRPC accepts per hot KV/lease method besides grpc.aio's own one "
        "(default 32; 0 = one accept loop, as gRPC ships it)",
    )
    p.add_argument(
        "--grpc-front",
        choices=("python", "go"),
        help="what serves --listen-client: python (grpc.aio, the default) or go (the Go "
        "front beside the node, built by scripts/build_front.sh; TLS flags as with python; "
        "docs/operations.md)",
    )
    p.add_argument(
        "--offset-revisions",
        action="store_true",
        help="do not switch the kv store to etcd 3.4's revision count (by default the leader "
        "switches it, for good, once every member runs a version that can: then only requests "
        "that change keys move the revision; see docs/semantics.md): every request moves it, "
        "as metaledger counted before. A store already switched stays switched",
    )
    p.add_argument(
        "--experimental-etcd-revisions",
        action="store_true",
        help="accepted for scripts written before it was the default; does nothing",
    )
    p.add_argument(
        "--experimental-initial-corrupt-check",
        dest="initial_corrupt_check",
        action="store_true",
        help="etcd's: before serving, compare this member's kv hash with its peers' at its "
        "revision and refuse to start if one differs",
    )
    p.add_argument(
        "--experimental-corrupt-check-time",
        dest="corrupt_check_time",
        type=_duration_s,
        metavar="DURATION",
        help="etcd's: the leader compares every member's kv hash this often (1m, 30s) and "
        "raises the CORRUPT alarm for one that differs; writes are refused until "
        "`etcdctl alarm disarm` (default 0: never)",
    )
    p.add_argument(
        "--debug-corrupt-kv",
        metavar="KEY=VALUE",
        help="TESTS ONLY: change an existing key's value in this member's image when it "
        "starts, behind the log's back (to test the corruption checks)",
    )
    p.add_argument(
        "--quota-backend-bytes",
        type=int,
        metavar="B",
        help="etcd's backend quota: a write that would take the image past B bytes raises "
        "the NOSPACE alarm and is refused until `etcdctl alarm disarm` (0 = 2 GiB, the "
        "default; negative = no quota)",
    )
    p.add_argument(
        "--max-response-bytes",
        type=int,
        metavar="B",
        help="largest gRPC response built; a read past it gets RESOURCE_EXHAUSTED before "
        "it is built (default and maximum 16 MiB - 64 KiB, gRPC's send limit less slack)",
    )
    p.add_argument(
        "--items-in-flight",
        type=int,
        metavar="N",
        help="consensus items proposed before the first is committed (default 2)",
    )
    p.add_argument(
        "--remoting-idle-timeout-ms",
        type=int,
        metavar="MS",
        help="close remoting connections idle this long (default 120000, as RocketMQ)",
    )
    p.add_argument(
        "--remoting-frame-timeout-ms",
        type=int,
        metavar="MS",
        help="close a remoting connection whose frame is not whole MS after its first byte "
        "(default 30000)",
    )
    p.add_argument(
        "--remoting-max-connections",
        type=int,
        metavar="N",
        help="remoting connections open at once; more are closed on accept (default 512)",
    )
    p.add_argument(
        "--peer-handshake-timeout-ms",
        type=int,
        metavar="MS",
        help="close a Raft peer connection not authenticated MS after accept (default 5000)",
    )
    p.add_argument(
        "--peer-idle-timeout-ms",
        type=int,
        metavar="MS",
        help="close a Raft peer connection with no frame for MS; members send a keepalive "
        "every quarter of it or of --peer-dead-timeout-ms, whichever is shorter (default 30000)",
    )
    p.add_argument(
        "--peer-dead-timeout-ms",
        type=int,
        metavar="MS",
        help="close this member's connection to a peer heard from not once in MS, or whose "
        "data stays unacknowledged MS (TCP_USER_TIMEOUT), and dial again (default 4000)",
    )
    p.add_argument(
        "--peer-paths",
        type=int,
        metavar="N",
        help="connections to keep to each Raft peer (1-4): messages go to one, and to another "
        "once the kernel says the first is stuck (data sent again, nothing acknowledged for "
        "300 ms); under "
        "packet loss one connection's retransmissions can hold every message back for "
        "seconds (default 2)",
    )
    p.add_argument(
        "--peer-frame-timeout-ms",
        type=int,
        metavar="MS",
        help="close a Raft peer connection whose frame is not whole MS after it began "
        "(default 30000)",
    )
    p.add_argument(
        "--peer-max-connections",
        type=int,
        metavar="N",
        help="inbound Raft peer connections at once; more are closed on accept (default 64)",
    )
    p.add_argument(
        "--batch-window-ms",
        type=float,
        metavar="MS",
        help="under load, gather requests up to MS into one consensus item (default 3): the "
        "window grows with the requests waiting, from 1 ms up to MS; 0 = no wait",
    )
    p.add_argument(
        "--initial-cluster-token",
        metavar="TOKEN",
        help="names the cluster; its id derives from it (default "
        f"{defaults.CLUSTER_TOKEN}, with a warning: every cluster left at the default has the "
        "same id; `cluster up` makes one per cluster)",
    )
    _add_tls_flags(p)
    p.add_argument(
        "--auth-token",
        metavar="SPEC",
        help="auth tokens (etcd's format): simple (default) or "
        "jwt,sign-method=HS256|RS256|ES256,priv-key=FILE,pub-key=FILE,ttl=5m",
    )
    p.add_argument(
        "--auth-token-ttl", type=int, metavar="S", help="simple tokens' TTL (default 300)"
    )
    p.add_argument(
        "--bcrypt-cost", type=int, metavar="N", help="password hashing cost (default 10)"
    )
    p.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default="INFO")
    p.set_defaults(run=run_serve)


def _add_tls_flags(p: argparse.ArgumentParser) -> None:
    """etcd's TLS flags (docs/tls.md): the client set covers the client gRPC, remoting and
    metrics ports; the peer set the Raft peer port (native engine only)."""
    tls = p.add_argument_group("TLS (etcd's flags; docs/tls.md)")
    for prefix, ports in (("", "client gRPC, remoting and metrics ports"), ("peer-", "Raft port")):
        tls.add_argument(
            f"--{prefix}cert-file", metavar="PEM", help=f"TLS certificate of the {ports}"
        )
        tls.add_argument(f"--{prefix}key-file", metavar="PEM", help="its private key")
        tls.add_argument(
            f"--{prefix}trusted-ca-file",
            metavar="PEM",
            help=f"CA that signs the certificates {prefix or 'client '}clients present",
        )
        tls.add_argument(
            f"--{prefix}client-cert-auth",
            action="store_true",
            help=f"refuse {prefix or 'client '}connections without a certificate "
            "signed by the trusted CA",
        )


def _duration_s(text: str) -> float:
    """A Go duration flag (etcd's): seconds."""
    from nameserver.checks import parse_go_duration

    try:
        return parse_go_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
