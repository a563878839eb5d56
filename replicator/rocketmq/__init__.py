"""The RocketMQ replicator (docs/rocketmq-replicator.md; RIP-45): topics of one RocketMQ cluster
copied into another at least once, with fenced source offsets, offset-syncs and consumer-group
offset translation, all kept in metaledger.

- ``wire`` (sans-I/O requests, answers, the stored-record format), ``routes`` and ``client``
  (``ClusterClient``: one cluster through its nameserver): talking to RocketMQ;
- ``watermark``, ``checkpoint`` (the commit record and offset translation) and ``assign``
  (workers, leases, per-queue claims): the state;
- ``source`` (one source queue replicated), ``replicator`` (a worker), ``connectors``
  (heartbeats, topic config, group offsets), ``groups``, ``config``, ``metrics``, ``cli``.
"""
