"""The RocketMQ replicator (issue 19): copies topics of one RocketMQ cluster into another.

``wire`` (sans-I/O requests and answer parsers: pull, offsets, routes, topics, the stored
record format) and ``client`` (``ClusterClient``, asyncio, one cluster through its
nameserver) are the source side; sinks are in ``replicator.sinks``.
"""
