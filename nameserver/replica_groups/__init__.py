"""Replica groups: records, apply rules (the controller), the gRPC service, replica liveness (a leader duty)."""
