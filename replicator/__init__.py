"""The replicators: programs that move data into or between RocketMQ clusters and keep their
positions in metaledger.

- ``redis/``: ``metaledger replicate redis`` poses as a Redis replica (PSYNC, sans-I/O RESP
  and RDB parsers), turns every write of its master into a RocketMQ message routed by key,
  and acks to Redis and checkpoints in metaledger only what the broker stored.
- ``rocketmq/``: ``metaledger replicate rocketmq`` copies topics from one RocketMQ cluster to
  another at least once, committing a source offset in metaledger only when the destination
  stored everything below it; heartbeats, topic config sync, loop prevention and consumer
  offset translation for failover.
- ``sinks/``: where messages go (a RocketMQ cluster over remoting, the ``rocketmq`` wheel, a
  file); ``lease.py`` one active worker per job; ``status.py`` what a job publishes;
  ``cli.py`` the ``metaledger replicate`` commands.

Both are ordinary clients of metaledger (``nameserver.client`` only) and speak RocketMQ
through ``rmq``. See docs/redis-replicator.md and docs/rocketmq-replicator.md.
"""
