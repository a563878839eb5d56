"""What a node's ``GET /metrics`` shows (:class:`nameserver.metrics.MetricsServer` calls
:func:`node_metrics` per scrape): cheap reads of the node's in-memory state only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nameserver.metrics import REJECTIONS, Metric, health_metrics

if TYPE_CHECKING:
    from nameserver.server import Node


def node_metrics(n: Node) -> list[Metric]:
    st = n.log.engine_status()
    off = n.log.offsets()
    image = n.state.image
    node = {"node": n.config.node_id}

    def gauge(name: str, help_text: str, value: float) -> Metric:
        return (f"metaledger_{name}", help_text, "gauge", [(node, value)])

    def counter(name: str, help_text: str, value: float) -> Metric:
        return (f"metaledger_{name}", help_text, "counter", [(node, value)])

    return [
        gauge("end_offset", "Last offset in this node's log, committed or not.", off.end_offset),
        gauge("commit_offset", "Last offset known replicated to a majority.", off.commit_offset),
        gauge(
            "apply_offset",
            "Last offset built into this node's image (what eventual route reads see).",
            off.apply_offset,
        ),
        gauge("applied_lag", "commit_offset - apply_offset.", off.commit_offset - off.apply_offset),
        gauge("flushed_offset", "Last change-log offset written to disk.", off.flushed_offset),
        gauge("kv_history_versions", "Past kv versions kept.", n.kv_history.version_count),
        gauge(
            "kv_history_bytes",
            "Bytes of past kv versions kept (counted against --quota-backend-bytes).",
            n.kv_history.version_bytes,
        ),
        gauge("kv_history_floor", "Oldest readable kv revision.", n.kv_history.floor),
        gauge("kv_compact_revision", "kv compaction revision.", image.mvcc.compact_revision),
        gauge("term", "Raft term.", st.term),
        (
            "metaledger_role",
            "1 for this node's role.",
            "gauge",
            [({**node, "role": st.role}, 1)],
        ),
        gauge("has_quorum", "1 if this node sees a quorum.", 1 if st.has_quorum else 0),
        counter("items_proposed_total", "Consensus items proposed here.", n.log.items_proposed),
        counter(
            "requests_proposed_total",
            "Requests proposed here (several share one item: group commit).",
            n.log.requests_proposed,
        ),
        counter(
            "apply_groups_total",
            "Apply groups applied here (one image published, one change-log write each).",
            n.log.groups_applied,
        ),
        counter(
            "requests_applied_total",
            "Requests applied here (requests_applied_total / apply_groups_total: the batching).",
            n.log.requests_applied,
        ),
        counter(
            "grpc_extra_accepts_total",
            "Calls of the hot gRPC methods taken by the extra accepts (--grpc-acceptors).",
            n.acceptors.accepted if n.acceptors is not None else 0,
        ),
        counter(
            "grpc_front_calls_total",
            "Calls of the hot gRPC methods the Go gRPC front handed to this node "
            "(--grpc-front go).",
            n.front.calls if n.front is not None else 0,
        ),
        counter(
            "grpc_front_starts_total",
            "Times this node started its Go gRPC front (more than 1: it exited and was "
            "started again).",
            n.front.starts if n.front is not None else 0,
        ),
        gauge("watchers", "Watchers registered on this node.", n.watch_hub.watchers),
        counter(
            "route_reads_total",
            "Route reads served from this node's image (remoting and gRPC).",
            n.routes.route_reads,
        ),
        gauge(
            "remoting_connections",
            "Open remoting connections.",
            n.remoting.connection_count,
        ),
        (
            "metaledger_remoting_connections_closed_total",
            "Remoting connections the node closed, by reason.",
            "counter",
            [
                ({**node, "reason": reason}, value)
                for reason, value in (
                    ("idle", n.remoting.idle_closed),
                    ("frame_timeout", n.remoting.frame_timeouts),
                    ("over_limit", n.remoting.refused),
                    ("protocol_error", n.remoting.protocol_errors),
                )
            ],
        ),
        *health_metrics(n.log.health, node),
        REJECTIONS.metric(node),
        gauge("kv_keys", "Keys in the kv record type.", len(image.kv)),
        gauge("leases", "Live leases.", len(image.leases)),
    ]
