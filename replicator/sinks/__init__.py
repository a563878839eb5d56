"""Where replicated writes go: one small interface (``base.Sink``) with a RocketMQ sink (the
project's own remoting codec, and the ``rocketmq`` wheel) and a file/stdout sink.

    base      OutMessage (the record a sink sends), the Sink protocol, QueueLedger
    errors    SinkError and its tree
    rocketmq  RocketMQSink: asyncio producer on rmq's codec and pipelined connection (routes
              from metaledger)
    wheel     WheelSink: the rocketmq 0.4.4 wheel's C++ producer on a thread pool
    file      FileSink: JSON lines to a file or stdout
    routes, wire   the RocketMQ sink's parts (route → write queues, batch bytes and UNIQ_KEY)

This package imports only ``base`` and ``errors`` (light: no gRPC); import a sink's module to
use it.
"""

from replicator.sinks.base import OutMessage, QueueLedger, Sink
from replicator.sinks.errors import (
    MessageRejected,
    QueueFailed,
    SendFailed,
    SinkClosed,
    SinkError,
    SinkUnavailable,
)

__all__ = [
    "MessageRejected",
    "OutMessage",
    "QueueFailed",
    "QueueLedger",
    "SendFailed",
    "Sink",
    "SinkClosed",
    "SinkError",
    "SinkUnavailable",
]
