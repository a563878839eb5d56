"""``metaledger route get|clusters|brokers|topics|topic create|topic delete`` and
``metaledger kvconfig get|put|delete|list``: RocketMQ route data over gRPC.

Route reads are eventual (any node answers from its own image); every answer shows the
apply offset of the image that served it.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from nameserver.cli._common import make_client, non_negative_int, printer, report_revision
from nameserver.cli.exitcodes import ExitCode
from nameserver.cli.printers import format_table
from nameserver.client.routing import QueueData

if TYPE_CHECKING:
    from nameserver.cli._common import Subparsers


def run_get(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        r = client.route_get(args.topic)
    doc: dict[str, Any] = {
        "topic": r.topic,
        "brokerDatas": [
            {
                "cluster": b.cluster,
                "brokerName": b.broker_name,
                "brokerAddrs": {str(i): a for i, a in sorted(b.addrs.items())},
                "zoneName": b.zone,
                "enableActingMaster": b.enable_acting_master,
            }
            for b in r.brokers
        ],
        "queueDatas": [
            {
                "brokerName": q.broker_name,
                "readQueueNums": q.read_queue_nums,
                "writeQueueNums": q.write_queue_nums,
                "perm": q.perm,
                "topicSysFlag": q.topic_sys_flag,
            }
            for q in r.queues
        ],
        "apply_offset": r.apply_offset,
    }
    if r.order_topic_conf:
        doc["orderTopicConf"] = r.order_topic_conf
    addrs = {b.broker_name: b.addrs for b in r.brokers}
    rows = [
        [
            q.broker_name,
            ", ".join(f"{i}={a}" for i, a in sorted(addrs.get(q.broker_name, {}).items())),
            q.read_queue_nums,
            q.write_queue_nums,
            q.perm,
        ]
        for q in r.queues
    ]
    text = format_table(("BROKER", "ADDRS (ID=ADDR)", "READ", "WRITE", "PERM"), rows)
    printer(args).report(doc, f"{text}\n(apply offset {r.apply_offset})")
    return ExitCode.OK


def run_clusters(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        info = client.route_cluster_info()
    doc = {"clusters": info.clusters, "apply_offset": info.apply_offset}
    rows = [[c, ", ".join(names)] for c, names in info.clusters.items()]
    text = format_table(("CLUSTER", "BROKER NAMES"), rows)
    printer(args).report(doc, f"{text}\n(apply offset {info.apply_offset})")
    return ExitCode.OK


def run_brokers(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        info = client.route_cluster_info()
    brokers = [b for b in info.brokers if not args.cluster or b.cluster == args.cluster]
    doc = {
        "brokers": [
            {
                "cluster": b.cluster,
                "brokerName": b.broker_name,
                "brokerId": b.broker_id,
                "addr": b.addr,
                "haAddr": b.ha_addr,
                "zone": b.zone,
                "heartbeatTimeoutMs": b.heartbeat_timeout_ms,
                "registeredOffset": b.registered_offset,
            }
            for b in brokers
        ],
        "apply_offset": info.apply_offset,
    }
    rows = [
        [b.cluster, b.broker_name, b.broker_id, b.addr, b.heartbeat_timeout_ms // 1000]
        for b in brokers
    ]
    text = format_table(("CLUSTER", "BROKER", "ID", "ADDR", "TIMEOUT S"), rows)
    printer(args).report(doc, f"{text}\n(apply offset {info.apply_offset})")
    return ExitCode.OK


def run_topics(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        t = client.route_topics(args.cluster, args.system)
    doc = {"topicList": t.topics, "apply_offset": t.apply_offset}
    if t.broker_addr:
        doc["brokerAddr"] = t.broker_addr
    printer(args).report(doc, "\n".join(t.topics))
    return ExitCode.OK


def run_topic_create(args: argparse.Namespace) -> int:
    queues = [
        QueueData(b, args.read_queues, args.write_queues, args.perm, 0, args.order)
        for b in args.broker
    ]
    with make_client(args) as client:
        revision = client.route_topic_create(args.topic, queues)
    return report_revision(args, revision)


def run_topic_delete(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        revision, deleted = client.route_topic_delete(args.topic, args.cluster)
    where = f" on cluster {args.cluster}" if args.cluster else ""
    if deleted:
        text = f"topic {args.topic}: deleted its queues on {deleted} broker(s){where}"
    else:  # idempotent, as etcdctl del and mqadmin deleteTopic
        text = f"topic {args.topic}: no queues{where}, nothing to delete"
    printer(args).report({"revision": revision, "deleted": deleted}, text)
    return ExitCode.OK


def run_kv_get(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        value = client.kvconfig_get(args.namespace, args.key)
    printer(args).report({"namespace": args.namespace, "key": args.key, "value": value}, value)
    return ExitCode.OK


def run_kv_put(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        revision = client.kvconfig_put(args.namespace, args.key, args.value)
    return report_revision(args, revision)


def run_kv_delete(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        deleted = client.kvconfig_delete(args.namespace, args.key)
    what = f"{args.namespace}/{args.key}"
    text = f"{what}: deleted" if deleted else f"{what}: no such item, nothing to delete"
    printer(args).report({"deleted": deleted}, text)
    return ExitCode.OK  # idempotent, as etcdctl del


def run_kv_list(args: argparse.Namespace) -> int:
    with make_client(args) as client:
        items = client.kvconfig_list(args.namespace)
    printer(args).report(
        {"namespace": args.namespace, "table": items},
        format_table(("KEY", "VALUE"), [[k, v] for k, v in sorted(items.items())]),
    )
    return ExitCode.OK


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    group = sub.add_parser("route", parents=[common], help="RocketMQ routes (eventual reads)")
    cmds = group.add_subparsers(dest="route_command", required=True, metavar="COMMAND")
    g = cmds.add_parser("get", parents=[common], help="a topic's route")
    g.add_argument("topic")
    g.set_defaults(run=run_get)
    cmds.add_parser(
        "clusters", parents=[common], help="clusters and their broker names"
    ).set_defaults(run=run_clusters)
    b = cmds.add_parser("brokers", parents=[common], help="registered brokers")
    b.add_argument("--cluster", default="", help="only this cluster's brokers")
    b.set_defaults(run=run_brokers)
    ts = cmds.add_parser("topics", parents=[common], help="topic list")
    ts.add_argument("--cluster", default="", help="only topics on this cluster's brokers")
    ts.add_argument("--system", action="store_true", help="the system topic list")
    ts.set_defaults(run=run_topics)
    topic = cmds.add_parser("topic", parents=[common], help="create or delete a topic")
    tcmds = topic.add_subparsers(dest="topic_command", required=True, metavar="COMMAND")
    c = tcmds.add_parser("create", parents=[common], help="create or update a topic's queues")
    c.add_argument("topic")
    c.add_argument(
        "--broker",
        action="append",
        required=True,
        metavar="NAME",
        help="a registered broker name to put queues on (repeat for more)",
    )
    c.add_argument("--read-queues", type=non_negative_int, default=8, metavar="N")
    c.add_argument("--write-queues", type=non_negative_int, default=8, metavar="N")
    c.add_argument("--perm", type=non_negative_int, default=6, metavar="BITS", help="6 = RW")
    c.add_argument("--order", action="store_true", help="an ordered topic")
    c.set_defaults(run=run_topic_create)
    d = tcmds.add_parser("delete", parents=[common], help="delete a topic's queue data")
    d.add_argument("topic")
    d.add_argument("--cluster", default="", help="only on this cluster's brokers")
    d.set_defaults(run=run_topic_delete)

    kv = sub.add_parser("kvconfig", parents=[common], help="RocketMQ KV config")
    kcmds = kv.add_subparsers(dest="kvconfig_command", required=True, metavar="COMMAND")
    kg = kcmds.add_parser("get", parents=[common], help="one item")
    kg.add_argument("namespace")
    kg.add_argument("key")
    kg.set_defaults(run=run_kv_get)
    kp = kcmds.add_parser("put", parents=[common], help="set one item")
    kp.add_argument("namespace")
    kp.add_argument("key")
    kp.add_argument("value")
    kp.set_defaults(run=run_kv_put)
    kd = kcmds.add_parser("delete", parents=[common], help="delete one item")
    kd.add_argument("namespace")
    kd.add_argument("key")
    kd.set_defaults(run=run_kv_delete)
    kl = kcmds.add_parser("list", parents=[common], help="a namespace's items")
    kl.add_argument("namespace")
    kl.set_defaults(run=run_kv_list)
