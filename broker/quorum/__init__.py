"""Quorum write and role management of a broker replica (issue 17 item 5).

policy        needAckNums (seed 004) and the sync/async rules (seed 001): pure functions, one table
group         GroupView: the replica group as metaledger last answered it
replication   QuorumReplication: the send path's Replication on a master replica
role          RoleManager: register, heartbeat, follow master changes, fence
isr           IsrKeeper: the master's SyncStateSet upkeep through AlterSyncStateSet
"""
