"""Cluster membership and alarms: member records and etcd's Cluster gRPC service; alarm
records (etcd's NOSPACE, CORRUPT), the NOSPACE write refusal and backend quota
(:mod:`nameserver.cluster.nospace`), and a member's full disk raised as its alarm
(:mod:`nameserver.cluster.liveness`)."""
