"""etcd leases: records, apply rules, the Lease gRPC service, expiry (a leader duty)."""
