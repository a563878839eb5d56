"""The RocketMQ replicator (issue 19, RIP-45): topics of one RocketMQ cluster copied into
another, with fenced source offsets, offset-syncs and consumer-group offset translation, all
kept in metaledger. Layout and interfaces: the module docstrings."""
