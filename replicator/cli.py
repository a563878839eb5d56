"""``metaledger replicate …``: the replicators' command group (loaded by ``nameserver.cli``
through the entry-point group ``metaledger.commands``, so the nameserver never imports it).

    metaledger replicate redis --source redis://HOST:PORT --topic T --job NAME
        [--cluster-shard SLOT|NODE_ID]    (a Redis Cluster: one job per shard, cluster.py)
    metaledger replicate status [--kind redis|rocketmq] [--job NAME] [--output table|json]

``status`` reads what the active worker of each job publishes (``replicator.status``) and
each Redis job's checkpoint (the fenced ``Offsets`` record); it needs no connection to a
worker. Exit 0; 3 when no endpoint answered; 4 when ``--job`` names no running job.

    metaledger replicate redis --source redis://HOST:PORT --topic T --job NAME
        [--listen-metrics HOST:PORT]

``redis`` runs one worker until SIGINT/SIGTERM; ``--listen-metrics`` serves its Prometheus
metrics (replicator/redis/metrics.py); a full sync's progress goes to stderr each second.

Every ``replicate`` command finds metaledger as every ``metaledger`` command does:
``--endpoints``, else ``$METALEDGER_ENDPOINTS``, else ``127.0.0.1:9877`` (``common.connection``,
:mod:`replicator.cli_common`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from nameserver.client import OptionError
from replicator.cli_common import EXIT_OK, parse_listen, run_worker, setup_logging

if TYPE_CHECKING:
    from replicator.cli_common import Common

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

EXIT_UNAVAILABLE, EXIT_NOT_FOUND = 3, 4

#: status columns: (heading, the status document's field)
COLUMNS = (
    ("KIND", "kind"),
    ("JOB", "job"),
    ("WORKER", "worker"),
    ("SOURCE", "source"),
    ("REPLID", "replid"),
    ("PARSED", "parsed_offset"),
    ("CONFIRMED", "confirmed_offset"),
    ("ACKED", "acked_offset"),
    ("CHECKPOINT", "checkpoint_offset"),
    ("LAG_BYTES", "lag_bytes"),
    ("LAG_S", "lag_s"),
)


def register(subparsers: Subparsers, common: Common) -> None:
    p = subparsers.add_parser(
        "replicate",
        help="run and inspect replicators (Redis → RocketMQ, RocketMQ → RocketMQ)",
        description="Replicators keep their checkpoints, leases and status in metaledger.",
    )
    sub = p.add_subparsers(dest="replicate_command", metavar="COMMAND", required=True)
    s = sub.add_parser(
        "status",
        parents=[common.parent],
        help="each job's source, offsets and lag, as its active worker last published them",
    )
    s.add_argument("--kind", choices=("redis", "rocketmq"), default="")
    s.add_argument("--job", default="", metavar="NAME")
    s.set_defaults(run=partial(run_status, common=common))

    r = sub.add_parser(
        "redis",
        parents=[common.parent],
        help="pose as a Redis replica and stream every write into a RocketMQ topic",
        description="Run one worker of a Redis replication job until SIGINT/SIGTERM. Several"
        " workers of one --job may run: one is active (metaledger lease), the others wait and"
        " take over from the job's checkpoint.",
    )
    r.add_argument(
        "--source",
        required=True,
        metavar="URL",
        help="redis://[[user]:password@]host[:port] (password also from $REDISCLI_AUTH)",
    )
    r.add_argument(
        "--cluster-shard",
        default=None,
        metavar="SLOT|NODE_ID",
        help="a Redis Cluster: --source is a seed node; replicate the shard that serves this"
        " slot (0..16383) or that this node id belongs to, following its master across"
        " failovers (one job per shard)",
    )
    r.add_argument("--topic", required=True, help="the RocketMQ topic (create it first)")
    r.add_argument("--job", required=True, metavar="NAME", help="the job: lease and checkpoint")
    r.add_argument("--worker", default="", help="this worker's name (default host:pid)")
    r.add_argument(
        "--sink",
        choices=("rocketmq", "wheel", "file"),
        default="rocketmq",
        help="rocketmq (default: the project's producer), wheel (the rocketmq C++ client, needs"
        " --namesrv) or file (JSON lines, --sink-file or stdout; debugging)",
    )
    r.add_argument("--sink-file", default=None, metavar="PATH")
    r.add_argument("--namesrv", default=None, metavar="HOST:PORT")
    r.add_argument("--lease-ttl", type=int, default=10, metavar="SECONDS")
    r.add_argument("--spool-dir", default=None, metavar="DIR", help="where a backlog spills")
    r.add_argument("--spool-memory-mb", type=int, default=64, metavar="MB")
    r.add_argument("--max-in-flight", type=int, default=4096, metavar="N")
    r.add_argument("--no-capa-eof", action="store_true", help="ask for disk-style RDB transfers")
    r.add_argument("--no-capa-psync2", action="store_true")
    r.add_argument(
        "--listen-metrics",
        default="",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (default: off)",
    )
    r.add_argument("--log-level", default="INFO")
    r.set_defaults(run=partial(run_redis, common=common))

    from replicator.rocketmq import cli as rocketmq_cli

    rocketmq_cli.register(sub, common)


def run_status(args: argparse.Namespace, common: Common) -> int:
    from nameserver.client import ClientError
    from replicator.status import read_statuses

    try:
        with common.connection(args).connect() as client:
            docs = read_statuses(client, args.kind, args.job)
    except (ClientError, OptionError) as exc:
        print(f"metaledger: replicate status: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    now = time.time()
    for d in docs:
        d["age_s"] = round(now - float(d.get("updated", now)), 1)
    if getattr(args, "output", "table") == "json":
        print(json.dumps(docs, indent=2, sort_keys=True))
    else:
        from replicator.rocketmq.cli import queue_rows

        redis_docs = [d for d in docs if d.get("kind") != "rocketmq"]
        rocketmq_docs = [d for d in docs if d.get("kind") == "rocketmq"]
        if redis_docs or not rocketmq_docs:
            print(render_table(redis_docs))
        if rocketmq_docs:
            print(queue_rows(rocketmq_docs))
    if args.job and not docs:
        print(f"metaledger: replicate status: no running job {args.job!r}", file=sys.stderr)
        return EXIT_NOT_FOUND
    return EXIT_OK


def run_redis(args: argparse.Namespace, common: Common) -> int:
    from replicator.redis.config import RedisReplicatorConfig, parse_source
    from replicator.redis.errors import ConfigError
    from replicator.redis.metrics import RedisMetrics, SyncProgress
    from replicator.redis.replicator import RedisReplicator

    setup_logging(args.log_level)
    try:
        connection = common.connection(args)
        config = RedisReplicatorConfig(
            source=parse_source(args.source),
            topic=args.topic,
            job=args.job,
            endpoints=list(connection.endpoints),
            lease_ttl_s=args.lease_ttl,
            spool_dir=args.spool_dir,
            spool_memory_bytes=args.spool_memory_mb * 1024 * 1024,
            max_in_flight=args.max_in_flight,
            capa_eof=not args.no_capa_eof,
            capa_psync2=not args.no_capa_psync2,
            sink=args.sink,
            sink_path=args.sink_file,
            namesrv=args.namesrv,
            cluster_shard=args.cluster_shard,
            client_options=connection.client_kwargs(),
        )
        if args.worker:
            config.worker = args.worker
        config.validate()
        listen = parse_listen(args.listen_metrics) if args.listen_metrics else None
    except (ConfigError, ValueError) as exc:  # OptionError too
        print(f"metaledger: replicate redis: {exc}", file=sys.stderr)
        return 2
    metrics = RedisMetrics(config.job, SyncProgress(sys.stderr))
    banner = (
        f"replicating {config.source}"
        + (f" (cluster shard {config.cluster_shard})" if config.cluster_shard else "")
        + f" to topic {config.topic} as job {config.job} (worker {config.worker})"
    )
    return run_worker(
        "redis", lambda: RedisReplicator(config, metrics=metrics), metrics, listen, banner
    )


def render_table(docs: list[dict[str, Any]]) -> str:
    rows = [[h for h, _ in COLUMNS]]
    for d in docs:
        row = []
        for _, field in COLUMNS:
            v = d.get(field, "")
            row.append(v[:12] if field == "replid" and isinstance(v, str) else str(v))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )
