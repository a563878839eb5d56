"""``metaledger broker``, ``metaledger send``, ``metaledger consume`` and ``metaledger message``.

Loaded by ``nameserver.cli`` through the entry-point group ``metaledger.commands``
(``broker = "broker.cli:register"`` in pyproject.toml), so the nameserver never imports the
broker. ``register(subparsers, common)`` adds the three commands; ``common`` (:class:`Common`)
gives the parent parsers of commands that talk to a cluster (``--endpoints``, ``--output``,
``--timeout``, ``--user``/``--password``, ``--cacert``/``--cert``/``--key``) and turns what
they parsed into the :class:`nameserver.client.ConnectionOptions` every client the broker
makes uses: the flags, else ``$METALEDGER_ENDPOINTS`` …, else ``127.0.0.1:9877``, decided in
the client library alone.

``metaledger broker --group NAME --data-dir DIR`` runs one replica until SIGINT/SIGTERM:
the remoting front on ``--listen`` (default ``0.0.0.0:10911``), RocketMQ 5 gRPC on
``--listen-grpc`` (default ``127.0.0.1:8081``), registered in the routes of
``--endpoints`` under ``--cluster``. It prints ``broker NAME serving on ADDR`` once serving.
Send and consume are in :mod:`broker.cli_messages`, ``message get`` in :mod:`broker.cli_lookup`,
``consumer lag`` in :mod:`broker.cli_lag`, ``consume --pop`` in :mod:`broker.cli_pop`, how
they print a message in :mod:`broker.cli_print`. Exit codes are the ``metaledger`` table's
numbers (``nameserver/cli/exitcodes.py``), repeated here because a broker may not import it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import ipaddress
import logging
import signal
import socket
import sys
from collections.abc import Coroutine, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from broker.cli_lag import register_consumer
from broker.cli_lookup import register_lookup
from broker.cli_messages import register_messages
from broker.config import DEFAULT_GRPC_LISTEN, DEFAULT_PORT, BrokerConfig, ConfigError
from broker.store import FlushMode
from broker.transactions.flags import add_transaction_flags, transaction_settings
from nameserver.client import DEFAULT_ENDPOINTS, ConnectionOptions, OptionError

if TYPE_CHECKING:
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_CANNOT_START = 0, 1, 2, 78
#: a record read to be served or replicated failed its checks (EX_SOFTWARE, as the metadata
#: node's corruption exit): the replica leaves so a healthy one takes over (docs/broker.md)
EXIT_DAMAGED = 70


class Common(Protocol):
    """What ``register`` gets from ``nameserver.cli`` (its ``connection.CommonOptions``: this
    package may not import it)."""

    @property
    def parent(self) -> argparse.ArgumentParser:
        """``--endpoints``, ``--output``, ``--timeout``, TLS and auth."""

    def connection(self, args: argparse.Namespace) -> ConnectionOptions:
        """The flags, else the environment, else the defaults; OptionError when unusable."""


def host_port(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: the port must be 1-65535")
    return host.strip("[]") or "0.0.0.0", int(port)


def advertised(host: str) -> str:
    """The IP clients reach this replica at (RocketMQ's brokerIP1: STOREHOST holds an IP): a
    given IP as it is, a host name resolved (``--advertise broker-a-0`` in a container), a
    wildcard this machine's address."""
    if host in ("0.0.0.0", "::", ""):
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        return socket.gethostbyname(host)
    except OSError as exc:
        raise ConfigError(f"advertise: cannot resolve {host!r} to an address: {exc}") from None


def register(subparsers: Subparsers, common: Common) -> None:
    p = subparsers.add_parser(
        "broker",
        parents=[common.parent],
        help="run one RocketMQ-protocol broker replica",
        description="Run one broker replica until SIGINT/SIGTERM: the RocketMQ remoting front on"
        " --listen, registered with its topics in the routes of --endpoints under --cluster.",
    )
    p.add_argument("--group", required=True, metavar="NAME", help="the broker name (replica group)")
    p.add_argument("--data-dir", required=True, metavar="DIR")
    p.add_argument(
        "--listen",
        type=host_port,
        default=("0.0.0.0", DEFAULT_PORT),
        metavar="HOST:PORT",
        help=f"remoting address (default 0.0.0.0:{DEFAULT_PORT})",
    )
    p.add_argument(
        "--advertise",
        metavar="HOST",
        help="the address clients reach (STOREHOST); default the --listen host, or this machine's",
    )
    p.add_argument("--cluster", default="DefaultCluster")
    p.add_argument(
        "--broker-id",
        type=int,
        default=0,
        help="the replica id to ask metaledger for; 0 (default): metaledger assigns one, and"
        " gives a restarted replica its id back. Which replica is master is metaledger's call",
    )
    p.add_argument(
        "--listen-ha",
        type=host_port,
        default=None,
        metavar="HOST:PORT",
        help="HA address slaves connect to (default: the --listen port + 1, where slaves of this"
        " group look for it)",
    )
    p.add_argument(
        "--listen-grpc",
        default=None,
        metavar="HOST:PORT",
        help="RocketMQ 5 gRPC address for 5.x clients (producers of normal messages for now);"
        f" default {DEFAULT_GRPC_LISTEN} (skipped with a warning when taken), 'off' for none",
    )
    p.add_argument(
        "--listen-metrics",
        default="",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (default: off)",
    )
    p.add_argument(
        "--replica-heartbeat-timeout-ms",
        type=int,
        default=10_000,
        metavar="MS",
        help="metaledger declares this replica dead (and elects another master) after this long"
        " without a heartbeat; a master fences itself after it (default 10000)",
    )
    p.add_argument(
        "--slave-timeout-ms",
        type=int,
        default=3000,
        metavar="MS",
        help="SYNC_MASTER: how long a send waits for slaves before FLUSH_SLAVE_TIMEOUT (3000)",
    )
    p.add_argument(
        "--ha-max-time-slave-not-catchup-ms",
        type=int,
        default=15_000,
        metavar="MS",
        help="a slave not caught up this long leaves the in-sync set (default 15000)",
    )
    p.add_argument(
        "--ha-slave-fallbehind-max-bytes",
        type=int,
        default=256 * 1024 * 1024,
        metavar="BYTES",
        help="SYNC_MASTER, inSyncReplicas 1: a slave this far behind is not available"
        " (SLAVE_NOT_AVAILABLE; RocketMQ 4.x haSlaveFallbehindMax, default 256 MiB)",
    )
    p.add_argument("--flush", choices=[m.value for m in FlushMode], default="ASYNC_FLUSH")
    p.add_argument("--broker-role", choices=["ASYNC_MASTER", "SYNC_MASTER"], default="ASYNC_MASTER")
    p.add_argument(
        "--retry-max-times",
        type=int,
        default=16,
        help="a consumer group's retryMaxTimes: reconsumes before the DLQ (default 16)",
    )
    p.add_argument(
        "--fifo-group",
        action="append",
        default=[],
        metavar="GROUP",
        help="a consumer group that consumes in order (RocketMQ's consumeMessageOrderly):"
        " its RocketMQ 5 consumers get FIFO delivery; repeat for more, same on every replica",
    )
    p.add_argument(
        "--message-delay-level",
        default=None,
        metavar="LEVELS",
        help='delay levels, e.g. "1s 5s 10s" (RocketMQ\'s messageDelayLevel)',
    )
    p.add_argument(
        "--timer-max-delay-sec",
        type=int,
        default=3 * 86_400,
        metavar="SECONDS",
        help="timer messages: the furthest delivery time a send may ask for"
        " (RocketMQ's timerMaxDelaySec, default 3 days)",
    )
    p.add_argument(
        "--auto-create-topic",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a send to a topic nobody created creates it, and the default topic TBW102 is"
        " registered for clients to find this broker by (RocketMQ's autoCreateTopicEnable; on"
        " by default as in RocketMQ: turn it off in production)",
    )
    p.add_argument(
        "--slave-read-enable",
        action="store_true",
        help="send consumers that lag more than --slave-read-lag-bytes to an in-sync slave"
        " (RocketMQ slaveReadEnable; off by default)",
    )
    p.add_argument(
        "--slave-read-lag-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="how far behind the commit log's end a consumer must be to read from a slave"
        " (default: 40%% of this machine's RAM, as RocketMQ)",
    )
    p.add_argument(
        "--retention-hours",
        type=float,
        default=72.0,
        metavar="H",
        help="delete closed commit-log segments older than this (RocketMQ fileReservedTime, 72)",
    )
    p.add_argument(
        "--retention-bytes",
        type=int,
        default=0,
        metavar="BYTES",
        help="also delete the oldest closed segments while the commit log is bigger (0: no limit)",
    )
    p.add_argument(
        "--retention-check-interval-ms",
        type=int,
        default=60_000,
        metavar="MS",
        help="how often retention runs (60000)",
    )
    p.add_argument(
        "--max-transfer-count",
        type=int,
        default=32,
        metavar="N",
        help="most messages in one pull answer (RocketMQ maxTransferCountOnMessageInMemory, 32)",
    )
    p.add_argument(
        "--max-transfer-bytes",
        type=int,
        default=256 * 1024,
        metavar="BYTES",
        help="most bytes in one pull answer (maxTransferBytesOnMessageInMemory, 256 KiB)",
    )
    p.add_argument(
        "--segment-size-bytes",
        type=int,
        default=1024 * 1024 * 1024,
        metavar="BYTES",
        help="commit-log segment file size (RocketMQ mappedFileSizeCommitLog, 1 GiB)",
    )
    p.add_argument(
        "--pop-auto-renew-invisible-ms",
        type=int,
        default=60_000,
        metavar="MS",
        help="invisible time of a RocketMQ 5 auto_renew receive (push consumers), renewed"
        " until acked (60000)",
    )
    add_transaction_flags(p)
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(run=partial(run_broker, common=common))
    register_messages(subparsers, common.parent, common.connection)
    register_lookup(subparsers, common.parent, common.connection)
    register_consumer(subparsers, common.parent, common.connection)


def build_config(
    args: argparse.Namespace, endpoints: Sequence[str] = (DEFAULT_ENDPOINTS,)
) -> BrokerConfig:
    """The replica's config from its flags; ``endpoints``: the connection's."""
    host, port = args.listen
    kw: dict[str, Any] = {}
    if args.slave_read_lag_bytes is not None:
        kw["slave_read_lag_bytes"] = args.slave_read_lag_bytes
    if args.message_delay_level:
        kw["message_delay_levels"] = args.message_delay_level
    return BrokerConfig(
        broker_name=args.group,
        data_dir=args.data_dir,
        cluster=args.cluster,
        broker_id=args.broker_id,
        listen_host=host,
        listen_port=port,
        advertised_host=advertised(args.advertise or host),
        flush_mode=FlushMode(args.flush),
        broker_role=args.broker_role,
        endpoints=tuple(endpoints),
        retry_max_times=args.retry_max_times,
        fifo_groups=tuple(args.fifo_group),
        pop_auto_renew_invisible_ms=args.pop_auto_renew_invisible_ms,
        timer_max_delay_sec=args.timer_max_delay_sec,
        auto_create_topic=args.auto_create_topic,
        slave_read_enable=args.slave_read_enable,
        retention_hours=args.retention_hours,
        retention_bytes=args.retention_bytes,
        retention_check_interval_ms=args.retention_check_interval_ms,
        segment_size_bytes=args.segment_size_bytes,
        max_transfer_count=args.max_transfer_count,
        max_transfer_bytes=args.max_transfer_bytes,
        ha_host=args.listen_ha[0] if args.listen_ha else "",
        ha_port=args.listen_ha[1] if args.listen_ha else 0,
        metrics_listen=args.listen_metrics,
        grpc_listen="" if args.listen_grpc == "off" else (args.listen_grpc or DEFAULT_GRPC_LISTEN),
        grpc_listen_is_default=args.listen_grpc is None,
        replica_heartbeat_timeout_ms=args.replica_heartbeat_timeout_ms,
        slave_timeout_ms=args.slave_timeout_ms,
        ha_max_time_slave_not_catchup_ms=args.ha_max_time_slave_not_catchup_ms,
        ha_slave_fallbehind_max_bytes=args.ha_slave_fallbehind_max_bytes,
        **transaction_settings(args),
        **kw,
    ).validate()


def run_broker(args: argparse.Namespace, common: Common) -> int:
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        connection = common.connection(args)
        config = build_config(args, connection.endpoints)
    except (ConfigError, OptionError) as exc:
        print(f"metaledger: broker: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _run(_serve(config, connection))


async def _check_access(client: Any, config: BrokerConfig) -> None:
    """Say once, at ERROR, when metaledger refuses this broker's credentials (auth on and no
    ``--user``, a wrong password, a role without the group's keys): the replica keeps
    running and retrying (an operator may fix the user), and its loops log each refusal."""
    from nameserver.client import ClientError, InvalidArgument, PermissionDenied, Unauthenticated

    if not config.endpoints:
        return
    try:
        await asyncio.to_thread(client.replica_group, config.broker_name)
    except (InvalidArgument, PermissionDenied, Unauthenticated) as exc:
        name = config.broker_name
        logging.getLogger("broker").error(
            "metaledger refused this broker (%s): give --user NAME:PASSWORD of a user whose"
            " role has readwrite on /_metaledger/broker/%s, /_metaledger/replica_group/%s and"
            " the prefix /brokers/%s/, read on the prefix /_metaledger/topic/ (docs/auth.md);"
            " retrying",
            exc.message,
            name,
            name,
            name,
        )
    except ClientError:  # a new group (NotFound), unreachable: the replica's loops say so
        return


#: Allocations between young-generation collections (CPython's default is 700). A send
#: allocates a few dozen objects (its frame, header, message, futures, answer) that live for
#: its few milliseconds: at 700 a young collection ran every ~20 sends with most of them
#: still alive, and the full ones walked every object imported at start-up. At 50,000 most
#: die first (the nameserver's and the replicators' setting; measured in the commit).
GC_THRESHOLD = (50_000, 20, 100)


def tune_gc() -> None:
    """After start-up: move what exists (imports, the recovered store's tables) out of the
    collector's generations, and collect young objects less often."""
    gc.collect(1)
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def _run(main: Coroutine[Any, Any, int]) -> int:
    """Run the broker on uvloop (as the nameserver does): its transports and call_soon cost
    a fraction of the standard loop's, and the send path is event-loop bound."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a dependency; the standard loop also works
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


async def _serve(config: BrokerConfig, connection: ConnectionOptions) -> int:
    """Serve until a signal; ``connection``: where metaledger is and as whom (``--user``,
    ``--cacert`` …)."""
    from broker.replica import Replica
    from nameserver.client import ClientError

    try:
        client = connection.connect(list(config.endpoints))
    except (ClientError, OSError, ValueError) as exc:
        print(f"metaledger: broker: cannot connect to metaledger: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        replica = Replica(config, client=client)
    except OSError as exc:
        print(f"metaledger: broker: cannot open {config.data_dir}: {exc}", file=sys.stderr)
        return EXIT_CANNOT_START
    try:
        await replica.start()
    except OSError as exc:
        print(
            f"metaledger: broker: cannot listen on {config.listen_host}:{config.listen_port}"
            f" (or gRPC {config.grpc_listen}): {exc}",
            file=sys.stderr,
        )
        await replica.stop()
        return EXIT_CANNOT_START
    tune_gc()
    print(f"broker {config.broker_name} serving on {config.address}", flush=True)
    access = asyncio.ensure_future(_check_access(client, config))  # in the background
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    damaged: list[Exception] = []

    def on_damage(exc: Exception) -> None:  # from the loop or a reader thread
        damaged.append(exc)
        loop.call_soon_threadsafe(stop.set)

    replica.store.guard.on_damage = on_damage
    if replica.store.guard.damaged is not None:  # found before it was wired
        on_damage(replica.store.guard.damaged)
    await stop.wait()
    access.cancel()
    await replica.stop()
    with contextlib.suppress(Exception):
        client.close()
    if damaged:
        print(f"metaledger: broker: stopped, store damaged: {damaged[0]}", file=sys.stderr)
        return EXIT_DAMAGED
    return EXIT_OK
