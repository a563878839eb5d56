"""The Redis replicator (docs/redis-replicator.md; ROCKETMQ-193's design): a Redis replica that
streams every write into RocketMQ, acks only what the sink confirmed, and resumes with PSYNC from
its checkpoint.

Layers, outermost last: ``resp`` (RESP2/RESP3 parser), ``protocol`` (the replica handshake and
PSYNC phases, offsets; sans-I/O), ``rdb/`` (streaming RDB parser), ``commands`` (the command
table from COMMAND INFO/DOCS, keys by key specs), ``events`` and ``routing`` (writes → messages
per queue), ``driver`` (the one asyncio loop), then checkpoints, leases and the CLI.
"""
