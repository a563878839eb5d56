"""Replicator offsets: records, apply rules, the metaledger.v1.Offsets gRPC service."""
