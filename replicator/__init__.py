"""Redis and RocketMQ replicators (a later issue)."""
