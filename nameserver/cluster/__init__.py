"""Cluster membership: member records and etcd's Cluster gRPC service."""
