"""HA replication of the commit log."""
