"""``metaledger replicate rocketmq`` and ``metaledger replicate translate`` (registered by
:mod:`replicator.cli`), and the per-queue rows ``replicate status`` shows for RocketMQ jobs.

    metaledger replicate rocketmq --source-namesrv HOST:PORT --dest-namesrv HOST:PORT
        (--topics T1,T2 | --topic-pattern REGEX) --job NAME [--rename SRC=DST ...]
        [--queue-map same|hash] [--dismiss none|log] [--rate N] [--max-in-flight N]
        [--groups G1,G2 [--sync-group-offsets]] [--heartbeat-interval S]
        [--listen-metrics HOST:PORT]
    metaledger replicate translate --job NAME --group G --source-namesrv … --dest-namesrv …
        [--write]

``rocketmq`` runs one worker until SIGINT/SIGTERM (exit 0), 2 on a bad option. ``translate``
prints, per destination queue, where the group resumes (exit 0), 3 when metaledger or a
cluster does not answer (or a stored checkpoint is unreadable), 4 when the job has committed
nothing of a topic the group consumes (has a source offset for).
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from typing import TYPE_CHECKING, Any

from nameserver.client import ConnectionOptions, OptionError

if TYPE_CHECKING:
    from replicator.cli_common import Common

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["queue_rows", "register"]

EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_NOT_FOUND = 0, 2, 3, 4
SECRET_KEY_ENV = "METALEDGER_SECRET_KEY"

#: status rows for RocketMQ jobs: one per source queue
QUEUE_COLUMNS = (
    ("JOB", "job"),
    ("WORKER", "worker"),
    ("QUEUE", "partition"),
    ("SOURCE_OFFSET", "max_offset"),
    ("PULLED", "pulled_offset"),
    ("COMMITTED", "committed_offset"),
    ("LAG_MSGS", "lag_messages"),
    ("LAG_S", "lag_s"),
    ("DISMISSED", "dismissed"),
)


def _csv(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _rename(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        src, sep, dst = item.partition("=")
        if not sep:
            raise ValueError(f"--rename {item!r}: SOURCE=DEST")
        out[src.strip()] = dst.strip()
    return out


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source-namesrv", required=True, metavar="HOST:PORT[;HOST:PORT]")
    p.add_argument("--dest-namesrv", required=True, metavar="HOST:PORT[;HOST:PORT]")
    p.add_argument("--job", required=True, metavar="NAME")


def _acl_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--access-key",
        default="",
        metavar="AK",
        help="RocketMQ ACL 1.0: sign requests to the destination's nameserver as this access key"
        " (a metaledger user with a secret key: `metaledger user set-secret-key`)",
    )
    p.add_argument(
        "--secret-key",
        default=None,
        metavar="SK",
        help=f"the access key's secret key (env {SECRET_KEY_ENV})",
    )


def _tls_args(p: argparse.ArgumentParser) -> None:
    for side in ("source", "dest"):
        p.add_argument(
            f"--{side}-namesrv-tls",
            action="store_true",
            help=f"reach the {side} nameserver's remoting port over TLS (a metaledger node under"
            " --cert-file), trusting --cacert and presenting --cert/--key",
        )


def _secret_key(args: argparse.Namespace) -> str:
    return str(getattr(args, "secret_key", None) or os.environ.get(SECRET_KEY_ENV, ""))


def register(sub: Subparsers, common: Common) -> None:
    r = sub.add_parser(
        "rocketmq",
        parents=[common.parent],
        help="replicate topics from one RocketMQ cluster to another (at least once)",
        description="Run one worker of a RocketMQ replication job until SIGINT/SIGTERM. The"
        " job's source queues are spread over its live workers; offsets, leases and status"
        " live in metaledger (--endpoints).",
    )
    _cluster_args(r)
    r.add_argument("--topics", default="", metavar="T1,T2", help="source topics to replicate")
    r.add_argument("--topic-pattern", default="", metavar="REGEX", help="or: a full-match regex")
    r.add_argument("--rename", action="append", default=[], metavar="SRC=DST")
    r.add_argument("--queue-map", choices=("same", "hash"), default="same")
    r.add_argument("--source-cluster", default="", metavar="NAME")
    r.add_argument("--dest-cluster", default="", metavar="NAME")
    r.add_argument("--worker", default="", help="this worker's name (default host:pid)")
    r.add_argument("--lease-ttl", type=int, default=10, metavar="SECONDS")
    r.add_argument("--dismiss", choices=("none", "log"), default="none")
    r.add_argument("--on-offset-lost", choices=("earliest", "stop"), default="earliest")
    r.add_argument("--include-retry", action="store_true")
    r.add_argument("--include-dlq", action="store_true")
    r.add_argument("--max-in-flight", type=int, default=4096, metavar="N")
    r.add_argument("--rate", type=float, default=0.0, metavar="MSGS_PER_S", help="0: no limit")
    r.add_argument(
        "--pull-batch",
        type=int,
        default=256,
        metavar="N",
        help="messages asked for per pull (a broker caps it: RocketMQ's default is 32)",
    )
    r.add_argument(
        "--offset-sync-every",
        type=int,
        default=100,
        metavar="N",
        help="an offset-sync at least every N source offsets (translation precision)",
    )
    r.add_argument("--commit-interval", type=float, default=1.0, metavar="SECONDS")
    r.add_argument("--refresh-interval", type=float, default=5.0, metavar="SECONDS")
    r.add_argument("--heartbeat-interval", type=float, default=10.0, metavar="SECONDS")
    r.add_argument("--no-config-sync", action="store_true")
    r.add_argument("--config-interval", type=float, default=30.0, metavar="SECONDS")
    r.add_argument("--dest-read-only", action="store_true")
    r.add_argument("--groups", default="", metavar="G1,G2")
    r.add_argument("--checkpoint-interval", type=float, default=10.0, metavar="SECONDS")
    r.add_argument("--sync-group-offsets", action="store_true")
    r.add_argument("--listen-metrics", default="", metavar="HOST:PORT")
    r.add_argument("--log-level", default="INFO")
    _acl_args(r)
    _tls_args(r)
    r.set_defaults(run=partial(run_rocketmq, common=common))

    t = sub.add_parser(
        "translate",
        parents=[common.parent],
        help="where a consumer group resumes on the destination (through offset-syncs)",
    )
    _cluster_args(t)
    t.add_argument("--group", required=True)
    t.add_argument("--write", action="store_true", help="write them to the destination brokers")
    t.set_defaults(run=partial(run_translate, common=common))


def config_of(args: argparse.Namespace, connection: ConnectionOptions) -> Any:
    from replicator.rocketmq.config import RocketMQReplicatorConfig

    config = RocketMQReplicatorConfig(
        source_namesrv=args.source_namesrv,
        dest_namesrv=args.dest_namesrv,
        job=args.job,
        endpoints=list(connection.endpoints),
        topics=_csv(args.topics),
        topic_pattern=args.topic_pattern,
        rename=_rename(args.rename),
        queue_map=args.queue_map,
        source_cluster=args.source_cluster,
        dest_cluster=args.dest_cluster,
        lease_ttl_s=args.lease_ttl,
        dismiss=args.dismiss,
        on_offset_lost=args.on_offset_lost,
        include_retry=args.include_retry,
        include_dlq=args.include_dlq,
        max_in_flight=args.max_in_flight,
        rate_limit=args.rate,
        commit_interval_s=args.commit_interval,
        offset_sync_every=args.offset_sync_every,
        pull_batch=args.pull_batch,
        refresh_s=args.refresh_interval,
        heartbeat_interval_s=args.heartbeat_interval,
        sync_config=not args.no_config_sync,
        config_interval_s=args.config_interval,
        dest_read_only=args.dest_read_only,
        groups=_csv(args.groups),
        checkpoint_interval_s=args.checkpoint_interval,
        sync_group_offsets=args.sync_group_offsets,
        client_options=connection.client_kwargs(),
        access_key=args.access_key,
        secret_key=_secret_key(args) if args.access_key else "",
        source_namesrv_tls=args.source_namesrv_tls,
        dest_namesrv_tls=args.dest_namesrv_tls,
    )
    if args.worker:
        config.worker = args.worker
    config.validate()
    return config


def run_rocketmq(args: argparse.Namespace, common: Common) -> int:
    from replicator.cli_common import parse_listen, run_worker, setup_logging
    from replicator.rocketmq.errors import ConfigError
    from replicator.rocketmq.metrics import RocketMQMetrics
    from replicator.rocketmq.replicator import RocketMQReplicator

    setup_logging(args.log_level)
    try:
        config = config_of(args, common.connection(args))
        listen = parse_listen(args.listen_metrics) if args.listen_metrics else None
    except (ConfigError, ValueError) as exc:  # OptionError too
        print(f"metaledger: replicate rocketmq: {exc}", file=sys.stderr)
        return EXIT_USAGE
    metrics = RocketMQMetrics(config.job)
    what = ",".join(config.topics) or f"/{config.topic_pattern}/"
    banner = (
        f"replicating {what} from {config.source_namesrv} to {config.dest_namesrv}"
        f" as job {config.job} (worker {config.worker})"
    )
    return run_worker(
        "rocketmq", lambda: RocketMQReplicator(config, metrics=metrics), metrics, listen, banner
    )


def run_translate(args: argparse.Namespace, common: Common) -> int:
    import asyncio

    from nameserver.client import Client, ClientError
    from replicator.rocketmq.checkpoint import CheckpointError
    from replicator.rocketmq.client import ClusterClient
    from replicator.rocketmq.errors import RocketMQError
    from replicator.rocketmq.groups import sync_group, translate_group

    async def go(client: Client) -> int:
        source = ClusterClient(args.source_namesrv)
        dest = ClusterClient(args.dest_namesrv)
        try:
            rows = await translate_group(client, args.job, source, dest, args.group)
            if not rows:
                print(f"metaledger: replicate translate: job {args.job!r} has committed nothing"
                      f" of a topic group {args.group!r} consumes", file=sys.stderr)  # fmt: skip
                return EXIT_NOT_FOUND
            table: list[tuple[str, ...]] = [
                ("TOPIC", "QUEUE", "BROKER", "QUEUE_ID", "OFFSET", "BASIS")
            ]
            table += [
                (
                    r.topic,
                    str(r.queue_index),
                    r.broker_name,
                    str(r.queue_id),
                    str(r.offset),
                    r.basis,
                )
                for r in rows
            ]
            print(_render(table))
            if args.write:
                moved = await sync_group(dest, args.group, rows)
                print(f"wrote {moved} queue offsets of group {args.group} to the destination")
            return EXIT_OK
        finally:
            await source.close()
            await dest.close()

    try:
        connection = common.connection(args)
    except OptionError as exc:
        print(f"metaledger: replicate translate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with Client(
            list(connection.endpoints), timeout_s=10, **connection.client_kwargs()
        ) as client:
            return asyncio.run(go(client))
    except (ClientError, RocketMQError, CheckpointError, OSError) as exc:
        print(f"metaledger: replicate translate: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE


def queue_rows(docs: list[dict[str, Any]]) -> str:
    """The RocketMQ jobs' status: one row per source queue."""
    rows = [tuple(h for h, _ in QUEUE_COLUMNS)]
    for d in docs:
        for q in d.get("queues", []):
            merged = {**d, **q}
            rows.append(tuple(str(merged.get(f, "")) for _, f in QUEUE_COLUMNS))
    return _render(rows)


def _render(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )
