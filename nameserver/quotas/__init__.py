"""Quotas per record type: records, apply rules (usage and checks), the metaledger.v1.Quotas gRPC service."""
